// moe_grouped_gemm: argument checks and dispatch (contract in ops.h).
#include <climits>
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

void moe_grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& expert_offsets,
                      MoeActivation activation, const Tensor& y, Stream stream) {
  const char* op = "moe_grouped_gemm";
  check::defined(op, "x", x);
  check::defined(op, "w", w);
  check::defined(op, "expert_offsets", expert_offsets);
  check::defined(op, "y", y);
  if (activation != MoeActivation::none && activation != MoeActivation::swiglu)
    check::fail(ErrorKind::invalid_argument, op, "activation", "none (0) or swiglu (1)",
                std::to_string(static_cast<int>(activation)));
  const bool swiglu = activation == MoeActivation::swiglu;

  check::dtype_in(op, "x", x, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(op, "x", x, 2);
  check::rows(op, "x", x);
  const int64_t m = x.shape[0], k = x.shape[1];
  if (k < 1) check::fail(ErrorKind::shape, op, "x", "[rows, K] with K >= 1", shape_string(x));
  if (m > INT_MAX)
    check::fail(ErrorKind::unsupported, op, "x", "fewer than 2^31 rows", shape_string(x));

  check::dtype_eq(op, "w", w, x.dtype);
  check::ndim_eq(op, "w", w, 3);
  check::dim_eq(op, "w", w, 2, k, "K, as in x");
  check::contiguous(op, "w", w);
  const int64_t experts = w.shape[0], w_rows = w.shape[1];
  if (experts < 1 || experts > kMoeMaxExperts || w_rows < 1 || (swiglu && w_rows % 2 != 0))
    check::fail(ErrorKind::shape, op, "w",
                std::string("[E, ") + (swiglu ? "2 I" : "N") + ", K] with 1 <= E <= " +
                    std::to_string(kMoeMaxExperts) + (swiglu ? " and I >= 1" : " and N >= 1"),
                shape_string(w));
  if (experts * w_rows > INT_MAX)
    check::fail(ErrorKind::unsupported, op, "w", "fewer than 2^31 rows in all", shape_string(w));

  check::dtype_eq(op, "expert_offsets", expert_offsets, DType::i32);
  check::shape_eq(op, "expert_offsets", expert_offsets, {experts + 1});
  check::contiguous(op, "expert_offsets", expert_offsets);

  check::dtype_eq(op, "y", y, x.dtype);
  check::shape_eq(op, "y", y, {m, swiglu ? w_rows / 2 : w_rows});
  check::rows(op, "y", y);

  Device dev = check::same_device(
      op, {{"x", &x}, {"w", &w}, {"expert_offsets", &expert_offsets}, {"y", &y}});
  if (m == 0) return;
  if (dev.is_cpu()) {
    moe_check::expert_offsets_values(op, expert_offsets, experts, m);
    return cpu::moe_grouped_gemm(x, w, expert_offsets, activation, y);
  }
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_grouped_gemm(x, w, expert_offsets, activation, y, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
