// silu_mul: argument checks and dispatch.
#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

void silu_mul(const Tensor& x, const Tensor& out, Stream stream) {
  const char* op = "silu_mul";
  check::defined(op, "x", x);
  check::defined(op, "out", out);
  check::dtype_in(op, "x", x, {DType::f32, DType::f16, DType::bf16});
  check::ndim_at_least(op, "x", x, 1);
  check::rows(op, "x", x);
  if (x.size(-1) % 2 != 0)
    check::fail(ErrorKind::shape, op, "x", "an even last dimension (gate | up halves)",
                "shape " + shape_string(x));
  check::dtype_eq(op, "out", out, x.dtype);
  // out has x's shape with the last dimension halved.
  Tensor expected = x;
  expected.shape[x.ndim - 1] = x.size(-1) / 2;
  check::same_shape(op, "out", out, expected);
  check::rows(op, "out", out);
  Device dev = check::same_device(op, {{"x", &x}, {"out", &out}});
  if (out.numel() == 0) return;
  if (dev.is_cpu()) return cpu::silu_mul(x, out);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::silu_mul(x, out, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
