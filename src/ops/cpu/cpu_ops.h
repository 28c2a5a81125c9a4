// CPU reference implementations: plain loops, fp32/fp64 accumulation. Called by src/ops/*.cpp
// after the arguments are checked; see include/braid/ops.h for the contracts.
#pragma once

#include "braid/ops.h"

namespace braid::cpu {

void embedding(const Tensor& ids, const Tensor& table, const Tensor& out);
void embedding_rows(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out);
void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out);
void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                  const Tensor& out);
void rope_apply(const Tensor& q, const Tensor& k, const Tensor& positions, const ops::RopeTable& table);
void silu_mul(const Tensor& x, const Tensor& out);
// w_scale: an fp8 w's scales (ops::Weight); w is then read as w * scale, exactly.
void gemm(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out,
          const Tensor& w_scale = {});
void softmax(const Tensor& x, const Tensor& out);
void argmax(const Tensor& x, const Tensor& out);
void sample_tokens(const Tensor& logits, const Tensor& temperature, const Tensor& top_k,
                   const Tensor& top_p, const Tensor& min_p, const Tensor& seeds,
                   const Tensor& steps, const Tensor& tokens);
void attention(const Tensor& q, const Tensor& cu_seqlens_q, const ops::PagedKV& kv, bool causal,
               float softmax_scale, const Tensor& out, const Tensor& lse);
void attention_mla(const Tensor& q_latent, const Tensor& q_rope, const Tensor& cu_seqlens_q,
                   const Tensor& cache, const Tensor& page_table, const Tensor& kv_lens,
                   bool causal, float softmax_scale, const Tensor& out, const Tensor& lse);
void moe_route_topk_softmax(const Tensor& logits, int k, bool renormalize,
                            const Tensor& topk_weights, const Tensor& topk_ids);
void moe_route_grouped(const Tensor& logits, const Tensor& bias, int n_group, int topk_group,
                       int k, float routed_scaling_factor, const Tensor& topk_weights,
                       const Tensor& topk_ids);
void moe_route_softmax_grouped(const Tensor& logits, int n_group, int topk_group, int k,
                               bool renormalize, float routed_scaling_factor,
                               const Tensor& topk_weights, const Tensor& topk_ids);
// The softmax routers' probabilities (moe.cpp), one definition so that moe_route_topk_softmax
// and moe_route_softmax_grouped get the same bits: p[e] = exp(x[e] - max) in fp32 (max skips
// NaN), divided by their sum, which is taken in fp64 in expert order; rounded once.
void router_softmax(const float* x, int64_t n, float* p);
// gate_up_scale / down_scale: the fp8 weights' block scales, undefined for 16-bit weights.
void moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                 const Tensor& gate_up, const Tensor& down, const Tensor& gate_up_scale,
                 const Tensor& down_scale, const ops::MoeExpertsExtras& extras,
                 const Tensor& workspace,
                 const Tensor& out);
void moe_grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& expert_offsets,
                      ops::MoeActivation activation, const Tensor& y);
void moe_permute(const Tensor& topk_ids, int num_experts, const Tensor& expert_offsets,
                 const Tensor& sorted_pairs, const Tensor& pair_rows);
void moe_gather(const Tensor& x, const Tensor& sorted_pairs, int k, const Tensor& xs);
void moe_combine(const Tensor& ys, const Tensor& pair_rows, const Tensor& topk_weights,
                 const Tensor& out);
void moe_local_expert_ids(const Tensor& topk_ids, int first, int count, const Tensor& local_ids);

// FP8 block scale (moe_fp8.cpp). fp8_quantize_block quantizes one row's block of kFp8Block fp32
// values v into `terms` terms exactly as moe_fp8_quantize defines it: term t's codes go to
// q[t * term_stride + j], its scale to scale[t * scale_stride]. moe_grouped_gemm_fp8 quantizes an
// fp8 y with it too.
void fp8_quantize_block(const float* v, int terms, uint8_t* q, int64_t term_stride, float* scale,
                        int64_t scale_stride);
void moe_fp8_quantize(const Tensor& x, const Tensor& q, const Tensor& q_scale);
void moe_gather_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& sorted_pairs, int k,
                    const Tensor& xs, const Tensor& xs_scale);
void moe_grouped_gemm_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                          const Tensor& w_scale, const Tensor& expert_offsets,
                          ops::MoeActivation activation, const Tensor& y, const Tensor& y_scale);
// moe_fp8_block_scale: seed 003's definition in fp32 (the intermediate stays fp32, so
// options.intermediate_terms does not apply), GEMM sums in fp64.
void moe_fp8_block_scale(const Tensor& routing_logits, const Tensor& routing_bias,
                         const Tensor& hidden_states, const Tensor& hidden_states_scale,
                         const Tensor& gemm1_weights, const Tensor& gemm1_weights_scale,
                         const Tensor& gemm2_weights, const Tensor& gemm2_weights_scale,
                         int local_expert_offset, float routed_scaling_factor,
                         const ops::MoeFp8Options& options, const Tensor& output);

void kv_append(const Tensor& k, const Tensor& v, const Tensor& slots, const Tensor& k_pages,
               const Tensor& v_pages);
void paged_kv_gather(const ops::PagedKV& kv, const Tensor& cu_seqlens_kv, const Tensor& k_out,
                     const Tensor& v_out);

void qk_norm_rope_kv_append(const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& q_norm, const Tensor& k_norm, float eps,
                            const Tensor& positions, const ops::RopeTable& table,
                            const Tensor& slots, const Tensor& k_pages, const Tensor& v_pages);

// Fused decode ops (fused_gemm.cpp): the primitives above in sequence.
void add_inplace(const Tensor& x, const Tensor& residual);
void rms_norm_gemm(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                   const Tensor& bias, const Tensor& out, const Tensor& normed,
                   const Tensor& w_scale = {});
void rms_norm_gemm_argmax(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                          const Tensor& ids, const Tensor& logits, const Tensor& normed);
void gemm_add(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& residual,
              const Tensor& scratch, const Tensor& w_scale = {});
void swiglu_gemm_add(const Tensor& gate_up, const Tensor& w, const Tensor& residual,
                     const Tensor& act, const Tensor& scratch, const Tensor& w_scale = {});

}  // namespace braid::cpu
