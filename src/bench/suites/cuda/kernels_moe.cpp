// `bench kernels`: the routers and the bf16 MoE ops on Qwen3-30B-A3B's layer (DeepSeek-V3's for
// moe_route_grouped). The permutation ops and the expert GEMMs run on the balanced routing of
// kernel_suite.h (so their bytes follow from the shape); the routers on random logits. Inputs
// rotate over the case's input sets (the routing too, so a decode step's experts change); the
// expert weights are one copy (far larger than the L2).
#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "bench/harness/cuda/kernels.h"
#include "bench/suites/cuda/kernels.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench::kernel_suite {

namespace {

constexpr int kRowsChecked = 128;        // data-movement ops
constexpr int kGemmRowsChecked = 16;     // grouped GEMM rows
constexpr float kRoutedScaling = 2.5f;  // DeepSeek-V3's routed_scaling_factor
const Device kCpu = Device::cpu();

float weight_range(int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); }

// ---- routers ------------------------------------------------------------------------------------

// Weights compared position by position with the reference's; a position whose expert id differs
// counts its weight as 0 (that expert got nothing), so any wrong or misordered id fails the f32
// tolerance by far, as bench router's "ids equal" rule does, while the error figures stay finite.
Accuracy router_accuracy(const KernelCase& c, const Tensor& weights, const Tensor& ids,
                         const Tensor& ref_weights, const Tensor& ref_ids) {
  const OwnedTensor w = to_host(weights), i = to_host(ids);
  const int64_t k = c.top_k;
  int64_t mismatches = 0;
  ErrorAccumulator acc;
  std::vector<float> got(static_cast<size_t>(k));
  std::vector<double> ref(static_cast<size_t>(k));
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = t * k + j;
      const bool same = i.view().ptr<int32_t>()[e] == ref_ids.ptr<int32_t>()[e];
      mismatches += same ? 0 : 1;
      got[j] = same ? w.view().ptr<float>()[e] : 0.0f;
      ref[j] = ref_weights.ptr<float>()[e];
    }
    acc.add(got.data(), ref.data(), k);
  }
  return make_accuracy(acc, c, fmt::format("cpu f32, ids exact ({} of {} differ) and weights",
                                           mismatches, c.tokens * k));
}

CasePlan plan_router(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    SetTensor logits, weights, ids;
    OwnedTensor bias;
  };
  const bool grouped = c.op == KernelOp::moe_route_grouped;
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t T = c.tokens;
  // Qwen3's router reads the bf16 gate output; DeepSeek-V3's f32 logits and a bf16 bias.
  st->logits = SetTensor(grouped ? DType::f32 : DType::bf16, {T, c.experts}, sets, env.device);
  st->logits.fill_uniform(env.seed, -4.0f, 4.0f);
  st->weights = SetTensor(DType::f32, {T, c.top_k}, sets, env.device);
  st->ids = SetTensor(DType::i32, {T, c.top_k}, sets, env.device);
  st->bias = OwnedTensor(DType::bf16, {c.experts}, env.device);
  fill_uniform(st->bias, env.seed + 1, -0.5f, 0.5f, {});
  auto route = [c, grouped](const Tensor& logits, const Tensor& bias, const Tensor& w,
                            const Tensor& ids, Stream s) {
    if (grouped)
      ops::moe_route_grouped(logits, bias, c.n_group, c.topk_group, c.top_k, kRoutedScaling, w,
                             ids, s);
    else
      ops::moe_route_topk_softmax(logits, c.top_k, true, w, ids, s);
  };
  CasePlan p;
  p.sets = sets;
  p.launch = [st, route](int s, Stream stream) {
    route(st->logits[s], st->bias, st->weights[s], st->ids[s], stream);
  };
  p.check = [st, route, c] {
    st->weights.poison();
    st->ids.poison();
    route(st->logits[0], st->bias, st->weights[0], st->ids[0], {});
    const OwnedTensor w(DType::f32, {c.tokens, c.top_k}, kCpu), ids(DType::i32, {c.tokens, c.top_k}, kCpu);
    route(to_host(st->logits[0]), to_host(st->bias), w, ids, {});
    return router_accuracy(c, st->weights[0], st->ids[0], w, ids);
  };
  p.note = fmt::format("{}{}",
                       grouped ? "f32 logits, bf16 bias, scaling 2.5" : "bf16 logits, renormalize",
                       rotation(sets, "logits"));
  return p;
}

