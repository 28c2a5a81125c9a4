// C wrapper: FlashAttention forward over a ragged batch with K/V in contiguous tensors.
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

extern "C" {

braid_status braid_attention_prefill(const braid_tensor* q, const braid_tensor* k,
                                     const braid_tensor* v, const braid_tensor* cu_seqlens_q,
                                     const braid_tensor* cu_seqlens_kv, int max_seqlen_q,
                                     int causal, float softmax_scale, const braid_tensor* out,
                                     const braid_tensor* lse, void* stream) {
  const char* op = "attention_prefill";
  return guarded(op, [&] {
    braid::ops::attention_prefill(
        tensor_arg(op, "q", q), tensor_arg(op, "k", k), tensor_arg(op, "v", v),
        tensor_arg(op, "cu_seqlens_q", cu_seqlens_q),
        tensor_arg(op, "cu_seqlens_kv", cu_seqlens_kv), max_seqlen_q, causal != 0,
        softmax_scale, tensor_arg(op, "out", out), optional_tensor_arg(op, "lse", lse),
        stream_arg(stream));
  });
}

}  // extern "C"
