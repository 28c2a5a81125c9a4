// The tensors of one MoE layer and each step of its forward pass, for `bench moe`. Only ops and
// the bench's fills: no CUDA headers, so the same code runs on the CPU (the tests drive it there
// at small shapes) and on the GPU (the bench).
//
// Grouped path:  logits = gemm(x, router) -> route -> permute -> gather -> grouped GEMM (swiglu)
//                -> grouped GEMM -> combine
// Decode path:   logits = gemm(x, router) -> route -> moe_experts
#pragma once

#include <cstdint>

#include "bench/suites/moe.h"
#include "braid/buffer.h"
#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::bench {

// bf16 weights, uniform with the standard deviation of Kaiming-style init (1 / sqrt(fan_in)) so
// that every activation stays O(1): router [E, H], gate_up [E, 2I, H], down [E, H, I]. With
// --skew, router_bias [E] is moe_skew_bias(); otherwise it is empty and the gemm takes no bias.
struct MoeWeights {
  OwnedTensor router, router_bias, gate_up, down;
};
MoeWeights make_moe_weights(const MoeModel& m, bool skew, uint64_t seed, Device dev);

// One input set (x, uniform with standard deviation 1) and everything its forward pass writes.
// The grouped path's buffers are empty on the decode path and the reverse.
struct MoeBuffers {
  OwnedTensor x, logits, topk_weights, topk_ids, out;
  OwnedTensor expert_offsets, sorted_pairs, pair_rows, permute_workspace, xs, h, ys;  // grouped
  OwnedTensor experts_workspace;                                                      // decode
};
MoeBuffers make_moe_buffers(const MoeShape& s, uint64_t seed, Device dev);

// The dense cuBLAS peer's outputs: [T*k, 2I] and [T*k, H].
struct MoeDenseBuffers {
  OwnedTensor gate_up_out, down_out;
};
MoeDenseBuffers make_moe_dense_buffers(const MoeShape& s, Device dev);

// Enqueues one step on `stream` (layer and layer_graph: every component of the shape's path).
// The dense steps need `dense`: one big GEMM over all T*k gathered rows by expert 0's weights,
// the same FLOPs as the experts' GEMMs in one cuBLAS call each.
void enqueue_moe_step(MoeStep step, const MoeShape& s, const MoeWeights& w, const MoeBuffers& b,
                      const MoeDenseBuffers* dense, Stream stream);

}  // namespace braid::bench
