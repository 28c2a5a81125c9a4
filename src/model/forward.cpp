// Decoder forward pass. Per layer:
//   RMSNorm -> QKV (+bias) -> q/k norm -> RoPE -> KV append -> paged attention -> o_proj
//   -> residual add + RMSNorm -> SwiGLU MLP or MoE -> residual add (fused into the next norm).
#include "model/forward.h"

#include <cmath>

#include "braid/ops.h"

namespace braid::model {

namespace {

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

}  // namespace

Workspace::Workspace(const ModelConfig& c, int T, Device d, DType t, int64_t decode_kv_capacity)
    : max_tokens(T) {
  const int64_t H = c.hidden_size;
  const int64_t qkv_width = c.q_dim() + 2 * c.kv_dim();
  int64_t I = 0;
  bool any_moe = false;
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.layer_is_moe(l))
      any_moe = true;
    else
      I = c.intermediate_size;
  }
  residual = OwnedTensor(t, {T, H}, d);
  normed = OwnedTensor(t, {T, H}, d);
  qkv = OwnedTensor(t, {T, qkv_width}, d);
  attn = OwnedTensor(t, {T, c.q_dim()}, d);
  proj = OwnedTensor(t, {T, H}, d);
  if (I > 0) {
    mlp = OwnedTensor(t, {T, 2 * I}, d);
    act = OwnedTensor(t, {T, I}, d);
  }
  if (any_moe) {
    const int64_t E = c.num_experts, k = c.experts_per_token;
    router_logits = OwnedTensor(t, {T, E}, d);
    topk_weights = OwnedTensor(DType::f32, {T, k}, d);
    topk_ids = OwnedTensor(DType::i32, {T, k}, d);
    moe_hidden = OwnedTensor(DType::f32, {T * k, int64_t{c.moe_intermediate_size}}, d);
  }
  if (decode_kv_capacity > 0)
    decode_attention = OwnedTensor(
        DType::f32,
        {ops::attention_decode_workspace_floats(T, c.num_heads, c.head_dim, decode_kv_capacity)}, d);
}

void forward(const ModelConfig& c, const Weights& w, engine::KVCache& cache, Workspace& ws,
             const StepInputs& in, int n, bool all_logits, const Tensor& logits, Stream s,
             const ForwardProbe* probe) {
  auto mark = [probe](const char* component, int layer) {
    if (probe) (*probe)(component, layer);
  };
  const int64_t hd = c.head_dim, qh = c.num_heads, kvh = c.num_kv_heads;
  const float eps = c.rms_norm_eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
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

  ops::embedding(in.tokens, w.embed, residual, s);
  mark("embedding", -1);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    // The previous layer's MLP output joins the residual stream inside the fused norm.
    if (l == 0)
      ops::rms_norm(residual, lw.attn_norm, eps, normed, s);
    else
      ops::add_rms_norm(proj, residual, lw.attn_norm, eps, normed, s);
    mark("attn_norm", l);

    ops::gemm(normed, lw.qkv, lw.qkv_bias, qkv, s);
    mark("qkv_proj", l);
    const Tensor q = heads_view(qkv, n, 0, qh, hd);
    const Tensor k = heads_view(qkv, n, qh * hd, kvh, hd);
    const Tensor v = heads_view(qkv, n, (qh + kvh) * hd, kvh, hd);
    if (c.qk_norm) {
      ops::rms_norm(q, lw.q_norm, eps, q, s);
      ops::rms_norm(k, lw.k_norm, eps, k, s);
      mark("qk_norm", l);
    }
    ops::rope_apply(q, k, in.positions, c.rope, s);
    mark("rope", l);
    ops::kv_append(k, v, in.slots, cache.k[static_cast<size_t>(l)].view(),
                   cache.v[static_cast<size_t>(l)].view(), s);
    mark("kv_append", l);
    const ops::PagedKV kv{cache.k[static_cast<size_t>(l)].view(),
                          cache.v[static_cast<size_t>(l)].view(), cache.page_table.view(),
                          in.kv_lens};
    if (in.decode && ws.decode_attention.view().ndim != 0)
      ops::attention_decode(q, kv, scale, attn_heads, Tensor{}, ws.decode_attention.view(), s);
    else
      ops::attention(q, in.cu_seqlens_q, kv, /*causal=*/true, scale, attn_heads, Tensor{}, s);
    mark("attention", l);
    ops::gemm(attn, lw.o_proj, lw.o_bias, proj, s);
    mark("o_proj", l);
    ops::add_rms_norm(proj, residual, lw.mlp_norm, eps, normed, s);
    mark("mlp_norm", l);

    if (!c.layer_is_moe(l)) {
      const Tensor mlp = rows(ws.mlp, n), act = rows(ws.act, n);
      ops::gemm(normed, lw.gate_up, Tensor{}, mlp, s);
      mark("gate_up_proj", l);
      ops::silu_mul(mlp, act, s);
      mark("silu_mul", l);
      ops::gemm(act, lw.down, Tensor{}, proj, s);
      mark("down_proj", l);
    } else {
      const Tensor router_logits = rows(ws.router_logits, n);
      const Tensor topk_w = rows(ws.topk_weights, n), topk_ids = rows(ws.topk_ids, n);
      const Tensor hidden = ws.moe_hidden.view().slice(0, 0, int64_t{n} * c.experts_per_token);
      ops::gemm(normed, lw.router, Tensor{}, router_logits, s);
      ops::moe_route_topk_softmax(router_logits, c.experts_per_token, c.norm_topk_prob, topk_w,
                                  topk_ids, s);
      mark("moe_router", l);
      ops::moe_experts(normed, topk_w, topk_ids, lw.experts_gate_up, lw.experts_down, hidden,
                       proj, s);
      mark("moe_experts", l);
    }
  }
  ops::add_rms_norm(proj, residual, w.final_norm, eps, normed, s);
  mark("final_norm", -1);
  const Tensor head_in = all_logits ? normed : normed.slice(0, n - 1, n);
  ops::gemm(head_in, w.lm_head, Tensor{}, logits, s);
  mark("lm_head", -1);
}

}  // namespace braid::model
