// C wrapper: kv_append.
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

}  // extern "C"
