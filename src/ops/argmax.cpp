// argmax: argument checks and dispatch.
#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

void argmax(const Tensor& x, const Tensor& out, Stream stream) {
  const char* op = "argmax";
  check::defined(op, "x", x);
  check::defined(op, "out", out);
  check::dtype_in(op, "x", x, {DType::f32, DType::f16, DType::bf16});
  check::ndim_at_least(op, "x", x, 1);
  check::rows(op, "x", x);
  check::dtype_in(op, "out", out, {DType::i32, DType::i64});
  check::shape_eq(op, "out", out, {x.rows()});
  check::contiguous(op, "out", out);
  // An empty row has no maximum.
  if (x.size(-1) == 0 && x.rows() > 0)
    check::fail(ErrorKind::shape, op, "x", "a non-empty last dimension", "shape " + shape_string(x));
  Device dev = check::same_device(op, {{"x", &x}, {"out", &out}});
  if (x.rows() == 0) return;
  if (dev.is_cpu()) return cpu::argmax(x, out);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::argmax(x, out, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