// ---- permutation ops ----------------------------------------------------------------------------

// Balanced ids [T, k] for every set, and their permutation on the host.
SetTensor balanced_ids(const KernelCase& c, int sets, Device device) {
  SetTensor ids(DType::i32, {c.tokens, c.top_k}, sets, device);
  ids.upload([&](int set, const Tensor& h) { fill_balanced_ids(h, set, c.experts); });
  return ids;
}

// A per-set i32 vector [T k] from each set's balanced permutation: sorted_pairs or pair_rows.
SetTensor permutation_vectors(const KernelCase& c, int sets, Device device, bool pair_rows) {
  const int64_t P = c.tokens * c.top_k;
  SetTensor v(DType::i32, {P}, sets, device);
  v.upload([&](int set, const Tensor& h) {
    const OwnedTensor ids(DType::i32, {c.tokens, c.top_k}, kCpu);
    fill_balanced_ids(ids, set, c.experts);
    const HostPermutation perm = host_permutation(ids, c.experts);
    const std::vector<int32_t>& src = pair_rows ? perm.pair_rows : perm.sorted_pairs;
    std::copy(src.begin(), src.end(), h.ptr<int32_t>());
  });
  return v;
}

CasePlan plan_permute(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    SetTensor ids, offsets, sorted, rows;
    OwnedTensor workspace;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t P = c.tokens * c.top_k;
  st->ids = balanced_ids(c, sets, env.device);
  st->offsets = SetTensor(DType::i32, {int64_t{c.experts} + 1}, sets, env.device);
  st->sorted = SetTensor(DType::i32, {P}, sets, env.device);
  st->rows = SetTensor(DType::i32, {P}, sets, env.device);
  st->workspace =
      OwnedTensor(DType::i32, {ops::moe_permute_workspace_size(P, c.experts)}, env.device);
  CasePlan p;
  p.sets = sets;
  p.launch = [st, c](int s, Stream stream) {
    ops::moe_permute(st->ids[s], c.experts, st->offsets[s], st->sorted[s], st->rows[s],
                     st->workspace, stream);
  };
  p.check = [st, c] {
    st->offsets.poison();
    st->sorted.poison();
    st->rows.poison();
    ops::moe_permute(st->ids[0], c.experts, st->offsets[0], st->sorted[0], st->rows[0],
                     st->workspace);
    const HostPermutation ref = host_permutation(to_host(st->ids[0]), c.experts);
    ErrorAccumulator acc;
    add_values(acc, to_host(st->offsets[0]).data(), host_i32(ref.offsets).data(), DType::i32,
               c.experts + 1);
    add_values(acc, to_host(st->sorted[0]).data(), host_i32(ref.sorted_pairs).data(), DType::i32,
               int64_t(ref.sorted_pairs.size()));
    add_values(acc, to_host(st->rows[0]).data(), host_i32(ref.pair_rows).data(), DType::i32,
               int64_t(ref.pair_rows.size()));
    return make_accuracy(acc, c, "cpu, exact offsets, sorted_pairs and pair_rows");
  };
  p.note = "balanced routing" + rotation(sets, "ids");
  return p;
}

CasePlan plan_gather(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    SetTensor x, sorted, xs;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t P = c.tokens * c.top_k;
  st->x = SetTensor(DType::bf16, {c.tokens, c.hidden}, sets, env.device);
  st->x.fill_uniform(env.seed, -1.0f, 1.0f);
  st->sorted = permutation_vectors(c, sets, env.device, false);
  st->xs = SetTensor(DType::bf16, {P, c.hidden}, sets, env.device);
  CasePlan p;
  p.sets = sets;
  p.launch = [st, c](int s, Stream stream) {
    ops::moe_gather(st->x[s], st->sorted[s], c.top_k, st->xs[s], stream);
  };
  p.check = [st, c, P, seed = env.seed] {
    st->xs.poison();
    ops::moe_gather(st->x[0], st->sorted[0], c.top_k, st->xs[0]);
    const OwnedTensor ref(DType::bf16, {P, c.hidden}, kCpu);
    ops::moe_gather(to_host(st->x[0]), to_host(st->sorted[0]), c.top_k, ref);
    const std::vector<int64_t> rows = sample_rows(P, kRowsChecked, seed);
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->xs[0], rows), host_rows(ref, rows));
    return make_accuracy(acc, c, "cpu, exact, " + rows_label(rows.size(), P));
  };
  p.note = "balanced routing" + rotation(sets, "tensors");
  return p;
}

