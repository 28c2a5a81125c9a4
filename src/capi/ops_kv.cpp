// C wrappers: kv_append, qk_norm_rope_kv_append, paged_kv_gather.
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

extern "C" {

braid_status braid_kv_append(const braid_tensor* k, const braid_tensor* v,
                             const braid_tensor* slots, const braid_tensor* k_pages,
                             const braid_tensor* v_pages, void* stream) {
  const char* op = "kv_append";
  return guarded(op, [&] {
    braid::ops::kv_append(tensor_arg(op, "k", k), tensor_arg(op, "v", v),
                          tensor_arg(op, "slots", slots), tensor_arg(op, "k_pages", k_pages),
                          tensor_arg(op, "v_pages", v_pages), stream_arg(stream));
  });
}

braid_status braid_qk_norm_rope_kv_append(const braid_tensor* q, const braid_tensor* k,
                                          const braid_tensor* v, const braid_tensor* q_norm,
                                          const braid_tensor* k_norm, float eps,
                                          const braid_tensor* positions,
                                          const braid_rope_config* config,
                                          const braid_tensor* slots, const braid_tensor* k_pages,
                                          const braid_tensor* v_pages, void* stream) {
  const char* op = "qk_norm_rope_kv_append";
  return guarded(op, [&] {
    braid::ops::qk_norm_rope_kv_append(
        tensor_arg(op, "q", q), tensor_arg(op, "k", k), tensor_arg(op, "v", v),
        optional_tensor_arg(op, "q_norm", q_norm), optional_tensor_arg(op, "k_norm", k_norm), eps,
        tensor_arg(op, "positions", positions), rope_config_of(op, config),
        tensor_arg(op, "slots", slots), tensor_arg(op, "k_pages", k_pages),
        tensor_arg(op, "v_pages", v_pages), stream_arg(stream));
  });
}

braid_status braid_paged_kv_gather(const braid_tensor* k_pages, const braid_tensor* v_pages,
                                   const braid_tensor* page_table, const braid_tensor* kv_lens,
                                   const braid_tensor* cu_seqlens_kv, const braid_tensor* k_out,
                                   const braid_tensor* v_out, void* stream) {
  const char* op = "paged_kv_gather";
  return guarded(op, [&] {
    const braid::ops::PagedKV kv = paged_kv_arg(op, k_pages, v_pages, page_table, kv_lens);
    braid::ops::paged_kv_gather(kv, tensor_arg(op, "cu_seqlens_kv", cu_seqlens_kv),
                                tensor_arg(op, "k_out", k_out), tensor_arg(op, "v_out", v_out),
                                stream_arg(stream));
  });
}

}  // extern "C"
