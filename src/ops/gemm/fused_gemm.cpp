// Fused decode ops (add_inplace, rms_norm_gemm, rms_norm_gemm_argmax, gemm_add,
// swiglu_gemm_add): argument checks and dispatch. The checks are those of the primitives each op composes (gemm, rms_norm, silu_mul),
// so an argument the unfused sequence would refuse is refused here, under the fused op's name.
#include <string>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/gemm/fused_gemm_check.h"
#include "ops/gemm/weight_check.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

bool given(const Tensor& t) { return !(t.ndim == 0 && t.data == nullptr); }

// The activations of a product: [m, cols] f32/f16/bf16 rows that do not overlap; f32 is
// CPU-only, as for gemm.
void check_activations(const char* op, const char* arg, const Tensor& a) {
  check::defined(op, arg, a);
  check::dtype_in(op, arg, a, {DType::f32, DType::f16, DType::bf16});
  if (a.dtype == DType::f32 && a.device.is_cuda())
    check::fail(ErrorKind::dtype, op, arg, "dtype f16 or bf16 on CUDA (f32 is CPU-only)",
                describe(a));
  check::ndim_eq(op, arg, a, 2);
  check::rows(op, arg, a);
  if (a.size(1) < 1) check::fail(ErrorKind::shape, op, arg, ">= 1 columns", shape_string(a));
}

// A [rows, cols] matrix of `dtype` whose rows do not overlap (outputs and scratch).
void check_matrix(const char* op, const char* arg, const Tensor& t, DType dtype, int64_t rows,
                  int64_t cols) {
  check::defined(op, arg, t);
  check::dtype_eq(op, arg, t, dtype);
  check::shape_eq(op, arg, t, {rows, cols});
  check::rows(op, arg, t);
  if (rows > 1 && t.row_stride() < cols)
    check::fail(ErrorKind::shape, op, arg, "row stride >= " + std::to_string(cols),
                "row stride " + std::to_string(t.row_stride()) + " for shape " + shape_string(t));
}

// w [n, k] of `dtype` (or fp8 with its scales: ops::Weight), contiguous; returns n.
int64_t check_weight(const char* op, const Weight& w, DType dtype, int64_t k) {
  return check::weight(op, w, dtype, k);
}

// An fp8 product writes the activations' dtype (cuBLASLt's block-scaled GEMM path).
void check_fp8_out(const char* op, const Weight& w, const Tensor& out, DType act) {
  if (w.fp8() && out.dtype != act)
    check::fail(ErrorKind::dtype, op, "out",
                "dtype " + std::string(dtype_name(act)) + " (the activations' dtype, for fp8 weights)",
                std::string(dtype_name(out.dtype)));
}

void check_bias(const char* op, const Tensor& bias, DType dtype, int64_t n) {
  if (!given(bias)) return;
  check::defined(op, "bias", bias);
  check::dtype_eq(op, "bias", bias, dtype);
  check::shape_eq(op, "bias", bias, {n});
  check::contiguous(op, "bias", bias);
}

// rms_norm_gemm's x, norm_weight, eps and w; returns n.
int64_t check_norm_product(const char* op, const Tensor& x, const Tensor& norm_weight, float eps,
                           const Weight& w) {
  check_activations(op, "x", x);
  const int64_t k = x.size(1);
  check::defined(op, "norm_weight", norm_weight);
  check::dtype_eq(op, "norm_weight", norm_weight, x.dtype);
  check::shape_eq(op, "norm_weight", norm_weight, {k});
  check::contiguous(op, "norm_weight", norm_weight);
  if (!(eps >= 0.0f)) check::fail(ErrorKind::invalid_argument, op, "eps", "eps >= 0", std::to_string(eps));
  return check_weight(op, w, x.dtype, k);
}

}  // namespace

namespace fused_check {

Device rms_norm_gemm(const char* op, const Tensor& x, const Tensor& norm_weight, float eps,
                     const Weight& w, const Tensor& bias, const Tensor& out, const Tensor& normed) {
  const int64_t n = check_norm_product(op, x, norm_weight, eps, w);
  const int64_t m = x.size(0), k = x.size(1);
  check::defined(op, "out", out);
  if (out.dtype != x.dtype && out.dtype != DType::f32)
    check::fail(ErrorKind::dtype, op, "out",
                "dtype " + std::string(dtype_name(x.dtype)) + " or f32 (x's dtype, or f32)",
                std::string(dtype_name(out.dtype)));
  check_fp8_out(op, w, out, x.dtype);
  check_bias(op, bias, out.dtype, n);
  check_matrix(op, "out", out, out.dtype, m, n);
  check_matrix(op, "normed", normed, x.dtype, m, k);
  return check::same_device(op, {{"x", &x}, {"norm_weight", &norm_weight}, {"w", &w.w},
                                 {"w.scale", &w.scale}, {"bias", &bias}, {"out", &out},
                                 {"normed", &normed}});
}

Device gemm_add(const char* op, const Tensor& a, const Weight& w, const Tensor& bias,
                const Tensor& residual, const Tensor& scratch) {
  check_activations(op, "a", a);
  const int64_t m = a.size(0), k = a.size(1);
  const int64_t n = check_weight(op, w, a.dtype, k);
  check_bias(op, bias, a.dtype, n);
  check_matrix(op, "residual", residual, a.dtype, m, n);
  check_matrix(op, "scratch", scratch, a.dtype, m, n);
  return check::same_device(op, {{"a", &a}, {"w", &w.w}, {"w.scale", &w.scale}, {"bias", &bias},
                                 {"residual", &residual}, {"scratch", &scratch}});
}

Device swiglu_gemm_add(const char* op, const Tensor& gate_up, const Weight& w,
                       const Tensor& residual, const Tensor& act, const Tensor& scratch) {
  check_activations(op, "gate_up", gate_up);
  if (gate_up.size(1) % 2 != 0)
    check::fail(ErrorKind::shape, op, "gate_up", "an even last dimension (gate | up halves)",
                "shape " + shape_string(gate_up));
  const int64_t m = gate_up.size(0), inter = gate_up.size(1) / 2;
  const int64_t n = check_weight(op, w, gate_up.dtype, inter);
  check_matrix(op, "residual", residual, gate_up.dtype, m, n);
  check_matrix(op, "act", act, gate_up.dtype, m, inter);
  check_matrix(op, "scratch", scratch, gate_up.dtype, m, n);
  return check::same_device(op, {{"gate_up", &gate_up}, {"w", &w.w}, {"w.scale", &w.scale},
                                 {"residual", &residual}, {"act", &act}, {"scratch", &scratch}});
}

}  // namespace fused_check

