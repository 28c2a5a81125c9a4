#include "bench/suites/moe_fp8_layer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "bench/harness/cuda/fp8_gemm.h"
#include "bench/harness/cuda_only.h"
#include "bench/harness/fp8_fill.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench {

namespace {

constexpr int64_t kBlock = ops::kFp8Block;

OwnedTensor fp8_scales(int64_t e, int64_t rows, int64_t cols, Device dev) {
  return OwnedTensor(DType::f32, {e, rows / kBlock, cols / kBlock}, dev);
}

}  // namespace

DsModel seed003_ds_model() {
  const Fp8Dims d = fp8_dims(Fp8Layer::seed003);
  return {d.hidden,        d.inter,           kSeed003GlobalExperts, kSeed003LocalExperts,
          kSeed003LocalOffset, kSeed003Groups, kSeed003TopkGroup,  kSeed003TopK,
          kSeed003ScalingFactor};
}

DsInputs make_ds_inputs(const DsModel& m, int64_t tokens, uint64_t seed, Device dev) {
  const int64_t T = tokens, Eg = m.global_experts, H = m.hidden;
  DsInputs in;
  // The router's inputs are small: made on the host, then copied.
  OwnedTensor logits(DType::f32, {T, Eg}, Device::cpu());
  fill_normal(logits, seed, 0.0f, 1.0f);
  float* lp = logits.view().ptr<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int e = m.local_offset; e < m.local_offset + m.local_experts; ++e) lp[t * Eg + e] += 10.0f;
  OwnedTensor bias(DType::f32, {Eg}, Device::cpu());
  fill_normal(bias, seed + 1, 0.0f, 1.0f);
  OwnedTensor bias_bf16(DType::bf16, {Eg}, Device::cpu());
  for (int e = 0; e < Eg; ++e) {
    float b = bias.view().ptr<float>()[e];
    if (e >= m.local_offset && e < m.local_offset + m.local_experts) b = std::fabs(b) + 5.0f;
    store_from_float(bias_bf16.data(), DType::bf16, e, b);
  }
  in.logits = OwnedTensor(DType::f32, {T, Eg}, dev);
  in.bias = OwnedTensor(DType::bf16, {Eg}, dev);
  copy(logits, in.logits);
  copy(bias_bf16, in.bias);

  OwnedTensor hidden(DType::f32, {T, H}, dev);
  fill_normal(hidden, seed + 2, 0.0f, 2.0f);
  in.hidden = OwnedTensor(DType::f8e4m3, {T, H}, dev);
  in.hidden_scale = OwnedTensor(DType::f32, {H / kBlock, T}, dev);
  quantize_activation_blocks(hidden, in.hidden, in.hidden_scale);
  return in;
}

DsWeights make_ds_weights(const DsModel& m, uint64_t seed, Device dev) {
  const int64_t E = m.local_experts, H = m.hidden, I = m.inter;
  DsWeights w;
  w.w1 = OwnedTensor(DType::f8e4m3, {E, 2 * I, H}, dev);
  w.w1_scale = fp8_scales(E, 2 * I, H, dev);
  w.w2 = OwnedTensor(DType::f8e4m3, {E, H, I}, dev);
  w.w2_scale = fp8_scales(E, H, I, dev);
  random_weight_blocks(w.w1, w.w1_scale, seed, 1.0f);
  random_weight_blocks(w.w2, w.w2_scale, seed + 1, 1.0f);
  return w;
}

