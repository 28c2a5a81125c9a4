// Reference gemm: out[m, n] = a[m, k] @ w[n, k]^T (+ bias[n]). Inputs are read as fp32, products
// summed in fp64 (a product of two fp32 values is exact in fp64), the bias added, and the result
// rounded to out's dtype (through fp32, the GPU's accumulator type).
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/gemm/weight_check.h"

namespace braid::cpu {

// Four independent partial sums so the loop is not one long chain of dependent adds; this is the
// reference for large-ish tests, so its speed matters.
static double dot(const float* x, const float* y, int64_t k) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= k; i += 4) {
    s0 += static_cast<double>(x[i]) * y[i];
    s1 += static_cast<double>(x[i + 1]) * y[i + 1];
    s2 += static_cast<double>(x[i + 2]) * y[i + 2];
    s3 += static_cast<double>(x[i + 3]) * y[i + 3];
  }
  for (; i < k; ++i) s0 += static_cast<double>(x[i]) * y[i];
  return (s0 + s1) + (s2 + s3);
}

void gemm(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out,
          const Tensor& w_scale) {
  const int64_t m = a.size(0), k = a.size(1), n = w.size(0);
  // An fp8 w's scales: 128 x 128 blocks, or one per row ([n, 1]); a value times its scale is
  // exact in fp32 (a 4-bit significand times a 24-bit one).
  const bool scaled = w_scale.defined();
  const check::ScaleBlocks blocks = scaled ? check::scale_blocks({w, w_scale}) : check::ScaleBlocks{1, 1};
  const int64_t scale_cols = scaled ? w_scale.size(1) : 0;
  auto scale = [&](int64_t row, int64_t col) {
    return load_as_float(w_scale.data, DType::f32, row / blocks.rows * scale_cols + col / blocks.cols);
  };
  const int64_t a_stride = a.row_stride(), out_stride = out.row_stride();

  // All of a as fp32 once (m is small next to n in the shapes this serves); w one row at a time,
  // so a large w (an LM head) is never held as fp32 in full.
  std::vector<float> af(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < k; ++j) af[r * k + j] = load_as_float(a.at(r * a_stride), a.dtype, j);

  std::vector<float> wf(static_cast<size_t>(k));
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t j = 0; j < k; ++j) {
      wf[j] = load_as_float(w.data, w.dtype, c * k + j);
      if (scaled) wf[j] *= scale(c, j);
    }
    const double b = bias.defined() ? load_as_float(bias.data, bias.dtype, c) : 0.0;
    for (int64_t r = 0; r < m; ++r) {
      const double sum = dot(af.data() + r * k, wf.data(), k) + b;
      store_from_float(out.at(r * out_stride), out.dtype, c, static_cast<float>(sum));
    }
  }
}

}  // namespace braid::cpu
