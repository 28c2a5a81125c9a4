// The CPU side of `bench kernels`: the sweep, the FLOP and byte counts, tolerances and timing.
#include "bench/suites/kernels.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "bench/harness/cuda_only.h"
#include "bench/suites/attention.h"
#include "bench/suites/moe.h"
#include "bench/suites/moe_fp8.h"
#include "bench/suites/router.h"
#include "braid/buffer.h"
#include "braid/error.h"

namespace braid::bench {

namespace {

constexpr double kBf16 = 2, kF32 = 4, kI32 = 4;
// gemm on fp8 weights against the exact product: the activations rounded to e4m3 (up to 2^-4 of
// each value, ~3.6% rms) bound the output's relative error (tests/ops/gemm/test_gemm_fp8.cpp).
constexpr double kFp8GemmTolerance = 0.05;

// A dense model's dimensions, as its config.json gives them.
struct DenseModel {
  const char* name;
  int64_t hidden, inter, q_heads, kv_heads, head_dim, vocab;
};
constexpr DenseModel kLlama1B{"llama-3.2-1b", 2048, 8192, 32, 8, 64, 128256};
constexpr DenseModel kLlama8B{"llama-3-8b", 4096, 14336, 32, 8, 128, 128256};

// The ops that move or transform rows without a matrix product, swept over tokens x model.
constexpr KernelOp kRowOps[] = {
    KernelOp::embedding, KernelOp::rms_norm,  KernelOp::add_rms_norm,
    KernelOp::rope_apply, KernelOp::silu_mul, KernelOp::softmax,
    KernelOp::argmax,    KernelOp::kv_append, KernelOp::qk_norm_rope_kv_append,
    KernelOp::add_inplace};

KernelCase row_case(KernelOp op, const DenseModel& m, int64_t tokens) {
  KernelCase c;
  c.op = op;
  c.model = m.name;
  c.tokens = tokens;
  c.hidden = m.hidden;
  c.inter = m.inter;
  c.vocab = m.vocab;
  c.q_heads = m.q_heads;
  c.kv_heads = m.kv_heads;
  c.head_dim = m.head_dim;
  return c;
}

// softmax and argmax run over a vocabulary: Llama-2's 32000 and Llama-3's 128256 entries.
KernelCase vocab_case(KernelOp op, int64_t vocab, int64_t tokens) {
  KernelCase c;
  c.op = op;
  c.model = vocab == 32000 ? "llama-2" : "llama-3";
  c.tokens = tokens;
  c.vocab = vocab;
  return c;
}

KernelCase gemm_case(KernelOp op, const char* model, const char* variant, int64_t m, int64_t n,
                     int64_t k) {
  KernelCase c;
  c.op = op;
  c.model = model;
  c.variant = variant;
  c.tokens = m;
  c.n = n;
  c.k = k;
  if (op == KernelOp::swiglu_gemm_add) c.inter = k;
  if (op == KernelOp::rms_norm_gemm_argmax) c.vocab = n;
  return c;
}

KernelCase attention_case(KernelOp op, const char* model, int64_t batch, int64_t seq,
                          int64_t q_heads, int64_t kv_heads, int64_t head_dim) {
  KernelCase c;
  c.op = op;
  c.model = model;
  c.tokens = batch;
  c.seq_len = seq;
  c.q_heads = q_heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  return c;
}

// Qwen3-30B-A3B's MoE layer (bench moe's qwen3 model): 128 experts, top 8, H 2048, I 768.
KernelCase qwen3_case(KernelOp op, int64_t tokens, const char* variant = "") {
  const MoeModel m = qwen3_model();
  KernelCase c;
  c.op = op;
  c.model = "qwen3-30b-a3b";
  c.variant = variant;
  c.tokens = tokens;
  c.hidden = m.hidden;
  c.inter = m.inter;
  c.experts = m.experts;
  c.top_k = m.k;
  return c;
}

// DeepSeek-V3's router (seed 003): 256 experts, 8 groups, the best 4 kept, top 8.
KernelCase deepseek_router_case(int64_t tokens) {
  KernelCase c;
  c.op = KernelOp::moe_route_grouped;
  c.model = "deepseek-v3";
  c.tokens = tokens;
  c.routed_experts = c.experts = kSeed003GlobalExperts;
  c.top_k = kSeed003TopK;
  c.n_group = kSeed003Groups;
  c.topk_group = kSeed003TopkGroup;
  return c;
}

// DeepSeek-V3's FP8 MoE layer (seed 003): the 32 local experts of 256, H 7168, I 2048, top 8.
KernelCase deepseek_fp8_case(KernelOp op, int64_t tokens, const char* variant = "",
                             int terms = 0) {
  const Fp8Dims d = fp8_dims(Fp8Layer::seed003);
  KernelCase c;
  c.op = op;
  c.model = "deepseek-v3";
  c.variant = variant;
  c.tokens = tokens;
  c.hidden = d.hidden;
  c.inter = d.inter;
  c.experts = d.experts;
  c.routed_experts = d.routed_experts;
  c.top_k = d.k;
  c.n_group = kSeed003Groups;
  c.topk_group = kSeed003TopkGroup;
  c.terms = terms;
  return c;
}

MoeShape qwen3_shape(const KernelCase& c) {
  MoeShape s;
  s.model = qwen3_model();
  s.tokens = c.tokens;
  return s;
}

MoeRouting balanced_routing(const KernelCase& c) {
  const int64_t pairs = c.tokens * c.top_k;
  return {pairs, double(balanced_active_experts(pairs, c.experts))};
}

std::string join_names(const std::vector<KernelOp>& ops) {
  std::string s;
  for (KernelOp op : ops) s += (s.empty() ? "" : ", ") + std::string(kernel_op_name(op));
  return s;
}

}  // namespace

const char* kernel_op_name(KernelOp op) {
  switch (op) {
    case KernelOp::embedding: return "embedding";
    case KernelOp::rms_norm: return "rms_norm";
    case KernelOp::add_rms_norm: return "add_rms_norm";
    case KernelOp::rope_apply: return "rope_apply";
    case KernelOp::silu_mul: return "silu_mul";
    case KernelOp::softmax: return "softmax";
    case KernelOp::argmax: return "argmax";
    case KernelOp::kv_append: return "kv_append";
    case KernelOp::qk_norm_rope_kv_append: return "qk_norm_rope_kv_append";
    case KernelOp::add_inplace: return "add_inplace";
    case KernelOp::gemm: return "gemm";
    case KernelOp::rms_norm_gemm: return "rms_norm_gemm";
    case KernelOp::gemm_add: return "gemm_add";
    case KernelOp::swiglu_gemm_add: return "swiglu_gemm_add";
    case KernelOp::rms_norm_gemm_argmax: return "rms_norm_gemm_argmax";
    case KernelOp::attention_prefill: return "attention_prefill";
    case KernelOp::attention: return "attention";
    case KernelOp::attention_decode: return "attention_decode";
    case KernelOp::paged_kv_gather: return "paged_kv_gather";
    case KernelOp::moe_route_topk_softmax: return "moe_route_topk_softmax";
    case KernelOp::moe_route_grouped: return "moe_route_grouped";
    case KernelOp::moe_permute: return "moe_permute";
    case KernelOp::moe_gather: return "moe_gather";
    case KernelOp::moe_combine: return "moe_combine";
    case KernelOp::moe_grouped_gemm: return "moe_grouped_gemm";
    case KernelOp::moe_experts: return "moe_experts";
    case KernelOp::moe_fp8_quantize: return "moe_fp8_quantize";
    case KernelOp::moe_gather_fp8: return "moe_gather_fp8";
    case KernelOp::moe_grouped_gemm_fp8: return "moe_grouped_gemm_fp8";
    case KernelOp::moe_fp8_block_scale: return "moe_fp8_block_scale";
  }
  return "?";
}

std::vector<KernelOp> all_kernel_ops() {
  std::vector<KernelOp> ops;
  for (int i = 0; i <= static_cast<int>(KernelOp::moe_fp8_block_scale); ++i)
    ops.push_back(static_cast<KernelOp>(i));
  return ops;
}

std::string kernel_case_params(const KernelCase& c) {
  const std::string model = c.model + (c.variant.empty() ? "" : " " + c.variant);
  switch (c.op) {
    case KernelOp::embedding:
      return fmt::format("{} T={} H={} V={}", model, c.tokens, c.hidden, c.vocab);
    case KernelOp::rms_norm:
    case KernelOp::add_rms_norm:
    case KernelOp::add_inplace: return fmt::format("{} T={} H={}", model, c.tokens, c.hidden);
    case KernelOp::silu_mul: return fmt::format("{} T={} I={}", model, c.tokens, c.inter);
    case KernelOp::softmax:
    case KernelOp::argmax: return fmt::format("{} T={} V={}", model, c.tokens, c.vocab);
    case KernelOp::rope_apply:
    case KernelOp::kv_append:
    case KernelOp::qk_norm_rope_kv_append:
      return fmt::format("{} T={} h={} kv={} d={}", model, c.tokens, c.q_heads, c.kv_heads,
                         c.head_dim);
    case KernelOp::gemm:
    case KernelOp::rms_norm_gemm:
    case KernelOp::gemm_add:
    case KernelOp::swiglu_gemm_add:
    case KernelOp::rms_norm_gemm_argmax:
      return fmt::format("{} m={} n={} k={}", model, c.tokens, c.n, c.k);
    case KernelOp::attention_prefill:
    case KernelOp::attention:
      return fmt::format("{} b={} s={} h={} kv={} d={} causal", model, c.tokens, c.seq_len,
                         c.q_heads, c.kv_heads, c.head_dim);
    case KernelOp::attention_decode:
      return fmt::format("{} b={} ctx={} h={} kv={} d={}", model, c.tokens, c.seq_len, c.q_heads,
                         c.kv_heads, c.head_dim);
    case KernelOp::paged_kv_gather:
      return fmt::format("{} b={} s={} kv={} d={}", model, c.tokens, c.seq_len, c.kv_heads,
                         c.head_dim);
    case KernelOp::moe_route_topk_softmax:
      return fmt::format("{} T={} E={} k={}", model, c.tokens, c.experts, c.top_k);
    case KernelOp::moe_route_grouped:
      return fmt::format("{} T={} E={} k={} groups {}/{}", model, c.tokens, c.experts, c.top_k,
                         c.topk_group, c.n_group);
    case KernelOp::moe_permute:
      return fmt::format("{} T={} E={} k={}", model, c.tokens, c.experts, c.top_k);
    case KernelOp::moe_gather:
    case KernelOp::moe_combine:
    case KernelOp::moe_gather_fp8:
      return fmt::format("{} T={} k={} H={}", model, c.tokens, c.top_k, c.hidden);
    case KernelOp::moe_grouped_gemm:
    case KernelOp::moe_grouped_gemm_fp8:
    case KernelOp::moe_experts:
      return fmt::format("{} T={} E={} k={} H={} I={}", model, c.tokens, c.experts, c.top_k,
                         c.hidden, c.inter);
    case KernelOp::moe_fp8_quantize:
      return fmt::format("{} T={} H={} terms={}", model, c.tokens, c.hidden, c.terms);
    case KernelOp::moe_fp8_block_scale:
      return fmt::format("{} T={} E={}/{} k={} H={} I={} terms={}", model, c.tokens, c.experts,
                         c.routed_experts, c.top_k, c.hidden, c.inter, c.terms);
  }
  return model;
}

KernelCost kernel_case_cost(const KernelCase& c) {
  const double T = double(c.tokens), H = double(c.hidden), I = double(c.inter);
  const double V = double(c.vocab), M = T, N = double(c.n), K = double(c.k);
  const double q_width = double(c.q_heads * c.head_dim), kv_width = double(c.kv_heads * c.head_dim);
  switch (c.op) {
    case KernelOp::embedding:  // ids in, the rows of those ids, out
      return {0, kI32 * T + kBf16 * (T * H + T * H)};
    case KernelOp::rms_norm: return {0, kBf16 * (T * H + H + T * H)};
    case KernelOp::add_rms_norm:  // x, residual in; residual, out written; weight
      return {0, kBf16 * (4 * T * H + H)};
    case KernelOp::rope_apply:  // q and k read and written in place; positions
      return {0, kBf16 * 2 * T * (q_width + kv_width) + kI32 * T};
    case KernelOp::silu_mul: return {0, kBf16 * (T * 2 * I + T * I)};
    case KernelOp::softmax: return {0, kBf16 * 2 * T * V};
    case KernelOp::argmax: return {0, kF32 * T * V + kI32 * T};  // f32 logits in, i32 ids out
    case KernelOp::kv_append:  // k, v rows in and into their slots; slots
      return {0, kBf16 * 4 * T * kv_width + kI32 * T};
    case KernelOp::qk_norm_rope_kv_append:
      // q, k normed and rotated in place, v read, k and v into the cache; norms, positions, slots
      return {0, kBf16 * (2 * T * (q_width + kv_width) + T * kv_width + 2 * T * kv_width +
                          2 * double(c.head_dim)) +
                     2 * kI32 * T};
    case KernelOp::add_inplace: return {0, kBf16 * 3 * T * H};
    case KernelOp::gemm:
      if (c.fp8_scale_rows > 0) {  // fp8 w and its f32 scales; bf16 a in, out
        const double scales = c.fp8_scale_rows == 128 ? std::ceil(N / 128) * std::ceil(K / 128) : N;
        return {2 * M * N * K, kBf16 * (M * K + M * N) + N * K + kF32 * scales, true};
      }
      return {2 * M * N * K, kBf16 * (M * K + N * K + M * N)};
    case KernelOp::rms_norm_gemm:  // x, norm weight, w in; out
      return {2 * M * N * K, kBf16 * (M * K + K + N * K + M * N)};
    case KernelOp::gemm_add:  // a, w in; residual read and written
      return {2 * M * N * K, kBf16 * (M * K + N * K + 2 * M * N)};
    case KernelOp::swiglu_gemm_add:  // [gate | up] in, w [n, I]; residual read and written
      return {2 * M * N * I, kBf16 * (M * 2 * I + N * I + 2 * M * N)};
    case KernelOp::rms_norm_gemm_argmax:  // x, norm weight, the LM head in; ids out
      return {2 * M * V * K, kBf16 * (M * K + K + V * K) + kI32 * M};
    case KernelOp::attention_prefill:
    case KernelOp::attention: {  // paged: the pages hold exactly each sequence's keys
      const PrefillShape s{c.tokens, c.seq_len, c.q_heads, c.kv_heads, c.head_dim, true};
      return {attention_prefill_flops(s), attention_prefill_bytes(s, 2)};
    }
    case KernelOp::attention_decode: {  // one query per sequence over seq_len keys
      const double visible = attention_visible_pairs(1, c.seq_len, true);
      return {4.0 * double(c.head_dim) * T * double(c.q_heads) * visible,
              kBf16 * (2 * T * q_width + 2 * T * double(c.seq_len) * kv_width)};
    }
    case KernelOp::paged_kv_gather: {
      // K and V of every cached token read from the pages and written once; the page-table
      // entries in use (pages of 16 tokens, as the runner makes them), kv_lens and the offsets.
      const double tokens = T * double(c.seq_len), pages = T * double((c.seq_len + 15) / 16);
      return {0, kBf16 * 4 * tokens * kv_width + kI32 * (pages + 2 * T + 1)};
    }
    case KernelOp::moe_route_topk_softmax:
      return {0, router_bytes({c.tokens, c.experts, c.top_k, 2})};
    case KernelOp::moe_route_grouped:  // f32 logits, bf16 bias
      return {0, router_bytes({c.tokens, c.experts, c.top_k, 4, c.n_group, c.topk_group, 2})};
    case KernelOp::moe_permute: {
      const MoeCost m = moe_step_cost(MoeStep::permute, qwen3_shape(c), balanced_routing(c));
      return {m.flops, m.bytes};
    }
    case KernelOp::moe_gather: {
      const MoeCost m = moe_step_cost(MoeStep::gather, qwen3_shape(c), balanced_routing(c));
      return {m.flops, m.bytes};
    }
    case KernelOp::moe_combine: {
      const MoeCost m = moe_step_cost(MoeStep::combine, qwen3_shape(c), balanced_routing(c));
      return {m.flops, m.bytes};
    }
    case KernelOp::moe_grouped_gemm: {
      const MoeStep step = c.variant == "down" ? MoeStep::down : MoeStep::gate_up;
      const MoeCost m = moe_step_cost(step, qwen3_shape(c), balanced_routing(c));
      return {m.flops, m.bytes};
    }
    case KernelOp::moe_experts: {
      const MoeCost m = moe_step_cost(MoeStep::experts, qwen3_shape(c), balanced_routing(c));
      return {m.flops, m.bytes};
    }
    case KernelOp::moe_fp8_quantize:  // bf16 x in; `terms` fp8 terms and their scales out
      return {0, kBf16 * T * H + double(c.terms) * kFp8ActBytes * T * H};
    case KernelOp::moe_gather_fp8: {
      const Fp8Cost f = moe_fp8_step_cost(Fp8Step::ds_gather, {Fp8Layer::seed003, c.tokens, ""},
                                          {c.tokens * c.top_k, 0}, 1);
      return {f.flops, f.bytes};
    }
    case KernelOp::moe_grouped_gemm_fp8: {
      // gemm1: x [P, H] fp8 by the active experts' w1 [2I, H] (swiglu_gate_last), f32 h [P, I];
      // gemm2: x [P, I] fp8 by w2 [H, I], bf16 y [P, H]. Offsets [E + 1] i32.
      const double P = T * c.top_k;
      const double active = double(balanced_active_experts(c.tokens * c.top_k, c.experts));
      const double offsets = kI32 * (c.experts + 1);
      if (c.variant == "gemm2")
        return {2 * P * I * H,
                active * H * I * kFp8WeightBytes + kFp8ActBytes * P * I + kBf16 * P * H + offsets,
                true};
      return {2 * P * H * 2 * I,
              active * 2 * I * H * kFp8WeightBytes + kFp8ActBytes * P * H + kF32 * P * I + offsets,
              true};
    }
    case KernelOp::moe_fp8_block_scale: {
      // The executed FLOPs: the second GEMM runs once per intermediate term.
      const int64_t pairs = c.tokens * c.top_k;
      const Fp8Cost f =
          moe_fp8_step_cost(Fp8Step::ds_op, {Fp8Layer::seed003, c.tokens, ""},
                            {pairs, int(balanced_active_experts(pairs, c.experts))}, c.terms);
      return {f.flops, f.bytes, true};
    }
  }
  return {};
}

Bound kernel_case_bound(const KernelCase& c, const Ceilings& ceilings) {
  const KernelCost cost = kernel_case_cost(c);
  if (cost.flops <= 0) return Bound::memory;
  if (!cost.fp8) return roofline_bound(cost.flops, cost.bytes, ceilings);
  return roofline_bound(cost.flops, cost.bytes, fp8_ceilings(ceilings)) == Bound::compute
             ? Bound::compute_fp8
             : Bound::memory;
}

double kernel_case_tolerance(const KernelCase& c) {
  switch (c.op) {
    case KernelOp::argmax:
    case KernelOp::rms_norm_gemm_argmax:
    case KernelOp::moe_permute:
    case KernelOp::embedding:
    case KernelOp::kv_append:
    case KernelOp::paged_kv_gather:
    case KernelOp::moe_gather:
    case KernelOp::moe_gather_fp8: return 0.0;
    case KernelOp::moe_route_topk_softmax:
    case KernelOp::moe_route_grouped: return rel_l2_tolerance_for(4);
    case KernelOp::moe_fp8_quantize: return rel_l2_tolerance_for(1);
    // The activations rounded to e4m3 for the fp8 GEMM: ~3.6% rms per element (test_gemm_fp8.cpp).
    case KernelOp::gemm: return c.fp8_scale_rows > 0 ? kFp8GemmTolerance : rel_l2_tolerance_for(2);
    default: return rel_l2_tolerance_for(2);
  }
}

std::vector<KernelCase> kernel_cases(bool quick) {
  std::vector<KernelCase> cases;
  auto add = [&](const KernelCase& c) { cases.push_back(c); };

  // Row ops: decode (1, 16 tokens), a prefill chunk (512) and a long prefill (4096), on both
  // dense models; softmax and argmax over both vocabularies.
  const std::vector<int64_t> row_tokens =
      quick ? std::vector<int64_t>{1, 512} : std::vector<int64_t>{1, 16, 512, 4096};
  const std::vector<DenseModel> models =
      quick ? std::vector<DenseModel>{kLlama1B} : std::vector<DenseModel>{kLlama1B, kLlama8B};
  const std::vector<int64_t> vocabs =
      quick ? std::vector<int64_t>{32000} : std::vector<int64_t>{32000, 128256};
  for (KernelOp op : kRowOps)
    if (op == KernelOp::softmax || op == KernelOp::argmax) {
      for (int64_t v : vocabs)
        for (int64_t t : row_tokens) add(vocab_case(op, v, t));
    } else {
      for (const DenseModel& m : models)
        for (int64_t t : row_tokens) add(row_case(op, m, t));
    }

  // Llama-3-8B's projections: o (4096 x 4096), gate (14336 x 4096), down (4096 x 14336), from
  // a decode step (m = 1, 16) to a long prefill (4096).
  const std::vector<int64_t> gemm_m =
      quick ? std::vector<int64_t>{1, 128} : std::vector<int64_t>{1, 16, 128, 4096};
  struct Proj {
    const char* name;
    int64_t n, k;
  };
  const std::vector<Proj> projs =
      quick ? std::vector<Proj>{{"o", 4096, 4096}}
            : std::vector<Proj>{{"o", 4096, 4096}, {"gate", 14336, 4096}, {"down", 4096, 14336}};
  for (const Proj& p : projs)
    for (int64_t m : gemm_m) add(gemm_case(KernelOp::gemm, kLlama8B.name, p.name, m, p.n, p.k));
  // The same projections on fp8 weights at prefill sizes (cuBLASLt, the activations quantized
  // at run time): 128 x 128 block scales (Llama-3.1-8B-FP8's format) and one scale per row
  // (compressed-tensors FP8-dynamic, per-token activation scales).
  const std::vector<int64_t> fp8_m = quick ? std::vector<int64_t>{4096} : std::vector<int64_t>{128, 4096};
  const std::vector<Proj> fp8_projs = quick ? std::vector<Proj>{{"gate", 14336, 4096}} : projs;
  for (int scale_rows : {128, 1})
    for (const Proj& p : fp8_projs)
      for (int64_t m : fp8_m) {
        const std::string variant =
            fmt::format("{} fp8 {}", p.name, scale_rows == 128 ? "128x128" : "per-row");
        KernelCase c = gemm_case(KernelOp::gemm, kLlama8B.name, variant.c_str(), m, p.n, p.k);
        c.fp8_scale_rows = scale_rows;
        add(c);
      }

  // The fused decode ops at m = 1 and 4 (their fused kernels) and 16 (the unfused path).
  const std::vector<int64_t> fused_m =
      quick ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 4, 16};
  for (int64_t m : fused_m)
    add(gemm_case(KernelOp::rms_norm_gemm, kLlama8B.name, "norm+qkv", m, 6144, 4096));
  for (int64_t m : fused_m)
    add(gemm_case(KernelOp::gemm_add, kLlama8B.name, "o+residual", m, 4096, 4096));
  for (int64_t m : fused_m)
    add(gemm_case(KernelOp::swiglu_gemm_add, kLlama8B.name, "down+residual", m, 4096, 14336));
  add(gemm_case(KernelOp::rms_norm_gemm_argmax, "llama-2-7b", "lm_head", 1, 32000, 4096));
  if (!quick)
    add(gemm_case(KernelOp::rms_norm_gemm_argmax, kLlama8B.name, "lm_head", 1, 128256, 4096));

