// C wrapper: multi-head latent attention (absorbed form) over a paged cache of latent rows, and
// its workspace size.
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

extern "C" {

int64_t braid_attention_mla_workspace_floats(int64_t total_q, int64_t heads, int64_t r,
                                             int64_t max_kv_len) {
  return braid::ops::attention_mla_workspace_floats(total_q, heads, r, max_kv_len);
}

braid_status braid_attention_mla(const braid_tensor* q_latent, const braid_tensor* q_rope,
                                 const braid_tensor* cu_seqlens_q, const braid_tensor* cache,
                                 const braid_tensor* page_table, const braid_tensor* kv_lens,
                                 int causal, float softmax_scale, const braid_tensor* out,
                                 const braid_tensor* lse, const braid_tensor* workspace,
                                 void* stream) {
  const char* op = "attention_mla";
  return guarded(op, [&] {
    braid::ops::attention_mla(
        tensor_arg(op, "q_latent", q_latent), tensor_arg(op, "q_rope", q_rope),
        tensor_arg(op, "cu_seqlens_q", cu_seqlens_q), tensor_arg(op, "cache", cache),
        tensor_arg(op, "page_table", page_table), tensor_arg(op, "kv_lens", kv_lens), causal != 0,
        softmax_scale, tensor_arg(op, "out", out), optional_tensor_arg(op, "lse", lse),
        optional_tensor_arg(op, "workspace", workspace), stream_arg(stream));
  });
}

}  // extern "C"
