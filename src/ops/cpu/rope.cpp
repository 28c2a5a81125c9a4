// Reference rotary position embedding (half-split or interleaved pairs, see ops.h), in fp32.
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

// Rotates the first 2*half elements of every head of token `tok` of x ([n, heads, head_dim]):
// pairs (i, i + half), or (2i, 2i + 1) when interleaved.
static void rotate_heads(const Tensor& x, int64_t tok, const std::vector<float>& cos_f,
                         const std::vector<float>& sin_f, int half, bool interleaved) {
  for (int64_t h = 0; h < x.shape[1]; ++h) {
    void* v = x.at(tok * x.strides[0] + h * x.strides[1]);
    for (int i = 0; i < half; ++i) {
      const int i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
      const float x1 = load_as_float(v, x.dtype, i1);
      const float x2 = load_as_float(v, x.dtype, i2);
      store_from_float(v, x.dtype, i1, x1 * cos_f[i] - x2 * sin_f[i]);
      store_from_float(v, x.dtype, i2, x2 * cos_f[i] + x1 * sin_f[i]);
    }
  }
}

void rope_apply(const Tensor& q, const Tensor& k, const Tensor& positions,
                const ops::RopeTable& table) {
  const int half = table.half;
  std::vector<float> cos_f(static_cast<size_t>(half)), sin_f(static_cast<size_t>(half));
  for (int64_t tok = 0; tok < q.shape[0]; ++tok) {
    const int64_t pos = positions.dtype == DType::i64 ? positions.ptr<int64_t>()[tok]
                                                      : positions.ptr<int32_t>()[tok];
    for (int i = 0; i < half; ++i) {
      // A float product, as transformers multiplies positions by inv_freq in fp32.
      const float angle = static_cast<float>(pos) * table.inv_freq[i];
      cos_f[i] = std::cos(angle) * table.attention_scaling;
      sin_f[i] = std::sin(angle) * table.attention_scaling;
    }
    rotate_heads(q, tok, cos_f, sin_f, half, table.interleaved);
    if (k.ndim == 3) rotate_heads(k, tok, cos_f, sin_f, half, table.interleaved);
  }
}

}  // namespace braid::cpu