  // Attention: ANCHORS.md / seed 001 prefill shapes, Llama-3-8B's GQA 32:8 for the paged ops.
  if (quick) {
    add(attention_case(KernelOp::attention_prefill, "mha", 16, 512, 16, 16, 64));
    add(attention_case(KernelOp::attention, kLlama8B.name, 4, 512, 32, 8, 128));
    add(attention_case(KernelOp::attention_decode, kLlama8B.name, 16, 1024, 32, 8, 128));
    add(attention_case(KernelOp::paged_kv_gather, kLlama8B.name, 4, 512, 32, 8, 128));
  } else {
    add(attention_case(KernelOp::attention_prefill, "mha", 1, 4096, 32, 32, 128));
    add(attention_case(KernelOp::attention_prefill, "mha", 16, 512, 16, 16, 64));
    add(attention_case(KernelOp::attention_prefill, kLlama8B.name, 4, 2048, 32, 8, 128));
    add(attention_case(KernelOp::attention, kLlama8B.name, 1, 4096, 32, 8, 128));
    add(attention_case(KernelOp::attention, kLlama8B.name, 16, 512, 32, 8, 128));
    for (int64_t batch : {1, 16})
      for (int64_t ctx : {1024, 8192})
        add(attention_case(KernelOp::attention_decode, kLlama8B.name, batch, ctx, 32, 8, 128));
    // Chunked prefill's gather of the cached keys: one sequence with a short and a long cache,
    // a batch of 16, and Llama-3.2-1B's narrower rows (8 x 64).
    add(attention_case(KernelOp::paged_kv_gather, kLlama8B.name, 1, 512, 32, 8, 128));
    add(attention_case(KernelOp::paged_kv_gather, kLlama8B.name, 1, 8192, 32, 8, 128));
    add(attention_case(KernelOp::paged_kv_gather, kLlama8B.name, 16, 1024, 32, 8, 128));
    add(attention_case(KernelOp::paged_kv_gather, kLlama1B.name, 4, 2048, 32, 8, 64));
  }

