#include "ops/gemm/weight_check.h"

#include <string>

#include "ops/check.h"

namespace braid::check {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int64_t weight(const char* op, const ops::Weight& w, DType act, int64_t k) {
  defined(op, "w", w.w);
  ndim_eq(op, "w", w.w, 2);
  dim_eq(op, "w", w.w, 1, k, "k, the columns of the product");
  contiguous(op, "w", w.w);
  const int64_t n = w.w.size(0);
  if (n < 1) fail(ErrorKind::shape, op, "w", "n >= 1 rows", shape_string(w.w));
  const bool has_scale = !(w.scale.ndim == 0 && w.scale.data == nullptr);
  if (!w.fp8()) {
    dtype_eq(op, "w", w.w, act);
    if (has_scale)
      fail(ErrorKind::invalid_argument, op, "w.scale", "no scale (scales belong to fp8 weights)",
           describe(w.scale));
    return n;
  }
  if (act == DType::f32 && w.w.device.is_cuda())
    fail(ErrorKind::dtype, op, "w", "16-bit activations for fp8 weights on CUDA", std::string(dtype_name(act)));
  defined(op, "w.scale", w.scale);
  dtype_eq(op, "w.scale", w.scale, DType::f32);
  ndim_eq(op, "w.scale", w.scale, 2);
  contiguous(op, "w.scale", w.scale);
  const bool blocks = w.scale.size(0) == ceil_div(n, 128) && w.scale.size(1) == ceil_div(k, 128);
  const bool per_row = w.scale.size(0) == n && w.scale.size(1) == 1;
  if (!blocks && !per_row)
    fail(ErrorKind::shape, op, "w.scale",
         "[" + std::to_string(ceil_div(n, 128)) + ", " + std::to_string(ceil_div(k, 128)) +
             "] (128 x 128 blocks) or [" + std::to_string(n) + ", 1] (per row) for w " +
             shape_string(w.w),
         shape_string(w.scale));
  return n;
}

ScaleBlocks scale_blocks(const ops::Weight& w) {
  const int64_t n = w.w.size(0), k = w.w.size(1);
  // Where both layouts fit (n == 1, k <= 128) they mean the same single scale.
  const bool blocks = w.scale.size(0) == ceil_div(n, 128) && w.scale.size(1) == ceil_div(k, 128);
  return blocks ? ScaleBlocks{128, 128} : ScaleBlocks{1, k};
}

}  // namespace braid::check