void add_inplace(const Tensor& x, const Tensor& residual, Stream stream) {
  const char* op = "add_inplace";
  check::defined(op, "x", x);
  check::defined(op, "residual", residual);
  check::dtype_in(op, "x", x, {DType::f32, DType::f16, DType::bf16});
  check::dtype_eq(op, "residual", residual, x.dtype);
  check::ndim_at_least(op, "x", x, 1);
  check::rows(op, "x", x);
  check::same_shape(op, "residual", residual, x);
  check::rows(op, "residual", residual);
  Device dev = check::same_device(op, {{"x", &x}, {"residual", &residual}});
  if (x.numel() == 0) return;
  if (dev.is_cpu()) return cpu::add_inplace(x, residual);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::add_inplace(x, residual, stream);
#else
  (void)stream;
#endif
}

namespace {

// rms_norm_gemm and rms_norm_gemm_keep_normed: the same checks, the same CPU path (which always
// writes normed); keep_normed asks the CUDA kernel for normed too.
void rms_norm_gemm_op(const char* op, const Tensor& x, const Tensor& norm_weight, float eps,
                      const Weight& w, const Tensor& bias, const Tensor& out, const Tensor& normed,
                      bool keep_normed, Stream stream) {
  const Device dev = fused_check::rms_norm_gemm(op, x, norm_weight, eps, w, bias, out, normed);
  if (x.size(0) == 0) return;
  if (dev.is_cpu()) return cpu::rms_norm_gemm(x, norm_weight, eps, w.w, bias, out, normed, w.scale);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::rms_norm_gemm(x, norm_weight, eps, w.w, w.scale, bias, out, normed, keep_normed, stream);
#else
  (void)keep_normed;
  (void)stream;
#endif
}

}  // namespace

void rms_norm_gemm(const Tensor& x, const Tensor& norm_weight, float eps, const Weight& w,
                   const Tensor& bias, const Tensor& out, const Tensor& normed, Stream stream) {
  rms_norm_gemm_op("rms_norm_gemm", x, norm_weight, eps, w, bias, out, normed, false, stream);
}

void rms_norm_gemm_keep_normed(const Tensor& x, const Tensor& norm_weight, float eps,
                               const Weight& w, const Tensor& bias, const Tensor& out,
                               const Tensor& normed, Stream stream) {
  rms_norm_gemm_op("rms_norm_gemm_keep_normed", x, norm_weight, eps, w, bias, out, normed, true,
                   stream);
}

void rms_norm_gemm_argmax(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                          const Tensor& ids, const Tensor& logits, const Tensor& normed,
                          Stream stream) {
  const char* op = "rms_norm_gemm_argmax";
  const int64_t n = check_norm_product(op, x, norm_weight, eps, w);
  const int64_t m = x.size(0), k = x.size(1);
  check::defined(op, "ids", ids);
  check::dtype_in(op, "ids", ids, {DType::i32, DType::i64});
  check::shape_eq(op, "ids", ids, {m});
  check::contiguous(op, "ids", ids);
  check_matrix(op, "logits", logits, DType::f32, m, n);
  check_matrix(op, "normed", normed, x.dtype, m, k);
  Device dev = check::same_device(op, {{"x", &x}, {"norm_weight", &norm_weight}, {"w", &w},
                                       {"ids", &ids}, {"logits", &logits}, {"normed", &normed}});
  if (m == 0) return;
  if (dev.is_cpu()) return cpu::rms_norm_gemm_argmax(x, norm_weight, eps, w, ids, logits, normed);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::rms_norm_gemm_argmax(x, norm_weight, eps, w, ids, logits, normed, stream);
#else
  (void)stream;
#endif
}

void gemm_add(const Tensor& a, const Weight& w, const Tensor& bias, const Tensor& residual,
              const Tensor& scratch, Stream stream) {
  const Device dev = fused_check::gemm_add("gemm_add", a, w, bias, residual, scratch);
  if (a.size(0) == 0) return;
  if (dev.is_cpu()) return cpu::gemm_add(a, w.w, bias, residual, scratch, w.scale);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::gemm_add(a, w.w, w.scale, bias, residual, scratch, stream);
#else
  (void)stream;
#endif
}

void swiglu_gemm_add(const Tensor& gate_up, const Weight& w, const Tensor& residual,
                     const Tensor& act, const Tensor& scratch, Stream stream) {
  const Device dev =
      fused_check::swiglu_gemm_add("swiglu_gemm_add", gate_up, w, residual, act, scratch);
  if (gate_up.size(0) == 0) return;
  if (dev.is_cpu()) return cpu::swiglu_gemm_add(gate_up, w.w, residual, act, scratch, w.scale);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::swiglu_gemm_add(gate_up, w.w, w.scale, residual, act, scratch, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
