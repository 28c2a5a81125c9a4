// Reference argmax over the last dimension, with torch.argmax's order: NaN above every number,
// and among equal values (or several NaNs) the lowest index.
#include <cmath>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

// Whether x[j] beats the current best x[best], given j > best: only a strictly larger value,
// or a first NaN, does.
static bool beats(float candidate, float best) {
  if (std::isnan(best)) return false;
  return std::isnan(candidate) || candidate > best;
}

void argmax(const Tensor& x, const Tensor& out) {
  const int64_t rows = x.rows(), d = x.size(-1);
  for (int64_t r = 0; r < rows; ++r) {
    const void* xr = x.at(r * x.row_stride());
    int64_t best = 0;
    float best_value = load_as_float(xr, x.dtype, 0);
    for (int64_t j = 1; j < d; ++j) {
      const float v = load_as_float(xr, x.dtype, j);
      if (beats(v, best_value)) {
        best = j;
        best_value = v;
      }
    }
    if (out.dtype == DType::i32) out.ptr<int32_t>()[r] = static_cast<int32_t>(best);
    else out.ptr<int64_t>()[r] = best;
  }
}

}  // namespace braid::cpu
