// gemm: argument checks and dispatch.
#include <string>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/gemm/weight_check.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

// Rows of `t` must not overlap: row stride >= the row length. Meaningless for a single row.
static void check_row_stride(const char* op, const char* arg, const Tensor& t) {
  if (t.size(0) > 1 && t.row_stride() < t.size(1))
    check::fail(ErrorKind::shape, op, arg, "row stride >= " + std::to_string(t.size(1)),
                "row stride " + std::to_string(t.row_stride()) + " for shape " + shape_string(t));
}

void gemm(const Tensor& a, const Weight& w, const Tensor& bias, const Tensor& out, Stream stream) {
  const char* op = "gemm";
  const bool has_bias = !(bias.ndim == 0 && bias.data == nullptr);
  check::defined(op, "a", a);
  check::defined(op, "out", out);
  if (has_bias) check::defined(op, "bias", bias);

  check::dtype_in(op, "a", a, {DType::f32, DType::f16, DType::bf16});
  // cuBLASLt has no f16 x f16 -> bf16 (or the reverse) gemm; the reference follows the same rule.
  if (out.dtype != a.dtype && (out.dtype != DType::f32 || w.fp8()))
    check::fail(ErrorKind::dtype, op, "out",
                "dtype " + std::string(dtype_name(a.dtype)) +
                    (w.fp8() ? " (a's dtype)" : " or f32 (a's dtype, or f32)"),
                std::string(dtype_name(out.dtype)));
  if (has_bias) check::dtype_eq(op, "bias", bias, out.dtype);
  if (a.dtype == DType::f32 && a.device.is_cuda())
    check::fail(ErrorKind::dtype, op, "a", "dtype f16 or bf16 on CUDA (f32 is CPU-only)",
                describe(a));

  check::ndim_eq(op, "a", a, 2);
  check::rows(op, "a", a);
  check_row_stride(op, "a", a);
  const int64_t m = a.size(0), k = a.size(1);
  if (k < 1) check::fail(ErrorKind::shape, op, "a", "k >= 1 columns", shape_string(a));

  const int64_t n = check::weight(op, w, a.dtype, k);

  if (has_bias) {
    check::shape_eq(op, "bias", bias, {n});
    check::contiguous(op, "bias", bias);
  }

  check::shape_eq(op, "out", out, {m, n});
  check::rows(op, "out", out);
  check_row_stride(op, "out", out);

  Device dev = check::same_device(
      op, {{"a", &a}, {"w", &w.w}, {"w.scale", &w.scale}, {"bias", &bias}, {"out", &out}});
  if (m == 0) return;
  if (dev.is_cpu()) return cpu::gemm(a, w.w, bias, out, w.scale);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::gemm(a, w.w, bias, out, stream, w.scale);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
