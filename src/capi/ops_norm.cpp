// C wrappers: rms_norm, add_rms_norm.
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

extern "C" {

braid_status braid_rms_norm(const braid_tensor* x, const braid_tensor* weight, float eps,
                            const braid_tensor* out, void* stream) {
  const char* op = "rms_norm";
  return guarded(op, [&] {
    braid::ops::rms_norm(tensor_arg(op, "x", x), tensor_arg(op, "weight", weight), eps,
                         tensor_arg(op, "out", out), stream_arg(stream));
  });
}

braid_status braid_add_rms_norm(const braid_tensor* x, const braid_tensor* residual,
                                const braid_tensor* weight, float eps, const braid_tensor* out,
                                void* stream) {
  const char* op = "add_rms_norm";
  return guarded(op, [&] {
    braid::ops::add_rms_norm(tensor_arg(op, "x", x), tensor_arg(op, "residual", residual),
                             tensor_arg(op, "weight", weight), eps, tensor_arg(op, "out", out),
                             stream_arg(stream));
  });
}

}  // extern "C"
