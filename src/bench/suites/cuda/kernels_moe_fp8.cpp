// `bench kernels`: the FP8 block-scale MoE ops on DeepSeek-V3's layer (seed 003: 32 local experts
// of 256, H 7168, I 2048, top 8) at the small token counts of decoding. fp8 operands are drawn
// with bench/fp8_fill.h (e4m3 codes of N(0, 1) and uniform scales, or weights quantized in
// 128 x 128 blocks), never with the ops under test. Values are compared dequantized (code x
// scale); the references are the CPU ops on the same fp8 inputs.
#include <cmath>
#include <memory>
#include <random>
#include <set>

#include <fmt/format.h>

#include "bench/harness/cuda/kernels.h"
#include "bench/harness/fp8_fill.h"
#include "bench/suites/cuda/kernels.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench::kernel_suite {

namespace {

constexpr int64_t kB = ops::kFp8Block;
constexpr int kRowsChecked = 128;      // quantize / gather rows
constexpr int kGemmRowsChecked = 16;   // grouped GEMM rows
constexpr int kTokensChecked = 8;      // moe_fp8_block_scale tokens (each ~350 M multiply-adds)
constexpr float kRoutedScaling = 2.5f;
const Device kCpu = Device::cpu();

// Columns `cols` of a host [rows, n] tensor (the transposed scales [K / 128, tokens]).
OwnedTensor pick_columns(const Tensor& t, const std::vector<int64_t>& cols) {
  OwnedTensor out(t.dtype, {t.shape[0], static_cast<int64_t>(cols.size())}, kCpu);
  for (int64_t r = 0; r < t.shape[0]; ++r)
    for (size_t j = 0; j < cols.size(); ++j)
      out.view().ptr<float>()[r * int64_t(cols.size()) + int64_t(j)] =
          t.ptr<float>()[r * t.strides[0] + cols[j]];
  return out;
}

// Adds each row of fp8 q [R, terms K] as its dequantized value sum_t q_t * scale (scale
// [terms K / 128, R], column i for row i) against the same of the reference.
void add_dequantized(ErrorAccumulator& acc, const Tensor& q, const Tensor& scale,
                     const Tensor& ref_q, const Tensor& ref_scale, int64_t k) {
  const int64_t rows = q.shape[0], terms = q.shape[1] / k;
  std::vector<float> got(static_cast<size_t>(k));
  std::vector<double> ref(static_cast<size_t>(k));
  auto value = [&](const Tensor& codes, const Tensor& s, int64_t r, int64_t t, int64_t j) {
    const double code = f8e4m3_to_float(codes.ptr<uint8_t>()[r * codes.strides[0] + t * k + j]);
    return code * s.ptr<float>()[(t * k / kB + j / kB) * s.strides[0] + r];
  };
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      double g = 0, e = 0;
      for (int64_t t = 0; t < terms; ++t) {
        g += value(q, scale, r, t, j);
        e += value(ref_q, ref_scale, r, t, j);
      }
      // Both rounded to float the same way: equal codes and scales compare exactly equal.
      got[j] = static_cast<float>(g);
      ref[j] = static_cast<float>(e);
    }
    acc.add(got.data(), ref.data(), k);
  }
}

// fp8 activations [rows, K] (e4m3 codes of N(0, 1)) and their scales [K / 128, rows] (uniform
// in [0.5, 1.5]), every set.
void fill_fp8_activations(const SetTensor& x, const SetTensor& scale, uint64_t seed) {
  fill_fp8_normal(x.storage(), seed, 1.0f);
  scale.fill_uniform(seed + 1, 0.5f, 1.5f);
}

// Expert weights [E, N, K] in fp8 with 128 x 128 block scales, values N(0, 1 / K) (O(1) outputs).
struct Fp8Weights {
  OwnedTensor q, scale;
};
Fp8Weights make_weights(int64_t experts, int64_t n, int64_t k, uint64_t seed, Device device) {
  Fp8Weights w{OwnedTensor(DType::f8e4m3, {experts, n, k}, device),
               OwnedTensor(DType::f32, {experts, n / kB, k / kB}, device)};
  random_weight_blocks(w.q, w.scale, seed, 1.0f / std::sqrt(static_cast<float>(k)));
  return w;
}

OwnedTensor device_copy(const Tensor& host, Device device) {
  OwnedTensor t(host.dtype, std::vector<int64_t>(host.shape, host.shape + host.ndim), device);
  copy(host, t);
  return t;
}

