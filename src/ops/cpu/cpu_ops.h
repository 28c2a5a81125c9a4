// CPU reference implementations: plain loops, fp32/fp64 accumulation. Called by src/ops/*.cpp
// after the arguments are checked; see include/braid/ops.h for the contracts.
#pragma once

#include "braid/ops.h"

namespace braid::cpu {

void embedding(const Tensor& ids, const Tensor& table, const Tensor& out);
void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out);
void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                  const Tensor& out);
void rope_apply(const Tensor& q, const Tensor& k, const Tensor& positions, const ops::RopeTable& table);
void silu_mul(const Tensor& x, const Tensor& out);
void gemm(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out);
void softmax(const Tensor& x, const Tensor& out);
void argmax(const Tensor& x, const Tensor& out);
void attention(const Tensor& q, const Tensor& cu_seqlens_q, const ops::PagedKV& kv, bool causal,
               float softmax_scale, const Tensor& out, const Tensor& lse);
void moe_route_topk_softmax(const Tensor& logits, int k, bool renormalize,
                            const Tensor& topk_weights, const Tensor& topk_ids);
void moe_route_grouped(const Tensor& logits, const Tensor& bias, int n_group, int topk_group,
                       int k, float routed_scaling_factor, const Tensor& topk_weights,
                       const Tensor& topk_ids);
void moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                 const Tensor& gate_up, const Tensor& down, const Tensor& workspace,
                 const Tensor& out);
void moe_grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& expert_offsets,
                      ops::MoeActivation activation, const Tensor& y);
void moe_permute(const Tensor& topk_ids, int num_experts, const Tensor& expert_offsets,
                 const Tensor& sorted_pairs, const Tensor& pair_rows);
void moe_gather(const Tensor& x, const Tensor& sorted_pairs, int k, const Tensor& xs);
void moe_combine(const Tensor& ys, const Tensor& pair_rows, const Tensor& topk_weights,
                 const Tensor& out);

void kv_append(const Tensor& k, const Tensor& v, const Tensor& slots, const Tensor& k_pages,
               const Tensor& v_pages);

void qk_norm_rope_kv_append(const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& q_norm, const Tensor& k_norm, float eps,
                            const Tensor& positions, const ops::RopeTable& table,
                            const Tensor& slots, const Tensor& k_pages, const Tensor& v_pages);

// Fused decode ops (fused_gemm.cpp): the primitives above in sequence.
void add_inplace(const Tensor& x, const Tensor& residual);
void rms_norm_gemm(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                   const Tensor& bias, const Tensor& out, const Tensor& normed);
void rms_norm_gemm_argmax(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                          const Tensor& ids, const Tensor& logits, const Tensor& normed);
void gemm_add(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& residual,
              const Tensor& scratch);
void swiglu_gemm_add(const Tensor& gate_up, const Tensor& w, const Tensor& residual,
                     const Tensor& act, const Tensor& scratch);

}  // namespace braid::cpu
