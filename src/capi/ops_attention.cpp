// C wrapper: attention over a paged KV cache. The KV tensors are named "kv.<field>" in messages,
// as braid::ops::attention names them.
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

extern "C" {

braid_status braid_attention(const braid_tensor* q, const braid_tensor* cu_seqlens_q,
                             const braid_tensor* k_pages, const braid_tensor* v_pages,
                             const braid_tensor* page_table, const braid_tensor* kv_lens,
                             int causal, float softmax_scale, const braid_tensor* out,
                             const braid_tensor* lse, void* stream) {
  const char* op = "attention";
  return guarded(op, [&] {
    const braid::ops::PagedKV kv = paged_kv_arg(op, k_pages, v_pages, page_table, kv_lens);
    braid::ops::attention(tensor_arg(op, "q", q), tensor_arg(op, "cu_seqlens_q", cu_seqlens_q),
                          kv, causal != 0, softmax_scale, tensor_arg(op, "out", out),
                          optional_tensor_arg(op, "lse", lse), stream_arg(stream));
  });
}

}  // extern "C"