DsBuffers make_ds_buffers(const DsModel& m, int64_t tokens, int terms, Device dev) {
  const int64_t T = tokens, H = m.hidden, I = m.inter, E = m.local_experts, k = m.k, P = T * k;
  ops::MoeFp8Options opt;
  opt.n_group = m.n_group;
  opt.topk_group = m.topk_group;
  opt.top_k = m.k;
  opt.intermediate_terms = terms;
  DsBuffers b;
  b.terms = terms;
  b.op_workspace = OwnedTensor(
      DType::u8, {std::max<int64_t>(ops::moe_fp8_block_scale_workspace_bytes(T, H, I, E, opt), 1)},
      dev);
  b.op_out = OwnedTensor(DType::bf16, {T, H}, dev);
  b.topk_weights = OwnedTensor(DType::f32, {T, k}, dev);
  b.topk_ids = OwnedTensor(DType::i32, {T, k}, dev);
  b.expert_offsets = OwnedTensor(DType::i32, {E + 1}, dev);
  b.sorted_pairs = OwnedTensor(DType::i32, {P}, dev);
  b.pair_rows = OwnedTensor(DType::i32, {P}, dev);
  b.permute_workspace = OwnedTensor(DType::i32, {ops::moe_permute_workspace_size(P, E)}, dev);
  b.xs = OwnedTensor(DType::f8e4m3, {P, H}, dev);
  b.xs_scale = OwnedTensor(DType::f32, {H / kBlock, P}, dev);
  b.h = OwnedTensor(DType::f8e4m3, {P, terms * I}, dev);
  b.h_scale = OwnedTensor(DType::f32, {terms * I / kBlock, P}, dev);
  b.ys = OwnedTensor(DType::f32, {P, H}, dev);
  b.out = OwnedTensor(DType::bf16, {T, H}, dev);
  return b;
}

void enqueue_ds_step(Fp8Step step, const DsModel& m, const DsInputs& in, const DsWeights& w,
                     const DsBuffers& b, Stream stream) {
  if (step != Fp8Step::ds_op && m.local_offset != 0)
    throw_arg_error(ErrorKind::invalid_argument, "bench moe-fp8", "local_offset",
                    "0 for the pipeline of public ops (moe_permute numbers experts from 0)",
                    std::to_string(m.local_offset));
  switch (step) {
    case Fp8Step::ds_route:
      return ops::moe_route_grouped(in.logits, in.bias, m.n_group, m.topk_group, m.k,
                                    m.routed_scaling_factor, b.topk_weights, b.topk_ids, stream);
    case Fp8Step::ds_permute:
      return ops::moe_permute(b.topk_ids, m.local_experts, b.expert_offsets, b.sorted_pairs,
                              b.pair_rows, b.permute_workspace, stream);
    case Fp8Step::ds_gather:
      return ops::moe_gather_fp8(in.hidden, in.hidden_scale, b.sorted_pairs, m.k, b.xs,
                                 b.xs_scale, stream);
    case Fp8Step::ds_gemm1:
      return ops::moe_grouped_gemm_fp8(b.xs, b.xs_scale, w.w1, w.w1_scale, b.expert_offsets,
                                       ops::MoeActivation::swiglu_gate_last, b.h, b.h_scale,
                                       stream);
    case Fp8Step::ds_gemm2:
      return ops::moe_grouped_gemm_fp8(b.h, b.h_scale, w.w2, w.w2_scale, b.expert_offsets,
                                       ops::MoeActivation::none, b.ys, Tensor{}, stream);
    case Fp8Step::ds_combine:
      return ops::moe_combine(b.ys, b.pair_rows, b.topk_weights, b.out, stream);
    case Fp8Step::ds_pipeline:
      for (Fp8Step c : fp8_components(Fp8Layer::seed003)) enqueue_ds_step(c, m, in, w, b, stream);
      return;
    case Fp8Step::ds_op: {
      ops::MoeFp8Options opt;
      opt.n_group = m.n_group;
      opt.topk_group = m.topk_group;
      opt.top_k = m.k;
      opt.intermediate_terms = b.terms;
      return ops::moe_fp8_block_scale(in.logits, in.bias, in.hidden, in.hidden_scale, w.w1,
                                      w.w1_scale, w.w2, w.w2_scale, m.local_offset,
                                      m.routed_scaling_factor, opt, b.op_workspace, b.op_out,
                                      stream);
    }
    default: break;
  }
  throw_arg_error(ErrorKind::invalid_argument, "bench moe-fp8", "step",
                  "a seed003 step (ds_*)", fp8_step_name(step));
}

Fp8LayerWeights quantize_moe_weights(const MoeModel& m, const MoeWeights& w) {
  const int64_t E = m.experts, H = m.hidden, I = m.inter;
  const Device dev = w.gate_up.view().device;
  Fp8LayerWeights q;
  q.gate_up = OwnedTensor(DType::f8e4m3, {E, 2 * I, H}, dev);
  q.gate_up_scale = fp8_scales(E, 2 * I, H, dev);
  q.down = OwnedTensor(DType::f8e4m3, {E, H, I}, dev);
  q.down_scale = fp8_scales(E, H, I, dev);
  quantize_weight_blocks(w.gate_up, q.gate_up, q.gate_up_scale);
  quantize_weight_blocks(w.down, q.down, q.down_scale);
  return q;
}

