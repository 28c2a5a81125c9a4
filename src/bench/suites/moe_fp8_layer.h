// The tensors of `bench moe-fp8`'s two layers and each step of their forward passes. Only ops, the
// bench's fills (bench/fp8_fill.h) and, for the dense peer, bench::fp8_gemm: no CUDA headers, so
// the same code runs on the CPU (the tests drive it there at small shapes) and on the GPU.
//
// seed003 (DeepSeek-V3 definition):
//   pipeline: moe_route_grouped -> moe_permute (local experts) -> moe_gather_fp8 ->
//             moe_grouped_gemm_fp8 (swiglu_gate_last, fp8 h in `terms` terms) ->
//             moe_grouped_gemm_fp8 (none, f32 ys) -> moe_combine (bf16 out)
//   op:       ops::moe_fp8_block_scale on the same inputs
// seed001 in FP8 (bench moe's layer, its experts in fp8):
//   gemm (router, bf16) -> moe_route_topk_softmax -> moe_permute -> moe_gather (bf16) ->
//   moe_fp8_quantize (1 term) -> moe_grouped_gemm_fp8 (swiglu, fp8 h) ->
//   moe_grouped_gemm_fp8 (none, bf16 ys) -> moe_combine (bf16 out)
#pragma once

#include <cstdint>

#include "bench/suites/moe.h"
#include "bench/suites/moe_fp8.h"
#include "bench/suites/moe_layer.h"
#include "braid/buffer.h"
#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::bench {

// A DeepSeek-V3 MoE layer's dimensions and routing (seed 003's definition, or a small one for
// the tests). The local experts are [local_offset, local_offset + local_experts).
struct DsModel {
  int64_t hidden = 0, inter = 0;
  int global_experts = 0, local_experts = 0, local_offset = 0;
  int n_group = 0, topk_group = 0, k = 0;
  float routed_scaling_factor = 1.0f;
};
DsModel seed003_ds_model();

// One input set, made as flashinfer's test generator makes them:
//   logits [T, E_global] f32  N(0, 1), +10 on the local experts' columns;
//   bias   [E_global] bf16    N(0, 1), on the local experts |N(0, 1)| + 5;
//   hidden [T, H] f8e4m3 and hidden_scale [H / 128, T] f32: 2 N(0, 1) quantized in 1 x 128
//          blocks (bench/fp8_fill.h).
// With local_experts >= k every choice of the router is a local expert: a local expert's biased
// score is about 6 (sigmoid(10 + N) + |N| + 5), every other's below 1 + max N.
struct DsInputs {
  OwnedTensor logits, bias, hidden, hidden_scale;
};
DsInputs make_ds_inputs(const DsModel& m, int64_t tokens, uint64_t seed, Device dev);

// The local experts' weights: N(0, 1) quantized in 128 x 128 blocks.
//   w1 [E, 2I, H] f8e4m3 (I up rows, then I gate rows), w1_scale [E, 2I / 128, H / 128] f32
//   w2 [E, H, I]  f8e4m3, w2_scale [E, H / 128, I / 128] f32
struct DsWeights {
  OwnedTensor w1, w1_scale, w2, w2_scale;
};
DsWeights make_ds_weights(const DsModel& m, uint64_t seed, Device dev);

// What the op and the pipeline write, for one (tokens, terms).
struct DsBuffers {
  int terms = 1;
  OwnedTensor op_workspace, op_out;  // ops::moe_fp8_block_scale
  OwnedTensor topk_weights, topk_ids, expert_offsets, sorted_pairs, pair_rows, permute_workspace;
  OwnedTensor xs, xs_scale, h, h_scale, ys, out;  // the pipeline: out is its output
};
DsBuffers make_ds_buffers(const DsModel& m, int64_t tokens, int terms, Device dev);

// Enqueues one seed003 step (Fp8Step::ds_*) on `stream`; ds_pipeline enqueues the six components.
// The pipeline needs local_offset == 0 (moe_permute numbers the local experts from 0): throws
// braid::Error (invalid_argument) otherwise.
void enqueue_ds_step(Fp8Step step, const DsModel& m, const DsInputs& in, const DsWeights& w,
                     const DsBuffers& b, Stream stream);

// seed001 in FP8: the bf16 layer's weights (bench moe's, make_moe_weights) quantized in
// 128 x 128 blocks, on their device.
//   gate_up [E, 2I, H] f8e4m3 (I gate rows, then I up rows), gate_up_scale [E, 2I/128, H/128] f32
//   down    [E, H, I] f8e4m3,                                down_scale    [E, H/128, I/128] f32
struct Fp8LayerWeights {
  OwnedTensor gate_up, gate_up_scale, down, down_scale;
};
Fp8LayerWeights quantize_moe_weights(const MoeModel& m, const MoeWeights& w);

// The FP8 steps' buffers beside bench moe's MoeBuffers (whose router, permutation and gathered
// bf16 rows the FP8 layer reads, and whose out the bf16 layer writes):
//   xq [P, H] f8e4m3 and xq_scale [H/128, P]; h [P, I] f8e4m3 and h_scale [I/128, P];
//   ys [P, H] bf16; out [T, H] bf16 (the FP8 layer's output).
struct Fp8LayerBuffers {
  OwnedTensor xq, xq_scale, h, h_scale, ys, out;
};
Fp8LayerBuffers make_fp8_layer_buffers(const MoeShape& s, Device dev);

// Enqueues one seed001 FP8 step on `stream`. The bf16 steps run bench moe's enqueue_moe_step on
// `b`; bf16_layer_graph runs bench moe's whole bf16 layer (into b.out). The dense steps need
// `dense` (bench moe's MoeDenseBuffers: bf16 [P, 2I] and [P, H]) and run bench::fp8_gemm of all P
// quantized rows by expert 0's fp8 weights (CUDA only). The shape must take the grouped path.
void enqueue_fp8_layer_step(Fp8Step step, const MoeShape& s, const MoeWeights& w,
                            const Fp8LayerWeights& w8, const MoeBuffers& b,
                            const Fp8LayerBuffers& b8, const MoeDenseBuffers* dense,
                            Stream stream);

}  // namespace braid::bench