CasePlan plan_quantize(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    SetTensor x, q, scale;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t T = c.tokens, H = c.hidden, terms = c.terms;
  st->x = SetTensor(DType::bf16, {T, H}, sets, env.device);
  st->x.fill_uniform(env.seed, -2.0f, 2.0f);
  st->q = SetTensor(DType::f8e4m3, {T, terms * H}, sets, env.device);
  st->scale = SetTensor(DType::f32, {terms * H / kB, T}, sets, env.device);
  CasePlan p;
  p.sets = sets;
  p.launch = [st](int s, Stream stream) { ops::moe_fp8_quantize(st->x[s], st->q[s], st->scale[s], stream); };
  p.check = [st, c, terms, seed = env.seed] {
    st->q.poison();
    st->scale.poison();
    ops::moe_fp8_quantize(st->x[0], st->q[0], st->scale[0]);
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const int64_t R = static_cast<int64_t>(rows.size());
    const OwnedTensor ref_q(DType::f8e4m3, {R, terms * c.hidden}, kCpu);
    const OwnedTensor ref_scale(DType::f32, {terms * c.hidden / kB, R}, kCpu);
    ops::moe_fp8_quantize(host_rows(st->x[0], rows), ref_q, ref_scale);
    ErrorAccumulator acc;
    add_dequantized(acc, host_rows(st->q[0], rows), pick_columns(to_host(st->scale[0]), rows),
                    ref_q, ref_scale, c.hidden);
    return make_accuracy(acc, c, "cpu, dequantized terms, " + rows_label(rows.size(), c.tokens));
  };
  p.note = fmt::format("bf16 x; {} term{}{}", terms, terms > 1 ? "s" : "", rotation(sets, "tensors"));
  return p;
}

CasePlan plan_gather_fp8(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    SetTensor x, x_scale, sorted, xs, xs_scale;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t T = c.tokens, H = c.hidden, P = T * c.top_k;
  st->x = SetTensor(DType::f8e4m3, {T, H}, sets, env.device);
  st->x_scale = SetTensor(DType::f32, {H / kB, T}, sets, env.device);
  fill_fp8_activations(st->x, st->x_scale, env.seed);
  st->sorted = SetTensor(DType::i32, {P}, sets, env.device);
  st->sorted.upload([&](int set, const Tensor& h) {
    const OwnedTensor ids(DType::i32, {T, c.top_k}, kCpu);
    fill_balanced_ids(ids, set, c.experts);
    const HostPermutation perm = host_permutation(ids, c.experts);
    std::copy(perm.sorted_pairs.begin(), perm.sorted_pairs.end(), h.ptr<int32_t>());
  });
  st->xs = SetTensor(DType::f8e4m3, {P, H}, sets, env.device);
  st->xs_scale = SetTensor(DType::f32, {H / kB, P}, sets, env.device);
  CasePlan p;
  p.sets = sets;
  p.launch = [st, c](int s, Stream stream) {
    ops::moe_gather_fp8(st->x[s], st->x_scale[s], st->sorted[s], c.top_k, st->xs[s],
                        st->xs_scale[s], stream);
  };
  p.check = [st, c, P, seed = env.seed] {
    st->xs.poison();
    st->xs_scale.poison();
    ops::moe_gather_fp8(st->x[0], st->x_scale[0], st->sorted[0], c.top_k, st->xs[0],
                        st->xs_scale[0]);
    const OwnedTensor ref(DType::f8e4m3, {P, c.hidden}, kCpu);
    const OwnedTensor ref_scale(DType::f32, {c.hidden / kB, P}, kCpu);
    ops::moe_gather_fp8(to_host(st->x[0]), to_host(st->x_scale[0]), to_host(st->sorted[0]),
                        c.top_k, ref, ref_scale);
    const std::vector<int64_t> rows = sample_rows(P, kRowsChecked, seed);
    ErrorAccumulator acc;
    add_dequantized(acc, host_rows(st->xs[0], rows), pick_columns(to_host(st->xs_scale[0]), rows),
                    host_rows(ref, rows), pick_columns(ref_scale, rows), c.hidden);
    return make_accuracy(acc, c, "cpu, exact (dequantized), " + rows_label(rows.size(), P));
  };
  p.note = fmt::format("balanced routing over {} experts{}", c.experts, rotation(sets, "tensors"));
  return p;
}

