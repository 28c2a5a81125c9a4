// softmax: argument checks and dispatch.
#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

void softmax(const Tensor& x, const Tensor& out, Stream stream) {
  const char* op = "softmax";
  check::defined(op, "x", x);
  check::defined(op, "out", out);
  check::dtype_in(op, "x", x, {DType::f32, DType::f16, DType::bf16});
  check::ndim_at_least(op, "x", x, 1);
  check::rows(op, "x", x);
  if (x.dtype == DType::f32) check::dtype_eq(op, "out", out, DType::f32);
  else check::dtype_in(op, "out", out, {DType::f32, x.dtype});
  check::same_shape(op, "out", out, x);
  check::rows(op, "out", out);
  Device dev = check::same_device(op, {{"x", &x}, {"out", &out}});
  if (x.numel() == 0) return;
  if (dev.is_cpu()) return cpu::softmax(x, out);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::softmax(x, out, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
