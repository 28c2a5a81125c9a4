// moe_grouped_gemm_fp8: argument checks and dispatch (contract in ops.h, section "FP8 block
// scale").
#include <climits>
#include <cstdint>
#include <string>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/moe/moe_check.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

// w [E, N, K] f8e4m3, contiguous, with K and N multiples of kFp8Block (N = 2 I with I a multiple
// of it for SwiGLU) and 1 <= E <= kMoeMaxExperts.
void check_weights(const char* op, const Tensor& w, bool swiglu) {
  check::dtype_eq(op, "w", w, DType::f8e4m3);
  check::ndim_eq(op, "w", w, 3);
  check::contiguous(op, "w", w);
  const int64_t experts = w.shape[0], n = w.shape[1], k = w.shape[2];
  const int64_t n_multiple = swiglu ? 2 * kFp8Block : kFp8Block;
  const std::string b = std::to_string(kFp8Block);
  if (experts < 1 || experts > kMoeMaxExperts || n < n_multiple || n % n_multiple != 0 ||
      k < kFp8Block || k % kFp8Block != 0)
    check::fail(ErrorKind::shape, op, "w",
                std::string("[E, ") + (swiglu ? "2 I" : "N") + ", K] with 1 <= E <= " +
                    std::to_string(kMoeMaxExperts) + ", " + (swiglu ? "I" : "N") + " and K " +
                    "positive multiples of " + b,
                shape_string(w));
  if (experts * n > INT_MAX)
    check::fail(ErrorKind::unsupported, op, "w", "fewer than 2^31 rows in all", shape_string(w));
}

// y (and y_scale) for `activation` and w's N: see the contract.
void check_output(const char* op, MoeActivation activation, int64_t m, int64_t n, const Tensor& y,
                  const Tensor& y_scale) {
  check::defined(op, "y", y);
  const bool fp8_y = y.dtype == DType::f8e4m3;
  const bool scale_given = !(y_scale.ndim == 0 && y_scale.data == nullptr);  // Tensor{}: none
  if (scale_given && !fp8_y)
    check::fail(ErrorKind::invalid_argument, op, "y_scale",
                "none (y is " + std::string(dtype_name(y.dtype)) + ", only an f8e4m3 y has scales)",
                describe(y_scale));
  if (activation == MoeActivation::none) {
    if (fp8_y)
      check::fail(ErrorKind::dtype, op, "y",
                  "dtype f32 or bf16 (an f8e4m3 y needs activation swiglu or swiglu_gate_last)",
                  "f8e4m3");
    check::dtype_in(op, "y", y, {DType::f32, DType::bf16});
    check::shape_eq(op, "y", y, {m, n});
    check::rows(op, "y", y);
    return;
  }
  const int64_t inter = n / 2;
  check::dtype_in(op, "y", y, {DType::f32, DType::f8e4m3});
  if (!fp8_y) {
    check::shape_eq(op, "y", y, {m, inter});
    check::rows(op, "y", y);
    return;
  }
  const int64_t terms = moe_check::fp8_terms(op, "y", y, inter, "I = N / 2, half the rows of w[e]");
  check::dim_eq(op, "y", y, 0, m, "M, the rows of x");
  if (!scale_given)
    check::fail(ErrorKind::invalid_argument, op, "y_scale",
                "the scales of the f8e4m3 y, [" + std::to_string(terms * inter / kFp8Block) + ", " +
                    std::to_string(m) + "] f32",
                "none");
  moe_check::fp8_scales(op, "y_scale", y_scale, terms * inter / kFp8Block, m);
}

}  // namespace

void moe_grouped_gemm_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                          const Tensor& w_scale, const Tensor& expert_offsets,
                          MoeActivation activation, const Tensor& y, const Tensor& y_scale,
                          Stream stream) {
  const char* op = "moe_grouped_gemm_fp8";
  check::defined(op, "x", x);
  check::defined(op, "x_scale", x_scale);
  check::defined(op, "w", w);
  check::defined(op, "w_scale", w_scale);
  check::defined(op, "expert_offsets", expert_offsets);
  if (activation != MoeActivation::none && activation != MoeActivation::swiglu &&
      activation != MoeActivation::swiglu_gate_last)
    check::fail(ErrorKind::invalid_argument, op, "activation",
                "none (0), swiglu (1) or swiglu_gate_last (2)",
                std::to_string(static_cast<int>(activation)));

  check_weights(op, w, activation != MoeActivation::none);
  const int64_t experts = w.shape[0], n = w.shape[1], k = w.shape[2];
  const int64_t terms = moe_check::fp8_terms(op, "x", x, k, "K, as in w");
  const int64_t m = x.shape[0];
  if (m > INT_MAX)
    check::fail(ErrorKind::unsupported, op, "x", "fewer than 2^31 rows", shape_string(x));
  moe_check::fp8_scales(op, "x_scale", x_scale, terms * k / kFp8Block, m);

  check::dtype_eq(op, "w_scale", w_scale, DType::f32);
  check::shape_eq(op, "w_scale", w_scale, {experts, n / kFp8Block, k / kFp8Block});
  check::contiguous(op, "w_scale", w_scale);

  check::dtype_eq(op, "expert_offsets", expert_offsets, DType::i32);
  check::shape_eq(op, "expert_offsets", expert_offsets, {experts + 1});
  check::contiguous(op, "expert_offsets", expert_offsets);

  check_output(op, activation, m, n, y, y_scale);

  Device dev = check::same_device(op, {{"x", &x},
                                       {"x_scale", &x_scale},
                                       {"w", &w},
                                       {"w_scale", &w_scale},
                                       {"expert_offsets", &expert_offsets},
                                       {"y", &y},
                                       {"y_scale", &y_scale}});
  if (m == 0) return;
  if (dev.is_cpu()) {
    moe_check::expert_offsets_values(op, expert_offsets, experts, m);
    return cpu::moe_grouped_gemm_fp8(x, x_scale, w, w_scale, expert_offsets, activation, y,
                                     y_scale);
  }
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_grouped_gemm_fp8(x, x_scale, w, w_scale, expert_offsets, activation, y, y_scale,
                             stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
