// Reference softmax over the last dimension: the row maximum is subtracted before exp so large
// logits do not overflow; the sum is kept in fp64.
//
// A row whose entries are all -inf has no finite maximum: x - max is NaN and so is every output,
// as with torch.softmax. A NaN anywhere in a row makes the whole row NaN (through the sum).
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

void softmax(const Tensor& x, const Tensor& out) {
  const int64_t rows = x.rows(), d = x.size(-1);
  std::vector<float> h(static_cast<size_t>(d));
  for (int64_t r = 0; r < rows; ++r) {
    const void* xr = x.at(r * x.row_stride());
    float max = -INFINITY;
    for (int64_t j = 0; j < d; ++j) {
      h[j] = load_as_float(xr, x.dtype, j);
      if (h[j] > max) max = h[j];
    }
    double sum = 0.0;
    for (int64_t j = 0; j < d; ++j) sum += std::exp(static_cast<double>(h[j]) - max);
    void* outr = out.at(r * out.row_stride());
    for (int64_t j = 0; j < d; ++j)
      store_from_float(outr, out.dtype, j,
                       static_cast<float>(std::exp(static_cast<double>(h[j]) - max) / sum));
  }
}

}  // namespace braid::cpu