  // MoE: Qwen3-30B-A3B's layer from a decode step to a long prefill, then DeepSeek-V3's router
  // and its FP8 layer at the small token counts of decoding.
  auto tokens = [&](std::vector<int64_t> full, int64_t q) {
    return quick ? std::vector<int64_t>{q} : full;
  };
  for (int64_t t : tokens({1, 256, 4096}, 256)) add(qwen3_case(KernelOp::moe_route_topk_softmax, t));
  for (int64_t t : tokens({1, 256, 4096}, 256)) add(deepseek_router_case(t));
  for (int64_t t : tokens({16, 512, 4096}, 512)) add(qwen3_case(KernelOp::moe_permute, t));
  for (int64_t t : tokens({16, 512, 4096}, 512)) add(qwen3_case(KernelOp::moe_gather, t));
  for (int64_t t : tokens({16, 512, 4096}, 512)) add(qwen3_case(KernelOp::moe_combine, t));
  for (const char* v : {"gate_up", "down"})
    for (int64_t t : tokens({16, 512, 4096}, 512))
      add(qwen3_case(KernelOp::moe_grouped_gemm, t, v));
  for (int64_t t : tokens({1, 4}, 4)) add(qwen3_case(KernelOp::moe_experts, t));
  for (int64_t t : tokens({1, 16, 256}, 16))
    add(deepseek_fp8_case(KernelOp::moe_fp8_quantize, t, "", 1));
  if (!quick) add(deepseek_fp8_case(KernelOp::moe_fp8_quantize, 256, "", 3));
  for (int64_t t : tokens({1, 16, 256}, 16)) add(deepseek_fp8_case(KernelOp::moe_gather_fp8, t));
  for (const char* v : {"gemm1", "gemm2"})
    for (int64_t t : tokens({1, 16, 256}, 16))
      add(deepseek_fp8_case(KernelOp::moe_grouped_gemm_fp8, t, v));
  for (int64_t t : tokens({1, 16, 256}, 16))
    add(deepseek_fp8_case(KernelOp::moe_fp8_block_scale, t, "", 3));
  return cases;
}

