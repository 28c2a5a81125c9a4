// `bench kernels`: gemm and the fused GEMM ops (rms_norm_gemm, gemm_add, swiglu_gemm_add,
// rms_norm_gemm_argmax). Activations, weights and outputs rotate over the case's input sets (the
// weights of the small shapes are what must come from DRAM); the check runs the CPU op on up to 8
// sampled rows of set 0, its output columns split across the host's cores (a 4096 x 14336 weight
// is 59 M multiply-adds per row in fp64).
#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "bench/harness/cuda/kernels.h"
#include "bench/harness/fp8_fill.h"
#include "bench/suites/cuda/kernels.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench::kernel_suite {

namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowsChecked = 8;
const Device kCpu = Device::cpu();

// Inputs uniform with the variance of a unit activation times a Kaiming-style weight, so that
// every output stays O(1) (the bf16 rounding of a huge value would hide nothing, but O(1) is
// what a model computes).
float weight_range(int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); }

struct GemmState {
  SetTensor x, w, out;      // x: a / gate_up; out: out, residual, or logits
  SetTensor w_scale;        // fp8 w's scales (gemm on fp8 weights)
  SetTensor norm, scratch;  // norm weight; normed / act scratch
  SetTensor scratch2, ids;  // gemm_add / swiglu_gemm_add scratch [m, n]; argmax ids
};

std::string sets_note(int sets) {
  return sets > 1 ? fmt::format("x, w, out rotate {} sets", sets) : std::string("one set");
}

// fp8 weights (c.fp8_scale_rows): e4m3 values of stddev 64 times scales near 2.7e-4, so that the
// weights they stand for spread like the bf16 ones (random_weights.cpp's choice).
CasePlan plan_gemm(const KernelCase& c, const SuiteEnv& env) {
  const int sets = case_sets(c, env);
  auto st = std::make_shared<GemmState>();
  const int64_t M = c.tokens, N = c.n, K = c.k;
  const bool fp8 = c.fp8_scale_rows > 0, blocks = c.fp8_scale_rows == 128;
  st->x = SetTensor(DType::bf16, {M, K}, sets, env.device);
  st->w = SetTensor(fp8 ? DType::f8e4m3 : DType::bf16, {N, K}, sets, env.device);
  st->out = SetTensor(DType::bf16, {M, N}, sets, env.device);
  st->x.fill_uniform(env.seed, -1.0f, 1.0f);
  if (fp8) {
    const std::vector<int64_t> scale_shape =
        blocks ? std::vector<int64_t>{(N + 127) / 128, (K + 127) / 128} : std::vector<int64_t>{N, 1};
    st->w_scale = SetTensor(DType::f32, scale_shape, sets, env.device);
    fill_fp8_normal(st->w.storage(), env.seed + 1, 64.0f);
    st->w_scale.fill_uniform(env.seed + 2, 2.5e-4f, 2.9e-4f);
  } else {
    st->w.fill_uniform(env.seed + 1, -weight_range(K), weight_range(K));
  }
  auto weight = [st, fp8](int s) {
    return fp8 ? ops::Weight(st->w[s], st->w_scale[s]) : ops::Weight(st->w[s]);
  };
  CasePlan p;
  p.sets = sets;
  p.launch = [st, weight](int s, Stream stream) {
    ops::gemm(st->x[s], weight(s), Tensor{}, st->out[s], stream);
  };
  p.check = [st, c, fp8, blocks, weight, seed = env.seed] {
    st->out.poison();
    ops::gemm(st->x[0], weight(0), Tensor{}, st->out[0]);
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const OwnedTensor a = host_rows(st->x[0], rows), w = to_host(st->w[0]);
    const OwnedTensor w_scale = fp8 ? to_host(st->w_scale[0]) : OwnedTensor{};
    const OwnedTensor ref(DType::bf16, {static_cast<int64_t>(rows.size()), c.n}, kCpu);
    // Ranges of whole 128-row scale blocks for block scales.
    const int64_t unit = blocks ? 128 : 1;
    parallel_ranges((c.n + unit - 1) / unit, [&](int64_t u0, int64_t u1) {
      const int64_t n0 = u0 * unit, n1 = std::min(c.n, u1 * unit);
      const ops::Weight part =
          !fp8 ? ops::Weight(w.view().slice(0, n0, n1))
               : ops::Weight(w.view().slice(0, n0, n1),
                             blocks ? w_scale.view().slice(0, u0, u1)
                                    : w_scale.view().slice(0, n0, n1));
      ops::gemm(a, part, Tensor{}, ref.view().slice(1, n0, n1));
    });
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->out[0], rows), ref);
    return make_accuracy(acc, c, "cpu fp64 sums, " + rows_label(rows.size(), c.tokens));
  };
  const char* path = c.tokens <= 16 ? "; GEMV path"
                     : !fp8       ? "; cuBLASLt"
                     : blocks ? "; cuBLASLt fp8, 128 x 128 scales, activations quantized per 128 columns"
                              : "; cuBLASLt fp8, per-row scales, activations quantized per token";
  p.note = sets_note(sets) + path;
  return p;
}

