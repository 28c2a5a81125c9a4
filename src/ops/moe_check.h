// Pieces the MoE ops share on the host: the routers' argument checks, and the chunking of
// moe_permute that its workspace size and its CUDA kernels both depend on.
#pragma once

#include <cstdint>

#include "braid/tensor.h"

namespace braid::ops::moe_check {

// moe_permute counts pairs in chunks of this many (one workspace row of E + 1 counts per chunk).
inline constexpr int kPermuteChunk = 1024;

// A router's logits: [T, E] f32/f16/bf16 rows with 1 <= E <= kMoeMaxExperts. Returns E.
int64_t router_logits(const char* op, const Tensor& logits);

// A router's outputs for T tokens and k choices: topk_weights [T, k] f32 and topk_ids [T, k] i32,
// both contiguous.
void router_outputs(const char* op, int64_t tokens, int k, const Tensor& topk_weights,
                    const Tensor& topk_ids);

}  // namespace braid::ops::moe_check