std::vector<KernelCase> select_kernel_cases(const std::vector<KernelCase>& cases,
                                            const std::string& only) {
  if (only.empty()) return cases;
  std::vector<KernelOp> wanted;
  std::stringstream list(only);
  std::string name;
  while (std::getline(list, name, ',')) {
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name.empty()) continue;
    bool known = false;
    for (KernelOp op : all_kernel_ops())
      if (name == kernel_op_name(op)) {
        wanted.push_back(op);
        known = true;
      }
    if (!known)
      throw_arg_error(ErrorKind::invalid_argument, "bench kernels", "--only",
                      "a comma list of op names out of: " + join_names(all_kernel_ops()),
                      "'" + name + "'");
  }
  if (wanted.empty())
    throw_arg_error(ErrorKind::invalid_argument, "bench kernels", "--only",
                    "at least one op name", "'" + only + "'");
  std::vector<KernelCase> out;
  for (const KernelCase& c : cases)
    if (std::find(wanted.begin(), wanted.end(), c.op) != wanted.end()) out.push_back(c);
  return out;
}

std::string kernel_case_list(const std::vector<KernelCase>& cases) {
  std::string out = fmt::format("{:>4}  {:<24} {:<56} {:>10} {:>10} {:>9}\n", "#", "op", "params",
                                "bytes", "GFLOP", "rel L2 tol");
  for (size_t i = 0; i < cases.size(); ++i) {
    const KernelCase& c = cases[i];
    const KernelCost cost = kernel_case_cost(c);
    const double tol = kernel_case_tolerance(c);
    out += fmt::format("{:>4}  {:<24} {:<56} {:>10} {:>10} {:>9}\n", i + 1, kernel_op_name(c.op),
                       kernel_case_params(c), format_bytes(cost.bytes),
                       cost.flops > 0 ? fmt::format("{:.3g}", cost.flops / 1e9) : "-",
                       tol == 0 ? std::string("exact") : fmt::format("{:g}", tol));
  }
  out += fmt::format("{} cases\n", cases.size());
  return out;
}

