// CUDA implementations, launched on `stream`. Called by src/ops/*.cpp after the arguments are
// checked; see include/braid/ops.h for the contracts. Only built with the CUDA toolkit.
#pragma once

#include "braid/ops.h"

namespace braid::cuda {

void embedding(const Tensor& ids, const Tensor& table, const Tensor& out, Stream stream);
void embedding_rows(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out,
                    Stream stream);
void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out, Stream stream);
void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                  const Tensor& out, Stream stream);
void rope_apply(const Tensor& q, const Tensor& k, const Tensor& positions,
                const ops::RopeTable& table, Stream stream);
void silu_mul(const Tensor& x, const Tensor& out, Stream stream);
// w_scale: an fp8 w's scales (ops::Weight); undefined for 16-bit weights.
void gemm(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out, Stream stream,
          const Tensor& w_scale = {});
// The fp8 product of more rows than the GEMV takes (cuda_gemm_fp8.cpp): a quantized at run time
// (per row and 128 columns for 128 x 128 weight scales, per row for [n, 1] ones), then cuBLASLt's
// scaled fp8 GEMM; the GEMV 16 rows at a time where cuBLASLt does not take the operands.
void gemm_fp8(const Tensor& a, const Tensor& w, const Tensor& w_scale, const Tensor& bias,
              const Tensor& out, Stream stream);
// x [m, k] bf16/f16 rows to e4m3 codes q [m, k] with one f32 scale per row, scale [m]
// (fp8_quantize_rows.cu): scale = amax / 448 (1 where 0), moe_fp8_quantize's arithmetic.
// looping_only: the general kernel even where the one-trip kernel applies (its test compares them).
void fp8_quantize_rows(const Tensor& x, const Tensor& q, const Tensor& scale, Stream stream,
                       bool looping_only = false);
// cuBLAS strided-batched GEMM (cuda_gemm_batched.cpp).
void gemm_batched(const Tensor& a, const Tensor& w, const Tensor& out, Stream stream);
void softmax(const Tensor& x, const Tensor& out, Stream stream);
void argmax(const Tensor& x, const Tensor& out, Stream stream);
void sample_tokens(const Tensor& logits, const Tensor& temperature, const Tensor& top_k,
                   const Tensor& top_p, const Tensor& min_p, const Tensor& seeds,
                   const Tensor& steps, const Tensor& workspace, const Tensor& tokens,
                   Stream stream);
// The head_dims attention's kernel is built for; the caller refuses others before launching.
bool attention_supports_head_dim(int64_t head_dim);
void attention(const Tensor& q, const Tensor& cu_seqlens_q, const ops::PagedKV& kv, bool causal,
               float softmax_scale, const Tensor& out, const Tensor& lse, Stream stream);
// FlashAttention forward (tensor cores, head_dim 64/128, f16/bf16), K/V contiguous or paged.
void attention_prefill(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                       const Tensor& cu_seqlens_kv, int max_seqlen_q, bool causal,
                       float softmax_scale, const Tensor& out, const Tensor& lse, Stream stream);
// attention() through the FlashAttention kernel when it applies (f16/bf16, head_dim 64/128,
// 16-byte aligned q/out rows); false (nothing launched) otherwise.
bool attention_flash_paged(const Tensor& q, const Tensor& cu_seqlens_q, const ops::PagedKV& kv,
                           bool causal, float softmax_scale, const Tensor& out, const Tensor& lse,
                           Stream stream);
// attention_decode: how many key chunks (splits) the kernels use, at most max_splits (what the
// workspace holds); and the kernels for a given split count (a benchmark may pass its own; the
// workspace then needs batch * q_heads * splits * (head_dim + 1) floats).
int attention_decode_splits(const Tensor& q, const ops::PagedKV& kv, int max_splits);
void attention_decode(const Tensor& q, const ops::PagedKV& kv, float softmax_scale,
                      const Tensor& out, const Tensor& lse, const Tensor& workspace, int splits,
                      Stream stream);
// qk_norm_rope_kv_append_attention_decode's kernel (the same splits), where it runs (the split
// kernels' dtypes and head_dims); counters is no longer read (the op's contract).
bool attention_decode_append_supported(const Tensor& q, const ops::PagedKV& kv);
void attention_decode_append(const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& q_norm, const Tensor& k_norm, float eps,
                             const Tensor& positions, const ops::RopeTable& table,
                             const Tensor& slots, const ops::PagedKV& kv, float softmax_scale,
                             const Tensor& out, const Tensor& lse, const Tensor& workspace,
                             const Tensor& counters, int splits, Stream stream);
// attention_mla: how many key chunks (splits) the kernels use, at most max_splits (what the
// workspace holds; 1 writes the output directly); and the kernels for a given split count (the
// workspace then needs total_q * heads * splits * (r + 1) floats when splits > 1).
int attention_mla_splits(const Tensor& q_latent, const Tensor& page_table, const Tensor& cache,
                         int max_splits);
void attention_mla(const Tensor& q_latent, const Tensor& q_rope, const Tensor& cu_seqlens_q,
                   const Tensor& cache, const Tensor& page_table, const Tensor& kv_lens,
                   bool causal, float softmax_scale, const Tensor& out, const Tensor& lse,
                   const Tensor& workspace, int splits, Stream stream);