CasePlan plan_rms_norm_gemm(const KernelCase& c, const SuiteEnv& env) {
  const int sets = case_sets(c, env);
  auto st = std::make_shared<GemmState>();
  const int64_t M = c.tokens, N = c.n, K = c.k;
  st->x = SetTensor(DType::bf16, {M, K}, sets, env.device);
  st->norm = SetTensor(DType::bf16, {K}, sets, env.device);
  st->w = SetTensor(DType::bf16, {N, K}, sets, env.device);
  st->out = SetTensor(DType::bf16, {M, N}, sets, env.device);
  st->scratch = SetTensor(DType::bf16, {M, K}, sets, env.device);
  st->x.fill_uniform(env.seed, -2.0f, 2.0f);
  st->norm.fill_uniform(env.seed + 1, 0.5f, 1.5f);
  st->w.fill_uniform(env.seed + 2, -weight_range(K), weight_range(K));
  CasePlan p;
  p.sets = sets;
  p.launch = [st](int s, Stream stream) {
    ops::rms_norm_gemm(st->x[s], st->norm[s], kEps, st->w[s], Tensor{}, st->out[s],
                       st->scratch[s], stream);
  };
  p.check = [st, c, seed = env.seed] {
    st->out.poison();
    ops::rms_norm_gemm(st->x[0], st->norm[0], kEps, st->w[0], Tensor{}, st->out[0], st->scratch[0]);
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const int64_t R = static_cast<int64_t>(rows.size());
    const OwnedTensor x = host_rows(st->x[0], rows), norm = to_host(st->norm[0]);
    const OwnedTensor w = to_host(st->w[0]), ref(DType::bf16, {R, c.n}, kCpu);
    parallel_ranges(c.n, [&](int64_t n0, int64_t n1) {
      const OwnedTensor normed(DType::bf16, {R, c.k}, kCpu);
      ops::rms_norm_gemm(x, norm, kEps, w.view().slice(0, n0, n1), Tensor{},
                         ref.view().slice(1, n0, n1), normed);
    });
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->out[0], rows), ref);
    return make_accuracy(acc, c, "cpu f32 norm, fp64 sums, " + rows_label(rows.size(), c.tokens));
  };
  p.note = sets_note(sets) + (c.tokens <= 4 ? "; fused GEMV path" : "; unfused path (m > 4)");
  return p;
}

CasePlan plan_gemm_add(const KernelCase& c, const SuiteEnv& env) {
  const int sets = case_sets(c, env);
  auto st = std::make_shared<GemmState>();
  const int64_t M = c.tokens, N = c.n, K = c.k;
  st->x = SetTensor(DType::bf16, {M, K}, sets, env.device);
  st->w = SetTensor(DType::bf16, {N, K}, sets, env.device);
  st->out = SetTensor(DType::bf16, {M, N}, sets, env.device);  // the residual
  st->scratch2 = SetTensor(DType::bf16, {M, N}, sets, env.device);
  st->x.fill_uniform(env.seed, -1.0f, 1.0f);
  st->w.fill_uniform(env.seed + 1, -weight_range(K), weight_range(K));
  st->out.fill_uniform(env.seed + 2, -1.0f, 1.0f);
  CasePlan p;
  p.sets = sets;
  p.launch = [st](int s, Stream stream) {
    ops::gemm_add(st->x[s], st->w[s], Tensor{}, st->out[s], st->scratch2[s], stream);
  };
  p.check = [st, c, seed = env.seed] {
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const int64_t R = static_cast<int64_t>(rows.size());
    const OwnedTensor a = host_rows(st->x[0], rows), residual = host_rows(st->out[0], rows);
    ops::gemm_add(st->x[0], st->w[0], Tensor{}, st->out[0], st->scratch2[0]);
    const OwnedTensor w = to_host(st->w[0]);
    parallel_ranges(c.n, [&](int64_t n0, int64_t n1) {
      const OwnedTensor scratch(DType::bf16, {R, n1 - n0}, kCpu);
      ops::gemm_add(a, w.view().slice(0, n0, n1), Tensor{}, residual.view().slice(1, n0, n1),
                    scratch);
    });
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->out[0], rows), residual);
    return make_accuracy(acc, c, "cpu fp64 sums, residual, " + rows_label(R, c.tokens));
  };
  p.note = sets_note(sets) + (c.tokens <= 4 ? "; fused GEMV path" : "; unfused path (m > 4)");
  return p;
}

