// Pieces the MoE ops share on the host: the routers' argument checks, the grouped GEMMs' offsets
// check, the FP8 block-scale operands' checks, and the chunking of moe_permute that its workspace
// size and its CUDA kernels both depend on.
#pragma once

#include <cstdint>
#include <string>

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

// A grouped router's scalars (moe_route_grouped, moe_route_softmax_grouped), in the order the
// contracts state them, each bound following from the ones before: n_group divides E,
// 1 <= topk_group <= n_group, 1 <= k <= min(kMoeMaxTopK, topk_group * E / n_group), and
// routed_scaling_factor finite. `k_arg` names k in the message.
void router_groups(const char* op, int64_t experts, int n_group, int topk_group, int k,
                   const char* k_arg, float routed_scaling_factor);

// A grouped GEMM's expert_offsets values: offsets[0] >= 0, non-decreasing, offsets[E] <= m. Only
// the CPU can read them; CUDA trusts them (checking would need a host synchronisation) and its
// kernels clamp them to [0, m] so that bad ones cannot send stores outside y.
void expert_offsets_values(const char* op, const Tensor& offsets, int64_t experts, int64_t m);

// FP8 block scales (kFp8Block values of a row per scale), stored transposed: [blocks, rows] f32,
// rows, with a row stride of at least `rows` (so that the rows of the scales do not overlap).
void fp8_scales(const char* op, const char* arg, const Tensor& scales, int64_t blocks, int64_t rows);

// An fp8 operand holding terms of width k side by side: [rows, terms * k] f8e4m3, rows, with
// 1 <= terms <= kFp8MaxTerms. Returns terms; `k_meaning` says where k comes from in the message.
int64_t fp8_terms(const char* op, const char* arg, const Tensor& t, int64_t k,
                  const std::string& k_meaning);

}  // namespace braid::ops::moe_check