CasePlan plan_grouped_gemm_fp8(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    SetTensor x, x_scale, y;
    Fp8Weights w;
    OwnedTensor offsets;
    std::vector<int32_t> offsets_host;
  };
  // gemm1: x [P, H] by w1 [E, 2I, H] (I up rows, then I gate rows) -> f32 h [P, I];
  // gemm2: x [P, I] by w2 [E, H, I] -> bf16 y [P, H]. One fp8 term of x.
  const bool gemm1 = c.variant != "gemm2";
  const ops::MoeActivation act =
      gemm1 ? ops::MoeActivation::swiglu_gate_last : ops::MoeActivation::none;
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t P = c.tokens * c.top_k;
  const int64_t K = gemm1 ? c.hidden : c.inter, N = gemm1 ? 2 * c.inter : c.hidden;
  const int64_t y_cols = gemm1 ? c.inter : c.hidden;
  const DType y_dtype = gemm1 ? DType::f32 : DType::bf16;
  st->x = SetTensor(DType::f8e4m3, {P, K}, sets, env.device);
  st->x_scale = SetTensor(DType::f32, {K / kB, P}, sets, env.device);
  fill_fp8_activations(st->x, st->x_scale, env.seed);
  st->y = SetTensor(y_dtype, {P, y_cols}, sets, env.device);
  st->w = make_weights(c.experts, N, K, env.seed + 2, env.device);
  st->offsets_host = balanced_expert_offsets(P, c.experts);
  st->offsets = device_copy(host_i32(st->offsets_host), env.device);
  CasePlan p;
  p.sets = sets;
  p.launch = [st, act](int s, Stream stream) {
    ops::moe_grouped_gemm_fp8(st->x[s], st->x_scale[s], st->w.q, st->w.scale, st->offsets, act,
                              st->y[s], Tensor{}, stream);
  };
  p.check = [st, c, act, P, y_cols, y_dtype, seed = env.seed] {
    st->y.poison();
    ops::moe_grouped_gemm_fp8(st->x[0], st->x_scale[0], st->w.q, st->w.scale, st->offsets, act,
                              st->y[0], Tensor{});
    // The sampled rows as a problem of their own over their experts, slices of rows per core.
    const std::vector<int64_t> rows = sample_rows(P, kGemmRowsChecked, seed);
    const int64_t R = static_cast<int64_t>(rows.size());
    const RowExperts re = experts_of_rows(st->offsets_host, rows);
    const OwnedTensor x = host_rows(st->x[0], rows);
    const OwnedTensor x_scale = pick_columns(to_host(st->x_scale[0]), rows);
    const OwnedTensor w = host_experts(st->w.q, re.experts);
    const OwnedTensor w_scale = host_experts(st->w.scale, re.experts);
    const OwnedTensor ref(y_dtype, {R, y_cols}, kCpu);
    parallel_ranges(R, [&](int64_t r0, int64_t r1) {
      ops::moe_grouped_gemm_fp8(x.view().slice(0, r0, r1), x_scale.view().slice(1, r0, r1), w,
                                w_scale, host_i32(re.offsets_of(r0, r1)), act,
                                ref.view().slice(0, r0, r1), Tensor{});
    });
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->y[0], rows), ref);
    return make_accuracy(acc, c, "cpu fp64 sums of dequantized fp8, " + rows_label(R, P));
  };
  p.note = fmt::format("{}; balanced: {} rows over {} experts; 1 fp8 term{}",
                       gemm1 ? "swiglu_gate_last, f32 h" : "none, bf16 y", P,
                       balanced_active_experts(P, c.experts), rotation(sets, "x, y"));
  return p;
}

// Router logits [T, E_global] that send token t to the local experts 8 (t mod 4) .. +7 (so the
// tokens reach min(32, 8 T) experts, as kernel_case_cost assumes): 10 + u on those, 0 on the
// other local experts, -20 elsewhere. With a bias in [-0.05, 0.05] the local group wins its
// top-2 sum by far, and inside the kept groups the chosen 8 (sigmoid ~ 1) beat the other local
// experts (~0.5) and everything else (~0).
OwnedTensor block_scale_logits(const KernelCase& c, uint64_t seed) {
  OwnedTensor logits(DType::f32, {c.tokens, c.routed_experts}, kCpu);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 0.5f);
  float* l = logits.view().ptr<float>();
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int e = 0; e < c.routed_experts; ++e) {
      const int64_t first = c.top_k * (t % (c.experts / c.top_k));
      const bool chosen = e >= first && e < first + c.top_k;
      l[t * c.routed_experts + e] = chosen ? 10.0f + u(rng) : e < c.experts ? 0.0f : -20.0f;
    }
  return logits;
}

