// Reference RMSNorm with Hugging Face's rounding points (see ops.h).
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

static void norm_row(const Tensor& weight, float eps, DType t, const float* h, int64_t d,
                     void* out_row) {
  double sum_sq = 0.0;
  for (int64_t j = 0; j < d; ++j) sum_sq += static_cast<double>(h[j]) * h[j];
  const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(d) + eps));
  for (int64_t j = 0; j < d; ++j) {
    float n = quantize(t, h[j] * inv_rms);
    store_from_float(out_row, t, j, load_as_float(weight.data, t, j) * n);
  }
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  const int64_t rows = x.rows(), d = x.size(-1);
  std::vector<float> h(static_cast<size_t>(d));
  for (int64_t r = 0; r < rows; ++r) {
    const void* xr = x.at(r * x.row_stride());
    for (int64_t j = 0; j < d; ++j) h[j] = load_as_float(xr, x.dtype, j);
    norm_row(weight, eps, x.dtype, h.data(), d, out.at(r * out.row_stride()));
  }
}

void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                  const Tensor& out) {
  const int64_t rows = x.rows(), d = x.size(-1);
  std::vector<float> h(static_cast<size_t>(d));
  for (int64_t r = 0; r < rows; ++r) {
    const void* xr = x.at(r * x.row_stride());
    void* rr = residual.at(r * residual.row_stride());
    for (int64_t j = 0; j < d; ++j) {
      h[j] = quantize(x.dtype, load_as_float(xr, x.dtype, j) + load_as_float(rr, x.dtype, j));
      store_from_float(rr, x.dtype, j, h[j]);
    }
    norm_row(weight, eps, x.dtype, h.data(), d, out.at(r * out.row_stride()));
  }
}

}  // namespace braid::cpu
