// Reference SwiGLU: silu(gate) * up in fp32, rounded once to the output dtype.
#include <cmath>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

void silu_mul(const Tensor& x, const Tensor& out) {
  const int64_t rows = x.rows(), d = out.size(-1);
  const DType t = x.dtype;
  for (int64_t r = 0; r < rows; ++r) {
    const void* xr = x.at(r * x.row_stride());
    void* outr = out.at(r * out.row_stride());
    for (int64_t j = 0; j < d; ++j) {
      const float g = load_as_float(xr, t, j);
      const float u = load_as_float(xr, t, d + j);
      const float silu = g / (1.0f + std::exp(-g));
      store_from_float(outr, t, j, silu * u);
    }
  }
}

}  // namespace braid::cpu