CasePlan plan_combine(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    SetTensor ys, rows, weights, out;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t P = c.tokens * c.top_k;
  st->ys = SetTensor(DType::bf16, {P, c.hidden}, sets, env.device);
  st->ys.fill_uniform(env.seed, -1.0f, 1.0f);
  st->rows = permutation_vectors(c, sets, env.device, true);
  st->weights = SetTensor(DType::f32, {c.tokens, c.top_k}, sets, env.device);
  st->weights.fill_uniform(env.seed + 1, 0.0f, 0.25f);
  st->out = SetTensor(DType::bf16, {c.tokens, c.hidden}, sets, env.device);
  CasePlan p;
  p.sets = sets;
  p.launch = [st](int s, Stream stream) {
    ops::moe_combine(st->ys[s], st->rows[s], st->weights[s], st->out[s], stream);
  };
  p.check = [st, c, seed = env.seed] {
    st->out.poison();
    ops::moe_combine(st->ys[0], st->rows[0], st->weights[0], st->out[0]);
    // The sampled tokens' expert outputs, in pair order, and their weights: a problem of R tokens.
    const std::vector<int64_t> tokens = sample_rows(c.tokens, kRowsChecked, seed);
    const OwnedTensor pair_rows = to_host(st->rows[0]);
    std::vector<int64_t> ys_rows;
    for (int64_t t : tokens)
      for (int64_t j = 0; j < c.top_k; ++j)
        ys_rows.push_back(pair_rows.view().ptr<int32_t>()[t * c.top_k + j]);
    std::vector<int32_t> identity(ys_rows.size());
    for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int32_t>(i);
    const OwnedTensor ref(DType::bf16, {static_cast<int64_t>(tokens.size()), c.hidden}, kCpu);
    ops::moe_combine(host_rows(st->ys[0], ys_rows), host_i32(identity),
                     host_rows(st->weights[0], tokens), ref);
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->out[0], tokens), ref);
    return make_accuracy(acc, c, "cpu f32, " + rows_label(tokens.size(), c.tokens, "tokens"));
  };
  p.note = "balanced routing" + rotation(sets, "tensors");
  return p;
}

// ---- expert GEMMs -------------------------------------------------------------------------------

CasePlan plan_grouped_gemm(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    SetTensor x, y;
    OwnedTensor w, offsets;
    std::vector<int32_t> offsets_host;
  };
  const bool swiglu = c.variant != "down";
  const ops::MoeActivation act = swiglu ? ops::MoeActivation::swiglu : ops::MoeActivation::none;
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t P = c.tokens * c.top_k;
  // gate_up: xs [P, H] by w [E, 2I, H] -> h [P, I]; down: h [P, I] by w [E, H, I] -> ys [P, H]
  const int64_t K = swiglu ? c.hidden : c.inter, N = swiglu ? 2 * c.inter : c.hidden;
  const int64_t y_cols = swiglu ? c.inter : c.hidden;
  st->x = SetTensor(DType::bf16, {P, K}, sets, env.device);
  st->x.fill_uniform(env.seed, -1.0f, 1.0f);
  st->y = SetTensor(DType::bf16, {P, y_cols}, sets, env.device);
  st->w = OwnedTensor(DType::bf16, {c.experts, N, K}, env.device);
  fill_uniform(st->w, env.seed + 1, -weight_range(K), weight_range(K), {});
  st->offsets_host = balanced_expert_offsets(P, c.experts);
  st->offsets = OwnedTensor(DType::i32, {int64_t{c.experts} + 1}, env.device);
  copy(host_i32(st->offsets_host), st->offsets);
  CasePlan p;
  p.sets = sets;
  p.launch = [st, act](int s, Stream stream) {
    ops::moe_grouped_gemm(st->x[s], st->w, st->offsets, act, st->y[s], stream);
  };
  p.check = [st, c, act, P, y_cols, seed = env.seed] {
    st->y.poison();
    ops::moe_grouped_gemm(st->x[0], st->w, st->offsets, act, st->y[0]);
    // The sampled rows as a problem of their own over the experts they belong to.
    const std::vector<int64_t> rows = sample_rows(P, kGemmRowsChecked, seed);
    const RowExperts re = experts_of_rows(st->offsets_host, rows);
    const OwnedTensor ref(DType::bf16, {static_cast<int64_t>(rows.size()), y_cols}, kCpu);
    ops::moe_grouped_gemm(host_rows(st->x[0], rows), host_experts(st->w, re.experts),
                          host_i32(re.offsets), act, ref);
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->y[0], rows), ref);
    return make_accuracy(acc, c, "cpu fp64 sums, " + rows_label(rows.size(), P));
  };
  p.note = fmt::format("{}; balanced: {} rows over {} experts{}", swiglu ? "swiglu" : "none", P,
                       balanced_active_experts(P, c.experts), rotation(sets, "x, y"));
  return p;
}

