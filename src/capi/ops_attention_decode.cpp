// C wrappers: decode attention (one query per sequence) over a paged KV cache, its workspace
// size, and the decode step's joined op (norms, RoPE, append and attention). The KV tensors are named "kv.<field>" in messages, as braid::ops::attention_decode names them.
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

extern "C" {

int64_t braid_attention_decode_workspace_floats(int64_t batch, int64_t q_heads, int64_t head_dim,
                                                int64_t max_kv_len) {
  return braid::ops::attention_decode_workspace_floats(batch, q_heads, head_dim, max_kv_len);
}

braid_status braid_attention_decode(const braid_tensor* q, const braid_tensor* k_pages,
                                    const braid_tensor* v_pages, const braid_tensor* page_table,
                                    const braid_tensor* kv_lens, float softmax_scale,
                                    const braid_tensor* out, const braid_tensor* lse,
                                    const braid_tensor* workspace, void* stream) {
  const char* op = "attention_decode";
  return guarded(op, [&] {
    const braid::ops::PagedKV kv = paged_kv_arg(op, k_pages, v_pages, page_table, kv_lens);
    braid::ops::attention_decode(tensor_arg(op, "q", q), kv, softmax_scale,
                                 tensor_arg(op, "out", out), optional_tensor_arg(op, "lse", lse),
                                 tensor_arg(op, "workspace", workspace), stream_arg(stream));
  });
}

int64_t braid_attention_decode_counters(int64_t batch, int64_t q_heads, int64_t kv_heads) {
  return braid::ops::attention_decode_counters(batch, q_heads, kv_heads);
}

braid_status braid_qk_norm_rope_kv_append_attention_decode(
    const braid_tensor* q, const braid_tensor* k, const braid_tensor* v, const braid_tensor* q_norm,
    const braid_tensor* k_norm, float eps, const braid_tensor* positions,
    const braid_rope_config* config, const braid_tensor* slots, const braid_tensor* k_pages,
    const braid_tensor* v_pages, const braid_tensor* page_table, const braid_tensor* kv_lens,
    float softmax_scale, const braid_tensor* out, const braid_tensor* lse,
    const braid_tensor* workspace, const braid_tensor* counters, void* stream) {
  const char* op = "qk_norm_rope_kv_append_attention_decode";
  return guarded(op, [&] {
    const braid::ops::PagedKV kv = paged_kv_arg(op, k_pages, v_pages, page_table, kv_lens);
    braid::ops::qk_norm_rope_kv_append_attention_decode(
        tensor_arg(op, "q", q), tensor_arg(op, "k", k), tensor_arg(op, "v", v),
        optional_tensor_arg(op, "q_norm", q_norm), optional_tensor_arg(op, "k_norm", k_norm), eps,
        tensor_arg(op, "positions", positions), rope_config_of(op, config),
        tensor_arg(op, "slots", slots), kv, softmax_scale, tensor_arg(op, "out", out),
        optional_tensor_arg(op, "lse", lse), tensor_arg(op, "workspace", workspace),
        tensor_arg(op, "counters", counters), stream_arg(stream));
  });
}

}  // extern "C"
