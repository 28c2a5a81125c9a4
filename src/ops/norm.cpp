// rms_norm and add_rms_norm: argument checks and dispatch.
#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

static void check_norm_args(const char* op, const Tensor& x, const Tensor& weight, float eps,
                            const Tensor& out) {
  check::defined(op, "x", x);
  check::defined(op, "weight", weight);
  check::defined(op, "out", out);
  check::dtype_in(op, "x", x, {DType::f32, DType::f16, DType::bf16});
  check::dtype_eq(op, "weight", weight, x.dtype);
  check::dtype_eq(op, "out", out, x.dtype);
  check::ndim_at_least(op, "x", x, 1);
  check::row_grid(op, "x", x);
  check::shape_eq(op, "weight", weight, {x.size(-1)});
  check::contiguous(op, "weight", weight);
  check::same_shape(op, "out", out, x);
  check::row_grid(op, "out", out);
  if (!(eps >= 0.0f)) check::fail(ErrorKind::invalid_argument, op, "eps", "eps >= 0", std::to_string(eps));
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out, Stream stream) {
  const char* op = "rms_norm";
  check_norm_args(op, x, weight, eps, out);
  Device dev = check::same_device(op, {{"x", &x}, {"weight", &weight}, {"out", &out}});
  if (x.numel() == 0) return;
  if (dev.is_cpu()) return cpu::rms_norm(x, weight, eps, out);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::rms_norm(x, weight, eps, out, stream);
#else
  (void)stream;
#endif
}

void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                  const Tensor& out, Stream stream) {
  const char* op = "add_rms_norm";
  check_norm_args(op, x, weight, eps, out);
  check::dtype_eq(op, "residual", residual, x.dtype);
  check::same_shape(op, "residual", residual, x);
  check::row_grid(op, "residual", residual);
  Device dev = check::same_device(
      op, {{"x", &x}, {"residual", &residual}, {"weight", &weight}, {"out", &out}});
  if (x.numel() == 0) return;
  if (dev.is_cpu()) return cpu::add_rms_norm(x, residual, weight, eps, out);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::add_rms_norm(x, residual, weight, eps, out, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