int32_t balanced_expert(int64_t pair, int64_t set, int64_t pairs, int experts) {
  return static_cast<int32_t>((37 * (pair + set * pairs)) % experts);
}

int64_t balanced_active_experts(int64_t pairs, int experts) {
  return std::min<int64_t>(pairs, experts);
}

std::vector<int32_t> balanced_expert_offsets(int64_t rows, int experts) {
  std::vector<int32_t> offsets(static_cast<size_t>(experts) + 1, 0);
  const int64_t each = rows / experts, extra = rows % experts;
  for (int e = 0; e < experts; ++e)
    offsets[e + 1] = static_cast<int32_t>(offsets[e] + each + (e < extra ? 1 : 0));
  return offsets;
}

TimingConfig kernel_timing(double estimate_us, bool quick, int sets) {
  const double sample_us = quick ? 500 : 2000;
  TimingConfig cfg;
  // In a CUDA graph, so that kernels shorter than a launch (a few us back to back) are timed as
  // kernels, not as the host's launch rate (seed 000's graph figure).
  cfg.mode = TimingMode::graph;
  cfg.sets = std::max(1, sets);
  cfg.reps = quick ? 5 : 15;
  cfg.batch = std::clamp(static_cast<int>(std::lround(sample_us / std::max(estimate_us, 1.0))), 1,
                         200);
  cfg.warmup = std::clamp(cfg.batch, 1, 20);
  return cfg;
}

