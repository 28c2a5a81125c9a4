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

static RowGrid grid_of(const Tensor& t) {
  RowGrid g;
  t.row_grid(&g);  // checked by the op's entry
  return g;
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  const RowGrid xg = grid_of(x), og = grid_of(out);
  const int64_t d = x.size(-1);
  std::vector<float> h(static_cast<size_t>(d));
  for (int64_t r = 0; r < xg.rows; ++r) {
    const void* xr = x.at(xg.offset(r));
    for (int64_t j = 0; j < d; ++j) h[j] = load_as_float(xr, x.dtype, j);
    norm_row(weight, eps, x.dtype, h.data(), d, out.at(og.offset(r)));
  }
}

void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                  const Tensor& out) {
  const RowGrid xg = grid_of(x), rg = grid_of(residual), og = grid_of(out);
  const int64_t d = x.size(-1);
  std::vector<float> h(static_cast<size_t>(d));
  for (int64_t r = 0; r < xg.rows; ++r) {
    const void* xr = x.at(xg.offset(r));
    void* rr = residual.at(rg.offset(r));
    for (int64_t j = 0; j < d; ++j) {
      h[j] = quantize(x.dtype, load_as_float(xr, x.dtype, j) + load_as_float(rr, x.dtype, j));
      store_from_float(rr, x.dtype, j, h[j]);
    }
    norm_row(weight, eps, x.dtype, h.data(), d, out.at(og.offset(r)));
  }
}

}  // namespace braid::cpu