CasePlan plan_swiglu_gemm_add(const KernelCase& c, const SuiteEnv& env) {
  const int sets = case_sets(c, env);
  auto st = std::make_shared<GemmState>();
  const int64_t M = c.tokens, N = c.n, I = c.inter;
  st->x = SetTensor(DType::bf16, {M, 2 * I}, sets, env.device);
  st->w = SetTensor(DType::bf16, {N, I}, sets, env.device);
  st->out = SetTensor(DType::bf16, {M, N}, sets, env.device);  // the residual
  st->scratch = SetTensor(DType::bf16, {M, I}, sets, env.device);
  st->scratch2 = SetTensor(DType::bf16, {M, N}, sets, env.device);
  st->x.fill_uniform(env.seed, -2.0f, 2.0f);
  st->w.fill_uniform(env.seed + 1, -weight_range(I), weight_range(I));
  st->out.fill_uniform(env.seed + 2, -1.0f, 1.0f);
  CasePlan p;
  p.sets = sets;
  p.launch = [st](int s, Stream stream) {
    ops::swiglu_gemm_add(st->x[s], st->w[s], st->out[s], st->scratch[s], st->scratch2[s], stream);
  };
  p.check = [st, c, seed = env.seed] {
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const int64_t R = static_cast<int64_t>(rows.size());
    const OwnedTensor gate_up = host_rows(st->x[0], rows), residual = host_rows(st->out[0], rows);
    ops::swiglu_gemm_add(st->x[0], st->w[0], st->out[0], st->scratch[0], st->scratch2[0]);
    const OwnedTensor w = to_host(st->w[0]);
    parallel_ranges(c.n, [&](int64_t n0, int64_t n1) {
      const OwnedTensor act(DType::bf16, {R, c.inter}, kCpu), scratch(DType::bf16, {R, n1 - n0}, kCpu);
      ops::swiglu_gemm_add(gate_up, w.view().slice(0, n0, n1), residual.view().slice(1, n0, n1),
                           act, scratch);
    });
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->out[0], rows), residual);
    return make_accuracy(acc, c, "cpu fp64 sums, residual, " + rows_label(R, c.tokens));
  };
  p.note = sets_note(sets) + (c.tokens <= 4 ? "; fused GEMV path" : "; unfused path (m > 4)");
  return p;
}

CasePlan plan_rms_norm_gemm_argmax(const KernelCase& c, const SuiteEnv& env) {
  const int sets = case_sets(c, env);
  auto st = std::make_shared<GemmState>();
  const int64_t M = c.tokens, V = c.vocab, K = c.k;
  st->x = SetTensor(DType::bf16, {M, K}, sets, env.device);
  st->norm = SetTensor(DType::bf16, {K}, sets, env.device);
  st->w = SetTensor(DType::bf16, {V, K}, sets, env.device);
  st->out = SetTensor(DType::f32, {M, V}, sets, env.device);  // logits scratch
  st->scratch = SetTensor(DType::bf16, {M, K}, sets, env.device);
  st->ids = SetTensor(DType::i32, {M}, sets, env.device);
  st->x.fill_uniform(env.seed, -2.0f, 2.0f);
  st->norm.fill_uniform(env.seed + 1, 0.5f, 1.5f);
  st->w.fill_uniform(env.seed + 2, -weight_range(K), weight_range(K));
  CasePlan p;
  p.sets = sets;
  p.launch = [st](int s, Stream stream) {
    ops::rms_norm_gemm_argmax(st->x[s], st->norm[s], kEps, st->w[s], st->ids[s], st->out[s],
                              st->scratch[s], stream);
  };
  p.check = [st, c, seed = env.seed] {
    st->ids.poison();
    ops::rms_norm_gemm_argmax(st->x[0], st->norm[0], kEps, st->w[0], st->ids[0], st->out[0],
                              st->scratch[0]);
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const int64_t R = static_cast<int64_t>(rows.size());
    const OwnedTensor x = host_rows(st->x[0], rows), norm = to_host(st->norm[0]);
    const OwnedTensor w = to_host(st->w[0]), logits(DType::f32, {R, c.vocab}, kCpu);
    // The op's definition on the CPU: rms_norm_gemm to f32 logits, then argmax.
    parallel_ranges(c.vocab, [&](int64_t n0, int64_t n1) {
      const OwnedTensor normed(DType::bf16, {R, c.k}, kCpu);
      ops::rms_norm_gemm(x, norm, kEps, w.view().slice(0, n0, n1), Tensor{},
                         logits.view().slice(1, n0, n1), normed);
    });
    const OwnedTensor ids(DType::i32, {R}, kCpu);
    ops::argmax(logits, ids);
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->ids[0], rows), ids);
    return make_accuracy(acc, c, "cpu (rms_norm_gemm f32 logits, argmax), exact ids, " +
                                     rows_label(R, c.tokens));
  };
  p.note = sets_note(sets) + (c.tokens <= 4 ? "; fused GEMV + argmax epilogue" : "");
  return p;
}

}  // namespace

CasePlan plan_gemm_case(const KernelCase& c, const SuiteEnv& env) {
  switch (c.op) {
    case KernelOp::gemm: return plan_gemm(c, env);
    case KernelOp::rms_norm_gemm: return plan_rms_norm_gemm(c, env);
    case KernelOp::gemm_add: return plan_gemm_add(c, env);
    case KernelOp::swiglu_gemm_add: return plan_swiglu_gemm_add(c, env);
    case KernelOp::rms_norm_gemm_argmax: return plan_rms_norm_gemm_argmax(c, env);
    default: break;
  }
  throw Error(ErrorKind::internal, "bench kernels: not a GEMM op");
}

}  // namespace braid::bench::kernel_suite
