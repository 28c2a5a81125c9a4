// C wrapper: gemm.
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

extern "C" {

braid_status braid_gemm(const braid_tensor* a, const braid_tensor* w, const braid_tensor* bias,
                        const braid_tensor* out, void* stream) {
  const char* op = "gemm";
  return guarded(op, [&] {
    braid::ops::gemm(tensor_arg(op, "a", a), tensor_arg(op, "w", w),
                     optional_tensor_arg(op, "bias", bias), tensor_arg(op, "out", out),
                     stream_arg(stream));
  });
}

}  // extern "C"
