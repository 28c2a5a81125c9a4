// The forward pass: one straight-line function for every supported family, over the ops API,
// the same on the CPU and the GPU.
#pragma once

#include <functional>

#include "braid/buffer.h"
#include "engine/kv_cache.h"
#include "model/config.h"
#include "model/weights.h"
#include "parallel/comm.h"

namespace braid::model {

// MoE layers run the GEMV kernels (moe_experts), which read each chosen expert's weights once per
// token, for steps of up to this many tokens; longer steps in f16/bf16 run the permuted grouped
// GEMMs (moe_permute -> moe_gather -> moe_grouped_gemm x 2 -> moe_combine), which read them once.
// fp8 experts (ModelConfig::fp8_experts) split the same way, their longer steps on the fp8 grouped
// GEMMs (in f32 on CUDA those take every step: moe_experts' kernels need f16/bf16 there).
inline constexpr int kMoeGemvMaxTokens = 16;

// Activations for up to max_tokens tokens per step, allocated once. With decode_kv_capacity > 0
// (the KV cache's tokens per sequence, pages included) it also holds the split-KV decode
// attention's scratch for up to max_tokens sequences.
struct Workspace {
  // decode_batch: the most sequences a decode step holds (0: max_tokens). gather_tokens: keys
  // the prompt chunks of one step may gather out of the pages for FlashAttention (0: none).
  Workspace(const ModelConfig& config, int max_tokens, Device device, DType dtype,
            int64_t decode_kv_capacity = 0, int moe_gemv_max_tokens = kMoeGemvMaxTokens,
            int decode_batch = 0, int64_t gather_tokens = 0);
  int max_tokens;
  int moe_gemv_max_tokens;
  OwnedTensor residual, normed, qkv, attn, proj, mlp, act;  // [T, ...] in the model dtype
  // MoE layers only: the router's outputs; the GEMV path's f32 h rows; the grouped path's
  // permutation (offsets, sorted pairs, pair rows, scratch) and its rows in expert order (x, h, y).
  OwnedTensor router_logits, topk_weights, topk_ids, moe_hidden;
  OwnedTensor moe_offsets, moe_sorted_pairs, moe_pair_rows, moe_permute_scratch;
  OwnedTensor moe_xs, moe_hs, moe_ys;
  // fp8 experts: xs and hs are f8e4m3 rows with these f32 scales ([blocks of 128, rows], as
  // moe_fp8_quantize writes them), and moe_xq / moe_xq_scale the step's tokens quantized once
  // before the gather. moe_fp8: the MoE layers take this path.
  OwnedTensor moe_xq, moe_xq_scale, moe_xs_scale, moe_hs_scale;
  bool moe_fp8 = false;
  // MLA layers only: q (q LoRA: q_b_proj's output), the latent queries and the attended latents.
  OwnedTensor mla_q, mla_q_latent, mla_out_latent;
  OwnedTensor mla_attention;  // f32 scratch of attention_mla's split-KV (with decode_kv_capacity)
  OwnedTensor decode_attention;  // f32 scratch of attention_decode
  OwnedTensor decode_counters;   // its i32 counters (attention_decode_counters), zero between calls
  OwnedTensor chain_counters;    // [num_layers] i32: gemv_chain's, zero between calls
  OwnedTensor gathered_k, gathered_v;  // [gather_tokens, kv_heads, head_dim]: paged_kv_gather's

  // Whether a step of n tokens runs the grouped MoE path (16-bit or fp8) rather than the GEMV
  // path (moe_experts): beyond moe_gemv_max_tokens, or always when there is no GEMV path.
  bool moe_grouped(int n) const {
    return moe_xs.view().ndim != 0 && (n > moe_gemv_max_tokens || moe_hidden.view().ndim == 0);
  }
};

// One step of one sequence: n new tokens at positions [start, start + n), all tensors on the
// weights' device. The KV cache must hold start + n tokens.
struct StepInputs {
  Tensor tokens;        // [n] i32
  Tensor positions;     // [n] i32
  Tensor slots;         // [n] i32: cache slot of each token
  Tensor cu_seqlens_q;  // [2] i32: {0, n}
  Tensor kv_lens;       // [1] i32: start + n
  // Every sequence of the page table adds exactly one token (n == sequences): attention then
  // runs as attention_decode (split-KV) when the workspace has its scratch.
  bool decode = false;
  // [sequences, pages per sequence] i32: the step's own page table (a serving engine's sequences
  // take pages from one pool); undefined: the cache's.
  Tensor page_table = {};
  // [m] i32: the rows (token indices of this step) whose logits are wanted, e.g. the last token of
  // each sequence that samples; undefined: the last token, or every token with all_logits.
  Tensor logit_rows = {};
  // A serving step (prefill_cu_seqlens_q defined): its first decode_rows sequences add one token
  // each (rows 0 .. decode_rows - 1) and run attention_decode; the others are prompt chunks, run
  // through FlashAttention (attention_prefill). prefill_cu_seqlens_q ([P + 1] i32, P = sequences
  // - decode_rows) gives the chunks' row offsets from row decode_rows; prefill_cu_seqlens_kv
  // ([P + 1]) their keys' offsets (kv_lens summed), prefill_max_q the longest chunk. With
  // prefill_fresh every chunk starts its sequence (its keys are its own rows); otherwise the keys
  // are gathered out of the pages (up to the workspace's gather capacity, else attention() reads
  // the pages itself). Undefined: attention() for every sequence (attention_decode with `decode`).
  int decode_rows = 0;
  Tensor prefill_cu_seqlens_q = {};
  Tensor prefill_cu_seqlens_kv = {};
  int prefill_max_q = 0;
  int64_t prefill_total_kv = 0;
  bool prefill_fresh = false;
};

// One rank of a tensor-parallel step (model/shard.h): config, weights, cache and workspace are the
// rank's part (shard_config's); the forward all-reduces o_proj's and the MLP's (or the experts')
// partial sums, looks the embedding up in the rank's vocabulary rows (then all-reduces), and
// all-gathers the LM head's columns of the vocabulary into logits.
struct TensorParallelStep {
  int rank = 0;
  parallel::Comm* comm = nullptr;
  Tensor local_logits;  // [rows, vocab / size] f32: this rank's columns of the logits
};

// Called after each component of the forward pass has been enqueued, with its name ("qkv",
// "attention", ...) and its layer (-1 outside the layers): lets the bench suite time components.
using ForwardProbe = std::function<void(const char* component, int layer)>;

// Runs the model on `in`, appends the new tokens' K/V to `cache`, and writes fp32 logits:
// for the last token only ([1, vocab]), with all_logits for every token ([n, vocab]), or with
// in.logit_rows for the rows it lists ([m, vocab]). With greedy_ids ([1], [n] or [m] i32/i64, one
// per logits row) it writes the greedy tokens there instead, through the fused norm + LM head +
// argmax, and logits is only scratch. With tp, one rank of a tensor-parallel step (greedy_ids not
// yet: the greedy tokens of the gathered logits are the caller's).
void forward(const ModelConfig& config, const Weights& weights, engine::KVCache& cache,
             Workspace& ws, const StepInputs& in, int n, bool all_logits, const Tensor& logits,
             Stream stream = {}, const ForwardProbe* probe = nullptr,
             const Tensor& greedy_ids = Tensor{}, const TensorParallelStep* tp = nullptr);

}  // namespace braid::model
