// Decoder forward pass. Per layer:
//   RMSNorm + QKV (+bias) -> q/k norm + RoPE + KV append -> paged attention -> o_proj + residual
//   add -> RMSNorm + gate|up -> SwiGLU + down + residual add (or MoE: router, experts, add;
//   longer steps: permute, grouped GEMMs, combine; fp8 experts quantize the activations first).
// In a decode step (<= 16 tokens) each '+' group is one kernel; for longer inputs the fused ops
// run their parts one after another through the workspace. With tensor parallelism
// (TensorParallelStep) each row-parallel product's partial sums are all-reduced before they join
// the residual stream, where the fused ops would have added them in. With expert parallelism
// (c.expert_parallel > 1) a rank holds whole routed experts instead of a slice of each: every rank
// holds every token after attention, so its "dispatch" is only renumbering the router's choices
// to its own experts (the others' pairs add nothing), and the "combine" is the MoE layer's
// all-reduce, as for tensor parallelism.
#include "model/forward.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "braid/error.h"
#include "braid/ops.h"

namespace braid::model {

namespace {

// BRAID_DECODE_ATTENTION=split runs a decode step's attention as its two ops
// (qk_norm_rope_kv_append, then attention_decode) instead of the one that joins them, so that one
// call can time both (docs/perf/decode.md, version 5).
bool decode_attention_joined() {
  static const bool joined = [] {
    const char* v = std::getenv("BRAID_DECODE_ATTENTION");
    return v == nullptr || std::strcmp(v, "split") != 0;
  }();
  return joined;
}

// Whether a one-token step runs each dense layer's o_proj, gate_up and down, and the next layer's
// qkv, as one gemv_chain. It paid where a layer's GEMVs are short and the model is all dense
// layers (docs/perf/decode.md, version 17: Qwen2.5-0.5B and Llama-3.2-1B, 30 and 122 MB a
// layer, faster; Llama-3.1-8B, 436 MB, slower on an H200; the DeepSeek-OCR LM, one dense layer
// before its MoE layers, level). BRAID_GEMV_CHAIN=0 / =1 turns it off / on for every dense layer
// (to time both in one call).
constexpr int64_t kChainMaxLayerBytes = int64_t{160} << 20;
bool gemv_chain_wanted(const ModelConfig& c, const Weights& w) {
  static const char* const forced = std::getenv("BRAID_GEMV_CHAIN");
  if (forced != nullptr && std::strcmp(forced, "0") == 0) return false;
  if (forced != nullptr && std::strcmp(forced, "1") == 0) return true;
  for (int l = 0; l < c.num_layers; ++l)
    if (c.layer_is_moe(l)) return false;
  if (w.layers.empty()) return false;
  const LayerWeights& lw = w.layers.front();  // a dense model's layers are alike
  const int64_t bytes =
      lw.qkv.nbytes() + lw.o_proj.nbytes() + lw.gate_up.nbytes() + lw.down.nbytes();
  return bytes <= kChainMaxLayerBytes;
}

// BRAID_FP8_EXPERTS=e4m3 quantizes the fp8 experts' decode activations (moe_experts'
// quantize_activations: per 128 columns, as the prompt path's fp8 grouped GEMMs quantize them, on
// the fp8 tensor cores). Off by default: on an H100 it did not speed up Qwen3-30B-A3B-FP8's step
// at batch 1 and slowed it at batch 16 (docs/perf/fp8.md, "Quantized activations in the MoE
// decode kernels"), so decode keeps the exact products.
bool fp8_experts_quantized() {
  static const bool quantized = [] {
    const char* v = std::getenv("BRAID_FP8_EXPERTS");
    return v != nullptr && std::strcmp(v, "e4m3") == 0;
  }();
  return quantized;
}

// Heads `heads` wide starting at column col0 of a packed [n, width] tensor, as [n, heads, hd].
Tensor heads_view(const Tensor& packed, int64_t n, int64_t col0, int64_t heads, int64_t hd) {
  Tensor v = packed.slice(0, 0, n).slice(1, col0, col0 + heads * hd);
  v.ndim = 3;
  v.shape[1] = heads;
  v.shape[2] = hd;
  v.strides[1] = hd;
  v.strides[2] = 1;
  return v;
}

Tensor rows(const OwnedTensor& t, int64_t n) { return t.view().slice(0, 0, n); }

// `heads` parts `width` wide, head_stride apart, starting at column col0 of a packed [n, cols]
// tensor, as [n, heads, width] (e.g. the rope part of every q head of MLA).
Tensor head_parts(const Tensor& packed, int64_t n, int64_t col0, int64_t heads,
                  int64_t head_stride, int64_t width) {
  Tensor v = packed.slice(0, 0, n);
  v.data = v.at(col0);
  v.ndim = 3;
  v.shape[1] = heads;
  v.shape[2] = width;
  v.strides[1] = head_stride;
  v.strides[2] = 1;
  return v;
}

// Multi-head latent attention (DeepSeek), in the absorbed form for every step: the cache holds
// each token's normed latent and its rotated rope key (one row, shared by all heads); each query
// head's nope part goes through W_UK into the latent space, attends over the latent rows
// (attention_mla), and the attended latent goes through W_UV to the head's v width. Prefill pays
// (r + dr + r) instead of (dn + dr + dv) multiply-adds per head and key for not expanding K and V.
// Reads ws.qkv ([q or q_a | latent | k_pe], written by the caller's projection); writes attn.
void mla_attention(const ModelConfig& c, const LayerWeights& lw, const Tensor& cache_rows,
                   const Workspace& ws, const StepInputs& in, int64_t n, const Tensor& page_table,
                   const Tensor& attn, Stream s) {
  const int64_t h = c.num_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim;
  const int64_t r = c.kv_lora_rank, dq = dn + dr, dv = c.v_head_dim;
  const float eps = c.rms_norm_eps;
  const Tensor qkv = rows(ws.qkv, n);
  const bool q_lora = c.q_lora_rank > 0;
  const int64_t q_width = q_lora ? c.q_lora_rank : h * dq;  // the projection's q (or q_a) part
  Tensor q = qkv.slice(1, 0, q_width);
  if (q_lora) {
    ops::rms_norm(q, lw.q_a_norm, eps, q, s);
    q = rows(ws.mla_q, n);
    ops::gemm(qkv.slice(1, 0, q_width), {lw.q_b, lw.q_b_scale}, Tensor{}, q, s);
  }
  const Tensor latent = qkv.slice(1, q_width, q_width + r);
  ops::rms_norm(latent, lw.kv_a_norm, eps, latent, s);
  const Tensor q_nope = head_parts(q, n, 0, h, dq, dn);
  const Tensor q_pe = head_parts(q, n, dn, h, dq, dr);
  const Tensor cache_row = head_parts(qkv, n, q_width, 1, r + dr, r + dr);  // latent | k_pe
  const Tensor k_pe = head_parts(qkv, n, q_width + r, 1, r + dr, dr);
  ops::rope_apply(q_pe, k_pe, in.positions, c.rope, s);
  ops::kv_append(cache_row, Tensor{}, in.slots, cache_rows, Tensor{}, s);
  const Tensor q_latent = rows(ws.mla_q_latent, n), out_latent = rows(ws.mla_out_latent, n);
  ops::gemm_batched(q_nope, lw.w_uk, q_latent, s);
  ops::attention_mla(q_latent, q_pe, in.cu_seqlens_q, cache_rows, page_table, in.kv_lens,
                     /*causal=*/true, c.attention_scale(), out_latent, Tensor{},
                     ws.mla_attention.view(), s);
  ops::gemm_batched(out_latent, lw.w_uv, head_parts(attn, n, 0, h, dv, dv), s);
}

// The router of a MoE layer: topk_weights and topk_ids from the fp32 (DeepSeek) or model-dtype
// logits, as the family's config says.
void route(const ModelConfig& c, const LayerWeights& lw, const Tensor& logits,
           const Tensor& topk_w, const Tensor& topk_ids, Stream s) {
  const int k = c.experts_per_token;
  switch (c.router) {
    case ModelConfig::Router::softmax_topk:
      return ops::moe_route_topk_softmax(logits, k, c.norm_topk_prob, topk_w, topk_ids, s);
    case ModelConfig::Router::softmax_grouped:
      return ops::moe_route_softmax_grouped(logits, c.n_group, c.topk_group, k, c.norm_topk_prob,
                                            c.routed_scaling_factor, topk_w, topk_ids, s);
    case ModelConfig::Router::sigmoid_grouped:
      return ops::moe_route_grouped(logits, lw.router_bias, c.n_group, c.topk_group, k,
                                    c.routed_scaling_factor, topk_w, topk_ids, s);
  }
}

// The shared experts moe_experts can take beside the routed ones for a step of n tokens (S / I of
// MoeExpertsExtras), or 0 (none, or not in the routed experts' format, or no room for their h
// rows in the workspace).
int64_t fusable_shared_experts(const LayerWeights& lw, const Tensor& moe_hidden, int64_t n, int k) {
  const Tensor& gu = lw.shared_gate_up;
  if (!gu.data || gu.dtype != lw.experts_gate_up.dtype) return 0;
  const int64_t I = lw.experts_down.shape[2], S = gu.shape[0] / 2, H = gu.shape[1];
  if (S % I != 0 || n * (k + S / I) > moe_hidden.shape[0]) return 0;
  if (gu.dtype == DType::f8e4m3) {  // 128 x 128 block scales, as the routed experts have
    constexpr int64_t B = ops::kFp8Block;
    const Tensor &gs = lw.shared_gate_up_scale, &ds = lw.shared_down_scale;
    if (gs.ndim != 2 || gs.shape[0] != 2 * S / B || gs.shape[1] != H / B) return 0;
    if (ds.ndim != 2 || ds.shape[0] != H / B || ds.shape[1] != S / B) return 0;
  }
  return S / I;
}

// A serving step's attention (StepInputs::prefill_cu_seqlens_q): decode rows through split-KV
// decode attention; prompt chunks through FlashAttention, on their own K/V rows when every chunk
// starts its sequence, else on K/V gathered out of the pages; attention() on the pages when the
// kernel cannot take the head size or the gather does not fit.
void attend_serving_step(const Workspace& ws, const StepInputs& in, int64_t n, const Tensor& q,
                         const Tensor& k, const Tensor& v, const ops::PagedKV& kv, float scale,
                         const Tensor& out, Stream s) {
  const int64_t D = in.decode_rows, B = in.kv_lens.shape[0], hd = q.shape[2];
  if (D > 0) {
    const ops::PagedKV dkv{kv.k_pages, kv.v_pages, kv.page_table.slice(0, 0, D), in.kv_lens.slice(0, 0, D)};
    ops::attention_decode(q.slice(0, 0, D), dkv, scale, out.slice(0, 0, D), Tensor{},
                          ws.decode_attention.view(), s);
  }
  if (D == B) return;
  const Tensor pq = q.slice(0, D, n), pout = out.slice(0, D, n);
  const ops::PagedKV pkv{kv.k_pages, kv.v_pages, kv.page_table.slice(0, D, B), in.kv_lens.slice(0, D, B)};
  const bool flash = q.device.is_cpu() || ((hd == 64 || hd == 128) && q.dtype != DType::f32);
  const int64_t capacity = ws.gathered_k.view().ndim ? ws.gathered_k.view().shape[0] : 0;
  if (flash && in.prefill_fresh) {
    ops::attention_prefill(pq, k.slice(0, D, n), v.slice(0, D, n), in.prefill_cu_seqlens_q,
                           in.prefill_cu_seqlens_q, in.prefill_max_q, /*causal=*/true, scale, pout,
                           Tensor{}, s);
  } else if (flash && in.prefill_total_kv <= capacity) {
    const Tensor gk = ws.gathered_k.view().slice(0, 0, in.prefill_total_kv);
    const Tensor gv = ws.gathered_v.view().slice(0, 0, in.prefill_total_kv);
    ops::paged_kv_gather(pkv, in.prefill_cu_seqlens_kv, gk, gv, s);
    ops::attention_prefill(pq, gk, gv, in.prefill_cu_seqlens_q, in.prefill_cu_seqlens_kv,
                           in.prefill_max_q, /*causal=*/true, scale, pout, Tensor{}, s);
  } else {
    ops::attention(pq, in.prefill_cu_seqlens_q, pkv, /*causal=*/true, scale, pout, Tensor{}, s);
  }
}

// n i32 counters on d, zero (a synchronous copy): the counter ops' contract, zero between calls.
OwnedTensor zeroed_counters(int64_t n, Device d) {
  OwnedTensor counters(DType::i32, {n}, d);
  const std::vector<int32_t> zeros(static_cast<size_t>(n), 0);
  copy(Tensor(const_cast<int32_t*>(zeros.data()), DType::i32, Device::cpu(), {n}), counters.view());
  return counters;
}

}  // namespace

Workspace::Workspace(const ModelConfig& c, int T, Device d, DType t, int64_t decode_kv_capacity,
                     int moe_gemv_max_tokens_, int decode_batch, int64_t gather_tokens)
    : max_tokens(T), moe_gemv_max_tokens(moe_gemv_max_tokens_) {
  const int64_t H = c.hidden_size;
  const int64_t qkv_width = c.mla() ? c.mla_first_proj_dim() : c.q_dim() + 2 * c.kv_dim();
  int64_t I = 0;  // the widest dense MLP: dense layers', or DeepSeek's shared experts'
  bool any_moe = false;
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.layer_is_moe(l)) {
      any_moe = true;
      I = std::max<int64_t>(I, c.shared_experts_width());
    } else {
      I = std::max<int64_t>(I, c.intermediate_size);
    }
  }
  residual = OwnedTensor(t, {T, H}, d);
  normed = OwnedTensor(t, {T, H}, d);
  qkv = OwnedTensor(t, {T, qkv_width}, d);
  attn = OwnedTensor(t, {T, c.mla() ? int64_t{c.num_heads} * c.v_head_dim : c.q_dim()}, d);
  if (c.mla()) {
    if (c.q_lora_rank > 0) mla_q = OwnedTensor(t, {T, int64_t{c.num_heads} * c.mla_q_head_dim()}, d);
    mla_q_latent = OwnedTensor(t, {T, c.num_heads, c.kv_lora_rank}, d);
    mla_out_latent = OwnedTensor(t, {T, c.num_heads, c.kv_lora_rank}, d);
  }
  proj = OwnedTensor(t, {T, H}, d);
  if (I > 0) {
    mlp = OwnedTensor(t, {T, 2 * I}, d);
    act = OwnedTensor(t, {T, I}, d);
  }
  if (any_moe) {
    const int64_t E = c.num_experts, k = c.experts_per_token;
    // DeepSeek's routers take fp32 logits (transformers upcasts input and weight).
    const bool deepseek = c.arch == Arch::deepseek_v2 || c.arch == Arch::deepseek_v3;
    router_logits = OwnedTensor(deepseek ? DType::f32 : t, {T, E}, d);
    topk_weights = OwnedTensor(DType::f32, {T, k}, d);
    topk_ids = OwnedTensor(DType::i32, {T, k}, d);
    const int64_t I_moe = c.moe_intermediate_size;
    // 16-bit experts: the GEMV path (moe_experts) takes every step in f32, else the steps of up to
    // moe_gemv_max_tokens tokens, the grouped path the longer ones. fp8 experts: the same split
    // (with the fp8 grouped path at every step, batch-1 decode of Qwen3-30B-A3B-FP8 ran at 0.78x
    // the bf16 model's speed on an H100), except in f32 on CUDA, whose moe_experts kernels take no
    // f32 activations with fp8 weights: the grouped path for every step there.
    moe_fp8 = c.fp8_experts();
    const bool gemv_ok = !moe_fp8 || t != DType::f32 || d.is_cpu();
    const bool gemv_every_step = !moe_fp8 && t == DType::f32;
    const bool grouped = !gemv_ok || (!gemv_every_step && T > moe_gemv_max_tokens);
    const int64_t gemv_T = grouped ? std::max(0, moe_gemv_max_tokens) : T;
    // Its h rows: the routed experts', then the shared experts' (moe_experts takes those too).
    if (gemv_ok) moe_hidden = OwnedTensor(DType::f32, {gemv_T * (k + c.n_shared_experts), I_moe}, d);
    if (grouped) {
      const int64_t pairs = T * k;
      const int64_t held = c.held_experts();  // the experts the permutation sorts into
      moe_offsets = OwnedTensor(DType::i32, {held + 1}, d);
      moe_sorted_pairs = OwnedTensor(DType::i32, {pairs}, d);
      moe_pair_rows = OwnedTensor(DType::i32, {pairs}, d);
      moe_permute_scratch = OwnedTensor(DType::i32, {ops::moe_permute_workspace_size(pairs, held)}, d);
      // The experts' outputs in the model dtype (bf16 or f32 for fp8 experts), as the 16-bit path.
      moe_ys = OwnedTensor(t, {pairs, H}, d);
      if (moe_fp8) {
        constexpr int64_t B = ops::kFp8Block;  // one fp8 term: the usual fp8 recipe
        moe_xq = OwnedTensor(DType::f8e4m3, {T, H}, d);
        moe_xq_scale = OwnedTensor(DType::f32, {H / B, T}, d);
        moe_xs = OwnedTensor(DType::f8e4m3, {pairs, H}, d);
        moe_xs_scale = OwnedTensor(DType::f32, {H / B, pairs}, d);
        moe_hs = OwnedTensor(DType::f8e4m3, {pairs, I_moe}, d);
        moe_hs_scale = OwnedTensor(DType::f32, {I_moe / B, pairs}, d);
      } else {
        moe_xs = OwnedTensor(t, {pairs, H}, d);
        moe_hs = OwnedTensor(t, {pairs, I_moe}, d);
      }
    }
  }
  if (decode_kv_capacity > 0 && c.mla()) {
    int64_t floats = 0;
    for (int64_t b = 1; b <= T; ++b)
      floats = std::max(floats, ops::attention_mla_workspace_floats(b, c.num_heads, c.kv_lora_rank,
                                                                    decode_kv_capacity));
    if (floats > 0) mla_attention = OwnedTensor(DType::f32, {floats}, d);
  }
  if (decode_kv_capacity > 0 && !c.mla()) {
    // A smaller batch may cut its keys into more chunks: size for the largest need of any batch.
    int64_t floats = 0;
    const int64_t batch = decode_batch > 0 ? decode_batch : T;
    for (int64_t b = 1; b <= batch; ++b)
      floats = std::max(floats, ops::attention_decode_workspace_floats(b, c.num_heads, c.head_dim,
                                                                       decode_kv_capacity));
    decode_attention = OwnedTensor(DType::f32, {floats}, d);
    // Zero once (a synchronous copy), as the op's contract asks; its CUDA kernel no longer reads
    // them (docs/perf/attention_decode.md, "Chunk rule v2").
    decode_counters = zeroed_counters(
        std::max<int64_t>(ops::attention_decode_counters(batch, c.num_heads, c.num_kv_heads), 1), d);
  }
  if (decode_kv_capacity > 0) {
    // gemv_chain's, one per layer (a layer's chain may start before the one before has ended).
    chain_counters = zeroed_counters(c.num_layers, d);
  }
  if (gather_tokens > 0 && !c.mla()) {
    gathered_k = OwnedTensor(t, {gather_tokens, c.num_kv_heads, c.head_dim}, d);
    gathered_v = OwnedTensor(t, {gather_tokens, c.num_kv_heads, c.head_dim}, d);
  }
}