CasePlan plan_block_scale(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    OwnedTensor logits, logits_host, bias, hidden, hidden_scale, workspace, out;
    Fp8Weights w1, w2;
    ops::MoeFp8Options options;
  };
  auto st = std::make_shared<State>();
  const int64_t T = c.tokens, H = c.hidden, I = c.inter;
  st->options.n_group = c.n_group;
  st->options.topk_group = c.topk_group;
  st->options.top_k = c.top_k;
  st->options.intermediate_terms = c.terms;
  st->logits_host = block_scale_logits(c, env.seed);
  st->logits = device_copy(st->logits_host, env.device);
  st->bias = OwnedTensor(DType::bf16, {c.routed_experts}, env.device);
  fill_uniform(st->bias, env.seed + 1, -0.05f, 0.05f, {});
  st->hidden = OwnedTensor(DType::f8e4m3, {T, H}, env.device);
  st->hidden_scale = OwnedTensor(DType::f32, {H / kB, T}, env.device);
  fill_fp8_normal(st->hidden, env.seed + 2, 1.0f);
  fill_uniform(st->hidden_scale, env.seed + 3, 0.5f, 1.5f, {});
  st->w1 = make_weights(c.experts, 2 * I, H, env.seed + 4, env.device);
  st->w2 = make_weights(c.experts, H, I, env.seed + 5, env.device);
  st->workspace = OwnedTensor(
      DType::u8, {ops::moe_fp8_block_scale_workspace_bytes(T, H, I, c.experts, st->options)},
      env.device);
  st->out = OwnedTensor(DType::bf16, {T, H}, env.device);
  auto run = [st](const Tensor& logits, const Tensor& bias, const Tensor& hidden,
                  const Tensor& hidden_scale, const Fp8Weights& w1, const Fp8Weights& w2,
                  const Tensor& workspace, const Tensor& out, Stream s) {
    ops::moe_fp8_block_scale(logits, bias, hidden, hidden_scale, w1.q, w1.scale, w2.q, w2.scale,
                             0, kRoutedScaling, st->options, workspace, out, s);
  };
  CasePlan p;
  p.sets = 1;  // the active experts' weights alone are many times the L2
  p.launch = [st, run](int, Stream stream) {
    run(st->logits, st->bias, st->hidden, st->hidden_scale, st->w1, st->w2, st->workspace,
        st->out, stream);
  };
  p.check = [st, run, c, seed = env.seed] {
    // The routing the byte count assumes (kernel_case_cost: min(32, 8 T) active experts).
    const OwnedTensor weights(DType::f32, {c.tokens, c.top_k}, kCpu);
    const OwnedTensor ids(DType::i32, {c.tokens, c.top_k}, kCpu);
    const OwnedTensor bias = to_host(st->bias);
    ops::moe_route_grouped(st->logits_host, bias, c.n_group, c.topk_group, c.top_k,
                           kRoutedScaling, weights, ids);
    std::set<int32_t> used(ids.view().ptr<int32_t>(), ids.view().ptr<int32_t>() + ids.view().numel());
    const int64_t expected = balanced_active_experts(c.tokens * c.top_k, c.experts);
    if (static_cast<int64_t>(used.size()) != expected || *used.rbegin() >= c.experts)
      throw Error(ErrorKind::internal,
                  fmt::format("bench kernels: moe_fp8_block_scale: the routing reached {} experts "
                              "(max id {}), the byte count assumes {} local ones",
                              used.size(), *used.rbegin(), expected));

    fill_bytes(st->out, 0xFF);
    run(st->logits, st->bias, st->hidden, st->hidden_scale, st->w1, st->w2, st->workspace,
        st->out, {});
    // The CPU op on the sampled tokens, one token per core.
    const std::vector<int64_t> tokens = sample_rows(c.tokens, kTokensChecked, seed);
    const int64_t R = static_cast<int64_t>(tokens.size());
    const OwnedTensor logits = host_rows(st->logits, tokens), hidden = host_rows(st->hidden, tokens);
    const OwnedTensor hidden_scale = pick_columns(to_host(st->hidden_scale), tokens);
    const Fp8Weights w1{to_host(st->w1.q), to_host(st->w1.scale)};
    const Fp8Weights w2{to_host(st->w2.q), to_host(st->w2.scale)};
    const OwnedTensor ref(DType::bf16, {R, c.hidden}, kCpu);
    parallel_ranges(R, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        run(logits.view().slice(0, r, r + 1), bias, hidden.view().slice(0, r, r + 1),
            hidden_scale.view().slice(1, r, r + 1), w1, w2, Tensor{}, ref.view().slice(0, r, r + 1),
            {});
    });
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->out, tokens), ref);
    return make_accuracy(acc, c, "cpu fp32 definition (fp64 sums, fp32 intermediate), " +
                                     rows_label(tokens.size(), c.tokens, "tokens"));
  };
  p.note = fmt::format("{} experts active; FLOPs executed (gemm2 x{} terms); one set",
                       balanced_active_experts(T * c.top_k, c.experts), c.terms);
  return p;
}

}  // namespace

CasePlan plan_moe_fp8_case(const KernelCase& c, const SuiteEnv& env) {
  switch (c.op) {
    case KernelOp::moe_fp8_quantize: return plan_quantize(c, env);
    case KernelOp::moe_gather_fp8: return plan_gather_fp8(c, env);
    case KernelOp::moe_grouped_gemm_fp8: return plan_grouped_gemm_fp8(c, env);
    case KernelOp::moe_fp8_block_scale: return plan_block_scale(c, env);
    default: break;
  }
  throw Error(ErrorKind::internal, "bench kernels: not an FP8 MoE op");
}

}  // namespace braid::bench::kernel_suite