CasePlan plan_experts(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    SetTensor x, weights, ids, out;
    OwnedTensor gate_up, down, workspace;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t T = c.tokens, H = c.hidden, I = c.inter, P = T * c.top_k;
  st->x = SetTensor(DType::bf16, {T, H}, sets, env.device);
  st->x.fill_uniform(env.seed, -1.0f, 1.0f);
  st->weights = SetTensor(DType::f32, {T, c.top_k}, sets, env.device);
  st->weights.fill_uniform(env.seed + 1, 0.05f, 0.25f);
  st->ids = balanced_ids(c, sets, env.device);
  st->out = SetTensor(DType::bf16, {T, H}, sets, env.device);
  st->gate_up = OwnedTensor(DType::bf16, {c.experts, 2 * I, H}, env.device);
  st->down = OwnedTensor(DType::bf16, {c.experts, H, I}, env.device);
  fill_uniform(st->gate_up, env.seed + 2, -weight_range(H), weight_range(H), {});
  fill_uniform(st->down, env.seed + 3, -weight_range(I), weight_range(I), {});
  st->workspace = OwnedTensor(DType::f32, {P, I}, env.device);
  CasePlan p;
  p.sets = sets;
  p.launch = [st](int s, Stream stream) {
    ops::moe_experts(st->x[s], st->weights[s], st->ids[s], st->gate_up, st->down, st->workspace,
                     st->out[s], stream);
  };
  p.check = [st, c, P] {
    st->out.poison();
    ops::moe_experts(st->x[0], st->weights[0], st->ids[0], st->gate_up, st->down, st->workspace,
                     st->out[0]);
    // Every token; the experts they use copied to the host, their ids renumbered.
    const OwnedTensor ids = to_host(st->ids[0]);
    std::vector<int64_t> used;
    for (int64_t i = 0; i < P; ++i) used.push_back(ids.view().ptr<int32_t>()[i]);
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    std::vector<int32_t> renumbered;
    for (int64_t i = 0; i < P; ++i)
      renumbered.push_back(static_cast<int32_t>(
          std::lower_bound(used.begin(), used.end(), ids.view().ptr<int32_t>()[i]) - used.begin()));
    const OwnedTensor ref(DType::bf16, {c.tokens, c.hidden}, kCpu);
    const OwnedTensor workspace(DType::f32, {P, c.inter}, kCpu);
    ops::moe_experts(to_host(st->x[0]), to_host(st->weights[0]),
                     host_i32(renumbered).view().reshape({c.tokens, c.top_k}),
                     host_experts(st->gate_up, used), host_experts(st->down, used), workspace, ref);
    ErrorAccumulator acc;
    add_vectors(acc, to_host(st->out[0]), ref);
    return make_accuracy(acc, c, fmt::format("cpu f32, all {} tokens", c.tokens));
  };
  p.note = fmt::format("decode path; {} distinct experts per set{}",
                       balanced_active_experts(P, c.experts), rotation(sets, "routing, x, out"));
  return p;
}

}  // namespace

CasePlan plan_moe_case(const KernelCase& c, const SuiteEnv& env) {
  switch (c.op) {
    case KernelOp::moe_route_topk_softmax:
    case KernelOp::moe_route_grouped: return plan_router(c, env);
    case KernelOp::moe_permute: return plan_permute(c, env);
    case KernelOp::moe_gather: return plan_gather(c, env);
    case KernelOp::moe_combine: return plan_combine(c, env);
    case KernelOp::moe_grouped_gemm: return plan_grouped_gemm(c, env);
    case KernelOp::moe_experts: return plan_experts(c, env);
    default: break;
  }
  throw Error(ErrorKind::internal, "bench kernels: not a bf16 MoE op");
}

}  // namespace braid::bench::kernel_suite