int kernel_suite_failures(const Report& run) {
  int failed = 0;
  for (const ResultRow& r : run.rows) {
    bool is_case = false;
    for (KernelOp op : all_kernel_ops()) is_case = is_case || r.name == kernel_op_name(op);
    if (!is_case) continue;
    const bool not_measured = r.note.rfind(kKernelCaseFailed, 0) == 0;
    const bool wrong = r.accuracy && !r.accuracy->passed();
    if (not_measured || wrong || !r.accuracy) ++failed;
  }
  return failed;
}

SuiteRun kernels_command(CLI::App& cmd) {
  struct Args {
    KernelSuiteOptions suite;
    bool list = false;
  };
  auto a = std::make_shared<Args>();
  cmd.add_flag("--quick", a->suite.quick, "A few cases per op family (smoke test, < 30 s)");
  cmd.add_option("--only", a->suite.only, "Comma list of op names to run (default: all)");
  cmd.add_option("--device", a->suite.device, "CUDA device index")->capture_default_str();
  cmd.add_flag("--list", a->list, "Print the cases (bytes, FLOPs, tolerance) and exit; no GPU");
  return [a] {
    constexpr const char* kCmd = "braidinfer bench kernels";
    SuiteResult r;
    // An unknown op in --only is named first, with or without a GPU.
    const auto cases = select_kernel_cases(kernel_cases(a->suite.quick), a->suite.only);
    if (a->list) {
      r.text = kernel_case_list(cases);
      return r;
    }
    const auto run_suite = BRAID_CUDA_ONLY(run_kernel_suite);
    if (!run_suite)
      return not_measured(
          fmt::format("{}: this build has no CUDA support (--list works without it)", kCmd));
    if (!cuda_available())
      return not_measured(
          fmt::format("{}: no CUDA device is visible (nothing to measure; --list works)", kCmd));
    fmt::print(stderr, "{}{}: measuring...\n", kCmd, a->suite.quick ? " --quick" : "");
    const Report run = run_suite(a->suite);
    r = report_result(
        run,
        fmt::format(
            "bytes = every input read once + every output written once (MoE: the experts that get "
            "tokens); FLOPs 2mnk for products, none for elementwise ops.\n"
            "check = the output against the op's CPU reference on the same inputs (sampled rows on "
            "big shapes, see the JSON's accuracy.reference), rel L2 within the dtype's tolerance "
            "(exact for ids and copies).\n"
            "ceilings of this run: copy {:.2f} TB/s, bf16 GEMM {:.1f} TFLOP/s, fp8 GEMM {:.1f} "
            "TFLOP/s\n",
            run.ceilings.copy_gbps / 1000, run.ceilings.gemm_tflops, run.ceilings.fp8_gemm_tflops));
    if (const int failed = kernel_suite_failures(run); failed > 0)
      fail(r, fmt::format("{}: {} case{} FAILED (check column FAIL, or FAILED in the note)", kCmd,
                          failed, failed == 1 ? "" : "s"));
    return r;
  };
}

}  // namespace braid::bench
