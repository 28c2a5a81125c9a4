// C wrappers: embedding, silu_mul, softmax, argmax.
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

extern "C" {

braid_status braid_embedding(const braid_tensor* ids, const braid_tensor* table,
                             const braid_tensor* out, void* stream) {
  const char* op = "embedding";
  return guarded(op, [&] {
    braid::ops::embedding(tensor_arg(op, "ids", ids), tensor_arg(op, "table", table),
                          tensor_arg(op, "out", out), stream_arg(stream));
  });
}

braid_status braid_silu_mul(const braid_tensor* x, const braid_tensor* out, void* stream) {
  const char* op = "silu_mul";
  return guarded(op, [&] {
    braid::ops::silu_mul(tensor_arg(op, "x", x), tensor_arg(op, "out", out), stream_arg(stream));
  });
}

braid_status braid_softmax(const braid_tensor* x, const braid_tensor* out, void* stream) {
  const char* op = "softmax";
  return guarded(op, [&] {
    braid::ops::softmax(tensor_arg(op, "x", x), tensor_arg(op, "out", out), stream_arg(stream));
  });
}

braid_status braid_argmax(const braid_tensor* x, const braid_tensor* out, void* stream) {
  const char* op = "argmax";
  return guarded(op, [&] {
    braid::ops::argmax(tensor_arg(op, "x", x), tensor_arg(op, "out", out), stream_arg(stream));
  });
}

}  // extern "C"
