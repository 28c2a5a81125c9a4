#include "bench/suites/moe_layer.h"

#include <cmath>
#include <random>
#include <vector>

#include "bench/harness/random_weights.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench {

namespace {

// Uniform in [-a, a] has standard deviation a / sqrt(3).
float half_width(double stddev) { return static_cast<float>(stddev * std::sqrt(3.0)); }

OwnedTensor random_tensor(DType t, const std::vector<int64_t>& shape, uint64_t seed, double stddev,
                          Device dev) {
  OwnedTensor out(t, shape, dev);
  fill_random(out, seed, -half_width(stddev), half_width(stddev));
  return out;
}

}  // namespace

MoeWeights make_moe_weights(const MoeModel& m, bool skew, uint64_t seed, Device dev) {
  const int64_t E = m.experts, H = m.hidden, I = m.inter;
  MoeWeights w;
  // The router's logits then have a standard deviation of about 1 (x's is 1): a softmax that is
  // neither flat nor one-hot, as a trained router's.
  w.router = random_tensor(DType::bf16, {E, H}, seed, 1.0 / std::sqrt(double(H)), dev);
  w.gate_up = random_tensor(DType::bf16, {E, 2 * I, H}, seed + 1, 1.0 / std::sqrt(double(H)), dev);
  w.down = random_tensor(DType::bf16, {E, H, I}, seed + 2, 1.0 / std::sqrt(double(I)), dev);
  if (skew) {
    const std::vector<float> bias = moe_skew_bias(m.experts, m.k);
    OwnedTensor host(DType::bf16, {E}, Device::cpu());
    for (int64_t e = 0; e < E; ++e) store_from_float(host.data(), DType::bf16, e, bias[e]);
    w.router_bias = OwnedTensor(DType::bf16, {E}, dev);
    copy(host, w.router_bias);
  }
  return w;
}

MoeBuffers make_moe_buffers(const MoeShape& s, uint64_t seed, Device dev) {
  const MoeModel& m = s.model;
  const int64_t T = s.tokens, H = m.hidden, I = m.inter, E = m.experts, k = m.k, P = T * k;
  MoeBuffers b;
  b.x = random_tensor(DType::bf16, {T, H}, seed, 1.0, dev);
  b.logits = OwnedTensor(DType::bf16, {T, E}, dev);  // the model dtype, as a gate Linear writes it
  b.topk_weights = OwnedTensor(DType::f32, {T, k}, dev);
  b.topk_ids = OwnedTensor(DType::i32, {T, k}, dev);
  b.out = OwnedTensor(DType::bf16, {T, H}, dev);
  if (s.decode()) {
    b.experts_workspace = OwnedTensor(DType::f32, {P, I}, dev);
    return b;
  }
  b.expert_offsets = OwnedTensor(DType::i32, {E + 1}, dev);
  b.sorted_pairs = OwnedTensor(DType::i32, {P}, dev);
  b.pair_rows = OwnedTensor(DType::i32, {P}, dev);
  b.permute_workspace = OwnedTensor(DType::i32, {ops::moe_permute_workspace_size(P, E)}, dev);
  b.xs = OwnedTensor(DType::bf16, {P, H}, dev);
  b.h = OwnedTensor(DType::bf16, {P, I}, dev);
  b.ys = OwnedTensor(DType::bf16, {P, H}, dev);
  return b;
}

MoeDenseBuffers make_moe_dense_buffers(const MoeShape& s, Device dev) {
  const int64_t P = s.tokens * s.model.k;
  return {OwnedTensor(DType::bf16, {P, 2 * s.model.inter}, dev),
          OwnedTensor(DType::bf16, {P, s.model.hidden}, dev)};
}

void enqueue_moe_step(MoeStep step, const MoeShape& s, const MoeWeights& w, const MoeBuffers& b,
                      const MoeDenseBuffers* dense, Stream stream) {
  const MoeModel& m = s.model;
  switch (step) {
    case MoeStep::router_gemm: return ops::gemm(b.x, w.router, w.router_bias, b.logits, stream);
    case MoeStep::route:
      return ops::moe_route_topk_softmax(b.logits, m.k, m.renormalize, b.topk_weights, b.topk_ids,
                                         stream);
    case MoeStep::permute:
      return ops::moe_permute(b.topk_ids, m.experts, b.expert_offsets, b.sorted_pairs, b.pair_rows,
                              b.permute_workspace, stream);
    case MoeStep::gather: return ops::moe_gather(b.x, b.sorted_pairs, m.k, b.xs, stream);
    case MoeStep::gate_up:
      return ops::moe_grouped_gemm(b.xs, w.gate_up, b.expert_offsets, ops::MoeActivation::swiglu,
                                   b.h, stream);
    case MoeStep::down:
      return ops::moe_grouped_gemm(b.h, w.down, b.expert_offsets, ops::MoeActivation::none, b.ys,
                                   stream);
    case MoeStep::combine:
      return ops::moe_combine(b.ys, b.pair_rows, b.topk_weights, b.out, stream);
    case MoeStep::experts:
      return ops::moe_experts(b.x, b.topk_weights, b.topk_ids, w.gate_up, w.down,
                              b.experts_workspace, b.out, stream);
    case MoeStep::layer:
    case MoeStep::layer_graph:
      for (MoeStep c : moe_components(s.decode())) enqueue_moe_step(c, s, w, b, dense, stream);
      return;
    case MoeStep::dense_gate_up:
    case MoeStep::dense_down: break;
  }
  if (!dense || s.decode())
    throw Error(ErrorKind::invalid_argument,
                "bench moe: the dense peer needs the grouped path's buffers and its own outputs");
  // Expert 0's weights as one dense layer: [2I, H] and [H, I], the [out, in] layout gemm takes.
  if (step == MoeStep::dense_gate_up)
    return ops::gemm(b.xs, w.gate_up.view().select(0, 0), Tensor{}, dense->gate_up_out, stream);
  ops::gemm(b.h, w.down.view().select(0, 0), Tensor{}, dense->down_out, stream);
}

}  // namespace braid::bench