Fp8LayerBuffers make_fp8_layer_buffers(const MoeShape& s, Device dev) {
  const MoeModel& m = s.model;
  const int64_t T = s.tokens, H = m.hidden, I = m.inter, P = T * m.k;
  Fp8LayerBuffers b;
  b.xq = OwnedTensor(DType::f8e4m3, {P, H}, dev);
  b.xq_scale = OwnedTensor(DType::f32, {H / kBlock, P}, dev);
  b.h = OwnedTensor(DType::f8e4m3, {P, I}, dev);
  b.h_scale = OwnedTensor(DType::f32, {I / kBlock, P}, dev);
  b.ys = OwnedTensor(DType::bf16, {P, H}, dev);
  b.out = OwnedTensor(DType::bf16, {T, H}, dev);
  return b;
}

void enqueue_fp8_layer_step(Fp8Step step, const MoeShape& s, const MoeWeights& w,
                            const Fp8LayerWeights& w8, const MoeBuffers& b,
                            const Fp8LayerBuffers& b8, const MoeDenseBuffers* dense,
                            Stream stream) {
  if (s.decode())
    throw_arg_error(ErrorKind::invalid_argument, "bench moe-fp8", "tokens",
                    fmt::format("more than {} (the grouped path)", kMoeDecodeMaxTokens),
                    std::to_string(s.tokens));
  switch (step) {
    case Fp8Step::router_gemm:
      return enqueue_moe_step(MoeStep::router_gemm, s, w, b, nullptr, stream);
    case Fp8Step::route: return enqueue_moe_step(MoeStep::route, s, w, b, nullptr, stream);
    case Fp8Step::permute: return enqueue_moe_step(MoeStep::permute, s, w, b, nullptr, stream);
    case Fp8Step::gather: return enqueue_moe_step(MoeStep::gather, s, w, b, nullptr, stream);
    case Fp8Step::quantize: return ops::moe_fp8_quantize(b.xs, b8.xq, b8.xq_scale, stream);
    case Fp8Step::gate_up:
      return ops::moe_grouped_gemm_fp8(b8.xq, b8.xq_scale, w8.gate_up, w8.gate_up_scale,
                                       b.expert_offsets, ops::MoeActivation::swiglu, b8.h,
                                       b8.h_scale, stream);
    case Fp8Step::down:
      return ops::moe_grouped_gemm_fp8(b8.h, b8.h_scale, w8.down, w8.down_scale, b.expert_offsets,
                                       ops::MoeActivation::none, b8.ys, Tensor{}, stream);
    case Fp8Step::combine:
      return ops::moe_combine(b8.ys, b.pair_rows, b.topk_weights, b8.out, stream);
    case Fp8Step::layer:
    case Fp8Step::layer_graph:
      for (Fp8Step c : fp8_components(Fp8Layer::seed001))
        enqueue_fp8_layer_step(c, s, w, w8, b, b8, dense, stream);
      return;
    case Fp8Step::bf16_layer_graph:
      return enqueue_moe_step(MoeStep::layer_graph, s, w, b, nullptr, stream);
    case Fp8Step::dense_gate_up:
    case Fp8Step::dense_down:
      if (!dense)
        throw Error(ErrorKind::invalid_argument,
                    "bench moe-fp8: the dense fp8 peer needs its output buffers");
      // Expert 0's weights as one dense layer, the [out, in] layout fp8_gemm takes (cuBLASLt).
      {
        const auto gemm =
            cuda_only(BRAID_CUDA_ONLY(fp8_gemm), "bench moe-fp8: the dense fp8 peer");
        if (step == Fp8Step::dense_gate_up)
          return gemm(b8.xq, w8.gate_up.view().select(0, 0), dense->gate_up_out, stream);
        return gemm(b8.h, w8.down.view().select(0, 0), dense->down_out, stream);
      }
    default: break;
  }
  throw_arg_error(ErrorKind::invalid_argument, "bench moe-fp8", "step", "a seed001 FP8 step",
                  fp8_step_name(step));
}

}  // namespace braid::bench