void forward(const ModelConfig& c, const Weights& w, engine::KVCache& cache, Workspace& ws,
             const StepInputs& in, int n, bool all_logits, const Tensor& logits, Stream s,
             const ForwardProbe* probe, const Tensor& greedy_ids, const TensorParallelStep* tp) {
  auto mark = [probe](const char* component, int layer) {
    if (probe) (*probe)(component, layer);
  };
  // The weights never change after loading: the GEMVs may stream them ahead of the kernel
  // before them (programmatic dependent launch on CUDA).
  const ops::ConstantWeights constant_weights;
  if (tp && greedy_ids.data)
    throw Error(ErrorKind::unsupported, "forward: greedy_ids with tensor parallelism (not yet)");
  if (c.expert_parallel > 1 && !tp)
    throw Error(ErrorKind::invalid_argument,
                "forward: an expert-parallel rank's config (expert_parallel " +
                    std::to_string(c.expert_parallel) + ") needs its TensorParallelStep");
  // Tensor parallelism: a rank's partial sums of a row-parallel product (o_proj, down, the
  // experts) become the full sums before they join the residual stream.
  auto all_reduce = [&](const Tensor& partial) {
    if (tp) tp->comm->all_reduce_sum(tp->rank, partial, s);
  };
  const int64_t hd = c.head_dim, qh = c.num_heads, kvh = c.num_kv_heads;
  const float eps = c.rms_norm_eps;
  const float scale = c.attention_scale();
  const Tensor residual = rows(ws.residual, n), normed = rows(ws.normed, n);
  const Tensor qkv = rows(ws.qkv, n), proj = rows(ws.proj, n);
  const Tensor attn = rows(ws.attn, n);
  Tensor attn_heads = attn;
  attn_heads.ndim = 3;
  attn_heads.shape[1] = qh;
  attn_heads.shape[2] = hd;
  attn_heads.strides[0] = qh * hd;
  attn_heads.strides[1] = hd;
  attn_heads.strides[2] = 1;

  const Tensor page_table = in.page_table.data ? in.page_table : cache.page_table.view();
  if (tp) {  // vocabulary-parallel: each rank's rows, zeros for the others' ids, summed
    ops::embedding_rows(in.tokens, w.embed, int64_t{tp->rank} * c.vocab_size, residual, s);
    all_reduce(residual);
  } else {
    ops::embedding(in.tokens, w.embed, residual, s);
  }
  mark("embedding", -1);
  // A one-token step (decode) runs each dense layer's o_proj, gate_up and down, and the next
  // layer's qkv, as one gemv_chain (one kernel on CUDA, whose weight stream does not stop between
  // them); the probe (bench --breakdown) times the ops one by one instead.
  const bool chain = n == 1 && !tp && !probe && ws.chain_counters.view().ndim != 0 &&
                     gemv_chain_wanted(c, w);
  bool qkv_done = false;  // by the chain of the layer before
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    // The residual stream is only ever added to; each block's RMSNorm runs inside the projection
    // that consumes it (one kernel in the decode step; norm + gemm for longer inputs).
    if (!qkv_done)
      ops::rms_norm_gemm(residual, lw.attn_norm, eps, {lw.qkv, lw.qkv_scale}, lw.qkv_bias, qkv,
                         normed, s);
    qkv_done = false;
    mark("qkv_proj", l);
    if (c.mla()) {
      mla_attention(c, lw, cache.k[static_cast<size_t>(l)].view(), ws, in, n, page_table, attn, s);
      mark("attention", l);
    } else {
      const Tensor q = heads_view(qkv, n, 0, qh, hd);
      const Tensor k = heads_view(qkv, n, qh * hd, kvh, hd);
      const Tensor v = heads_view(qkv, n, (qh + kvh) * hd, kvh, hd);
      const Tensor k_pages = cache.k[static_cast<size_t>(l)].view();
      const Tensor v_pages = cache.v[static_cast<size_t>(l)].view();
      const ops::PagedKV kv{k_pages, v_pages, page_table, in.kv_lens};
      const bool split_kv_decode = in.decode && ws.decode_attention.view().ndim != 0;
      if (split_kv_decode && decode_attention_joined()) {
        // One kernel on CUDA: the query and key norms, RoPE, the append and the attention.
        ops::qk_norm_rope_kv_append_attention_decode(
            q, k, v, lw.q_norm, lw.k_norm, eps, in.positions, c.rope, in.slots, kv, scale,
            attn_heads, Tensor{}, ws.decode_attention.view(), ws.decode_counters.view(), s);
      } else {
        ops::qk_norm_rope_kv_append(q, k, v, lw.q_norm, lw.k_norm, eps, in.positions, c.rope,
                                    in.slots, k_pages, v_pages, s);
        mark("qk_rope_kv", l);
        if (split_kv_decode)
          ops::attention_decode(q, kv, scale, attn_heads, Tensor{}, ws.decode_attention.view(), s);
        else if (in.prefill_cu_seqlens_q.data)
          attend_serving_step(ws, in, n, q, k, v, kv, scale, attn_heads, s);
        else
          ops::attention(q, in.cu_seqlens_q, kv, /*causal=*/true, scale, attn_heads, Tensor{}, s);
      }
      mark("attention", l);
    }
    if (chain && !c.layer_is_moe(l)) {
      const int64_t I = lw.gate_up.shape[0] / 2;
      const Tensor mlp = rows(ws.mlp, n).slice(1, 0, 2 * I), act = rows(ws.act, n).slice(1, 0, I);
      std::array<ops::ChainStage, 4> stages = {
          ops::ChainStage::gemm_add(attn, {lw.o_proj, lw.o_proj_scale}, lw.o_bias, residual, proj),
          ops::ChainStage::rms_norm_gemm(residual, lw.mlp_norm, eps, {lw.gate_up, lw.gate_up_scale},
                                         Tensor{}, mlp, normed),
          ops::ChainStage::swiglu_gemm_add(mlp, {lw.down, lw.down_scale}, residual, act, proj)};
      size_t count = 3;
      if (l + 1 < c.num_layers) {
        const LayerWeights& next = w.layers[static_cast<size_t>(l) + 1];
        stages[count++] = ops::ChainStage::rms_norm_gemm(
            residual, next.attn_norm, eps, {next.qkv, next.qkv_scale}, next.qkv_bias, qkv, normed);
        qkv_done = true;
      }
      ops::gemv_chain(std::span(stages).first(count), ws.chain_counters.view().slice(0, l, l + 1),
                      s);
      continue;
    }
    if (tp) {  // row-parallel: the bias once (rank 0), then the sum of the ranks' products
      ops::gemm(attn, {lw.o_proj, lw.o_proj_scale}, tp->rank == 0 ? lw.o_bias : Tensor{}, proj, s);
      all_reduce(proj);
      ops::add_inplace(proj, residual, s);
    } else {
      ops::gemm_add(attn, {lw.o_proj, lw.o_proj_scale}, lw.o_bias, residual, proj, s);
    }
    mark("o_proj", l);

    if (!c.layer_is_moe(l)) {
      const int64_t I = lw.gate_up.shape[0] / 2;  // ws.mlp / ws.act hold the widest MLP
      const Tensor mlp = rows(ws.mlp, n).slice(1, 0, 2 * I), act = rows(ws.act, n).slice(1, 0, I);
      ops::rms_norm_gemm(residual, lw.mlp_norm, eps, {lw.gate_up, lw.gate_up_scale}, Tensor{}, mlp,
                         normed, s);
      mark("gate_up_proj", l);
      if (tp) {
        ops::silu_mul(mlp, act, s);
        ops::gemm(act, {lw.down, lw.down_scale}, Tensor{}, proj, s);
        all_reduce(proj);
        ops::add_inplace(proj, residual, s);
      } else {
        ops::swiglu_gemm_add(mlp, {lw.down, lw.down_scale}, residual, act, proj, s);
      }
      mark("down_proj", l);
    } else {
      const Tensor router_logits = rows(ws.router_logits, n);
      const Tensor topk_w = rows(ws.topk_weights, n), topk_ids = rows(ws.topk_ids, n);
      // The router's GEMV with the norm fused; it leaves normed for the experts.
      ops::rms_norm_gemm_keep_normed(residual, lw.mlp_norm, eps, lw.router, Tensor{},
                                     router_logits, normed, s);
      route(c, lw, router_logits, topk_w, topk_ids, s);
      // Expert parallelism's dispatch: the router chose among all experts (global ids, weights
      // normalised over the global top-k); this rank keeps the pairs of the experts it holds,
      // renumbered from 0, and the others' become kMoeNotLocal, which every path below skips.
      const int held = c.held_experts();
      if (c.expert_parallel > 1)
        ops::moe_local_expert_ids(topk_ids, tp->rank * held, held, topk_ids, s);
      mark("moe_router", l);
      const int k = c.experts_per_token;
      bool shared_done = false, residual_done = false;
      if (ws.moe_grouped(n)) {
        const int64_t pairs = int64_t{n} * k;
        const Tensor sorted_pairs = rows(ws.moe_sorted_pairs, pairs);
        const Tensor pair_rows = rows(ws.moe_pair_rows, pairs);
        const Tensor xs = rows(ws.moe_xs, pairs), hs = rows(ws.moe_hs, pairs);
        const Tensor ys = rows(ws.moe_ys, pairs), offsets = ws.moe_offsets.view();
        ops::moe_permute(topk_ids, held, offsets, sorted_pairs, pair_rows,
                         ws.moe_permute_scratch.view(), s);
        if (ws.moe_fp8) {
          // fp8 experts: each token quantized once, per 128 columns into one fp8 term
          // (DeepSeek-V3's recipe), then gathered with its scales into expert order; the gate|up
          // GEMM's SwiGLU epilogue writes h quantized the same way for the down GEMM.
          const Tensor xq = rows(ws.moe_xq, n), xq_scale = ws.moe_xq_scale.view().slice(1, 0, n);
          const Tensor xs_scale = ws.moe_xs_scale.view().slice(1, 0, pairs);
          const Tensor hs_scale = ws.moe_hs_scale.view().slice(1, 0, pairs);
          ops::moe_fp8_quantize(normed, xq, xq_scale, s);
          ops::moe_gather_fp8(xq, xq_scale, sorted_pairs, k, xs, xs_scale, s);
          mark("moe_permute", l);
          ops::moe_grouped_gemm_fp8(xs, xs_scale, lw.experts_gate_up, lw.experts_gate_up_scale,
                                    offsets, ops::MoeActivation::swiglu, hs, hs_scale, s);
          mark("moe_gate_up", l);
          ops::moe_grouped_gemm_fp8(hs, hs_scale, lw.experts_down, lw.experts_down_scale, offsets,
                                    ops::MoeActivation::none, ys, Tensor{}, s);
          mark("moe_down", l);
        } else {
          ops::moe_gather(normed, sorted_pairs, k, xs, s);
          mark("moe_permute", l);
          ops::moe_grouped_gemm(xs, lw.experts_gate_up, offsets, ops::MoeActivation::swiglu, hs, s);
          mark("moe_gate_up", l);
          ops::moe_grouped_gemm(hs, lw.experts_down, offsets, ops::MoeActivation::none, ys, s);
          mark("moe_down", l);
        }
        ops::moe_combine(ys, pair_rows, topk_w, proj, s);
      } else {
        // The GEMV path's two kernels also take the shared experts and, on one GPU (no all-reduce
        // between), the residual add: two launches for the whole layer after the router.
        const int64_t shared = fusable_shared_experts(lw, ws.moe_hidden.view(), n, k);
        const Tensor hidden = ws.moe_hidden.view().slice(0, 0, int64_t{n} * (k + shared));
        ops::MoeExpertsExtras extras;
        if (shared > 0) {
          extras.shared_gate_up = {lw.shared_gate_up, lw.shared_gate_up_scale};
          extras.shared_down = {lw.shared_down, lw.shared_down_scale};
        }
        if (!tp) extras.residual = residual;
        extras.quantize_activations = lw.experts_gate_up.dtype == DType::f8e4m3 && fp8_experts_quantized();
        // fp8 experts with their block scales (undefined for 16-bit experts).
        ops::moe_experts(normed, topk_w, topk_ids, lw.experts_gate_up, lw.experts_down, hidden,
                         tp ? proj : residual, lw.experts_gate_up_scale, lw.experts_down_scale,
                         extras, s);
        shared_done = shared > 0;
        residual_done = !tp;
      }
      mark("moe_experts", l);
      if (lw.shared_gate_up.data && !shared_done) {
        // DeepSeek's shared experts, on the same normed input, joined to the routed output first
        // (transformers' rounding: residual + (routed + shared)); normed is free as scratch then.
        const int64_t I = lw.shared_gate_up.shape[0] / 2;
        const Tensor mlp = rows(ws.mlp, n).slice(1, 0, 2 * I), act = rows(ws.act, n).slice(1, 0, I);
        ops::gemm(normed, {lw.shared_gate_up, lw.shared_gate_up_scale}, Tensor{}, mlp, s);
        ops::swiglu_gemm_add(mlp, {lw.shared_down, lw.shared_down_scale}, proj, act, normed, s);
        mark("moe_shared_experts", l);
      }
      if (!residual_done) {
        // Tensor parallelism: each rank's slice of every expert's width; expert parallelism (the
        // combine): each rank's own experts' share of every token.
        all_reduce(proj);
        ops::add_inplace(proj, residual, s);
      }
    }
  }
  // The LM head's rows: the listed ones (gathered into proj, free by now: embedding is a row
  // gather), every row, or the last.
  Tensor head_in = all_logits ? residual : residual.slice(0, n - 1, n);
  Tensor head_normed = all_logits ? normed : normed.slice(0, n - 1, n);
  if (in.logit_rows.data) {
    const int64_t m = in.logit_rows.shape[0];
    head_in = proj.slice(0, 0, m);
    head_normed = normed.slice(0, 0, m);
    ops::embedding(in.logit_rows, residual, head_in, s);
  }
  if (greedy_ids.data) {
    ops::rms_norm_gemm_argmax(head_in, w.final_norm, eps, w.lm_head, greedy_ids, logits,
                              head_normed, s);
  } else if (tp) {  // vocabulary-parallel: this rank's columns, then all of them on every rank
    const Tensor local = tp->local_logits.slice(0, 0, logits.size(0));
    ops::rms_norm_gemm(head_in, w.final_norm, eps, w.lm_head, Tensor{}, local, head_normed, s);
    tp->comm->all_gather_columns(tp->rank, local, logits, s);
  } else {
    ops::rms_norm_gemm(head_in, w.final_norm, eps, w.lm_head, Tensor{}, logits, head_normed, s);
  }
  mark("lm_head", -1);
}

}  // namespace braid::model