void moe_route_topk_softmax(const Tensor& logits, int k, bool renormalize,
                            const Tensor& topk_weights, const Tensor& topk_ids, Stream stream);
void moe_route_grouped(const Tensor& logits, const Tensor& bias, int n_group, int topk_group,
                       int k, float routed_scaling_factor, const Tensor& topk_weights,
                       const Tensor& topk_ids, Stream stream);
void moe_route_softmax_grouped(const Tensor& logits, int n_group, int topk_group, int k,
                               bool renormalize, float routed_scaling_factor,
                               const Tensor& topk_weights, const Tensor& topk_ids,
                               Stream stream);
// gate_up_scale / down_scale: the fp8 weights' block scales, undefined for 16-bit weights.
void moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                 const Tensor& gate_up, const Tensor& down, const Tensor& gate_up_scale,
                 const Tensor& down_scale, const ops::MoeExpertsExtras& extras,
                 const Tensor& workspace,
                 const Tensor& out, Stream stream);
void moe_grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& expert_offsets,
                      ops::MoeActivation activation, const Tensor& y, Stream stream);
void moe_permute(const Tensor& topk_ids, int num_experts, const Tensor& expert_offsets,
                 const Tensor& sorted_pairs, const Tensor& pair_rows, const Tensor& workspace,
                 Stream stream);
void moe_gather(const Tensor& x, const Tensor& sorted_pairs, int k, const Tensor& xs, Stream stream);
void moe_combine(const Tensor& ys, const Tensor& pair_rows, const Tensor& topk_weights,
                 const Tensor& out, Stream stream);
void moe_local_expert_ids(const Tensor& topk_ids, int first, int count, const Tensor& local_ids,
                          Stream stream);
void moe_fp8_quantize(const Tensor& x, const Tensor& q, const Tensor& q_scale, Stream stream);
void moe_gather_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& sorted_pairs, int k,
                    const Tensor& xs, const Tensor& xs_scale, Stream stream);
void moe_grouped_gemm_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                          const Tensor& w_scale, const Tensor& expert_offsets,
                          ops::MoeActivation activation, const Tensor& y, const Tensor& y_scale,
                          Stream stream);
// moe_fp8_block_scale: route -> permute -> gather -> GEMM1 (SwiGLU, fp8 terms) -> GEMM2 ->
// combine, in the u8 workspace (ops/moe/moe_fp8_block_scale_layout.h).
void moe_fp8_block_scale(const Tensor& routing_logits, const Tensor& routing_bias,
                         const Tensor& hidden_states, const Tensor& hidden_states_scale,
                         const Tensor& gemm1_weights, const Tensor& gemm1_weights_scale,
                         const Tensor& gemm2_weights, const Tensor& gemm2_weights_scale,
                         int local_expert_offset, float routed_scaling_factor,
                         const ops::MoeFp8Options& options, const Tensor& workspace,
                         const Tensor& output, Stream stream);

void kv_append(const Tensor& k, const Tensor& v, const Tensor& slots, const Tensor& k_pages,
               const Tensor& v_pages, Stream stream);
void paged_kv_gather(const ops::PagedKV& kv, const Tensor& cu_seqlens_kv, const Tensor& k_out,
                     const Tensor& v_out, Stream stream);

void qk_norm_rope_kv_append(const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& q_norm, const Tensor& k_norm, float eps,
                            const Tensor& positions, const ops::RopeTable& table,
                            const Tensor& slots, const Tensor& k_pages, const Tensor& v_pages,
                            Stream stream);

// Fused decode ops (cuda_fused_gemm.cpp, add_inplace.cu).
void add_inplace(const Tensor& x, const Tensor& residual, Stream stream);
// keep_normed: normed receives rms_norm(x) on the fused path too (rms_norm_gemm_keep_normed).
void rms_norm_gemm(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                   const Tensor& w_scale, const Tensor& bias, const Tensor& out,
                   const Tensor& normed, bool keep_normed, Stream stream);
void rms_norm_gemm_argmax(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                          const Tensor& ids, const Tensor& logits, const Tensor& normed,
                          Stream stream);
void gemm_add(const Tensor& a, const Tensor& w, const Tensor& w_scale, const Tensor& bias,
              const Tensor& residual, const Tensor& scratch, Stream stream);
void swiglu_gemm_add(const Tensor& gate_up, const Tensor& w, const Tensor& w_scale,
                     const Tensor& residual, const Tensor& act, const Tensor& scratch,
                     Stream stream);

// gemv_chain's persistent kernel (gemv/gemv_chain.cu): whether it takes the stages (one row,
// 16-bit weights, k % 8 == 0, aligned rows, compute 9.0+), and the launch. The stages and the
// counter are checked (ops::gemv_chain).
bool gemv_chain_takes(std::span<const ops::ChainStage> stages);
void gemv_chain(std::span<const ops::ChainStage> stages, const Tensor& counter, Stream stream);
// For tools/device/chain_probe.cpp: every later gemv_chain launch records globaltimer stamps into
// `stamps` (device memory, [sm_count()][ops::kMaxChainStages][6]: gemv_chain.cu's Stamp events),
// or none again after nullptr.
void gemv_chain_record_stamps(unsigned long long* stamps);

}  // namespace braid::cuda
