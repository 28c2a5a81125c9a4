// gemm_batched: argument checks and dispatch. The CPU reference is gemm's, one batch at a time.
#include <string>

#include "braid/buffer.h"
#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

// The bytes a strided [m, batch, cols] view spans, as [first, last) byte offsets from its data.
std::pair<const char*, const char*> extent(const Tensor& t) {
  int64_t last = 0;
  for (int d = 0; d < t.ndim; ++d) last += (t.shape[d] - 1) * t.strides[d];
  const auto* p = static_cast<const char*>(t.data);
  return {p, p + (last + 1) * static_cast<int64_t>(dtype_size(t.dtype))};
}

}  // namespace

void gemm_batched(const Tensor& a, const Tensor& w, const Tensor& out, Stream stream) {
  const char* op = "gemm_batched";
  check::defined(op, "a", a);
  check::defined(op, "w", w);
  check::defined(op, "out", out);
  check::dtype_in(op, "a", a, {DType::f32, DType::f16, DType::bf16});
  if (a.dtype == DType::f32 && a.device.is_cuda())
    check::fail(ErrorKind::dtype, op, "a", "dtype f16 or bf16 on CUDA (f32 is CPU-only)",
                describe(a));
  check::dtype_eq(op, "w", w, a.dtype);
  check::dtype_eq(op, "out", out, a.dtype);
  check::ndim_eq(op, "a", a, 3);
  check::dense_last_dim(op, "a", a);
  const int64_t m = a.size(0), batch = a.size(1), k = a.size(2);
  if (k < 1) check::fail(ErrorKind::shape, op, "a", "k >= 1 columns", shape_string(a));
  check::ndim_eq(op, "w", w, 3);
  check::dim_eq(op, "w", w, 0, batch, "a.size(1) (the batch)");
  check::dim_eq(op, "w", w, 2, k, "a.size(2) (k)");
  const int64_t n = w.size(1);
  // Each w[b]: rows of k (stride 1 along k) or columns of n (stride 1 along n).
  const bool w_rows = w.stride(2) == 1 || k == 1, w_cols = w.stride(1) == 1 || n == 1;
  if (!w_rows && !w_cols)
    check::fail(ErrorKind::shape, op, "w", "matrices with a stride of 1 along n or k",
                "strides [" + std::to_string(w.stride(0)) + ", " + std::to_string(w.stride(1)) +
                    ", " + std::to_string(w.stride(2)) + "]");
  if ((w_rows && n > 1 && w.stride(1) < k) || (!w_rows && k > 1 && w.stride(2) < n))
    check::fail(ErrorKind::shape, op, "w", "matrices whose rows (or columns) do not overlap",
                "strides [" + std::to_string(w.stride(0)) + ", " + std::to_string(w.stride(1)) +
                    ", " + std::to_string(w.stride(2)) + "] for shape " + shape_string(w));
  check::shape_eq(op, "out", out, {m, batch, n});
  check::dense_last_dim(op, "out", out);
  Device dev = check::same_device(op, {{"a", &a}, {"w", &w}, {"out", &out}});
  constexpr int64_t kIntMax = 2147483647;  // cuBLAS takes sizes, strides and the count as int
  for (int64_t v : {m, batch, k, n, a.stride(0), out.stride(0), w.stride(1), w.stride(2)})
    if (v > kIntMax)
      check::fail(ErrorKind::shape, op, "a", "sizes and row strides below 2^31",
                  shape_string(a) + " -> " + shape_string(out));
  if (m == 0 || batch == 0 || n == 0) return;
  const auto [a0, a1] = extent(a);
  const auto [o0, o1] = extent(out);
  if (a0 < o1 && o0 < a1)
    check::fail(ErrorKind::invalid_argument, op, "out", "memory apart from a", "an overlapping view");
  if (dev.is_cpu()) {
    // gemm's reference on each batch, its w[b] copied to a row-major [n, k] first.
    OwnedTensor wb(w.dtype, {n, k}, dev);
    for (int64_t b = 0; b < batch; ++b) {
      const Tensor src = w.select(0, b);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < k; ++j)
          store_from_float(wb.data(), w.dtype, i * k + j,
                           load_as_float(src.data, w.dtype, i * src.stride(0) + j * src.stride(1)));
      cpu::gemm(a.select(1, b), wb.view(), Tensor{}, out.select(1, b), Tensor{});
    }
    return;
  }
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::gemm_batched(a, w, out, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
