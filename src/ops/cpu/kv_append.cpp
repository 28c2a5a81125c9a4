// Reference kv_append: copies each token's heads into its slot (values too, unless keys only).
#include <cstring>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

void kv_append(const Tensor& k, const Tensor& v, const Tensor& slots, const Tensor& k_pages,
               const Tensor& v_pages) {
  const int64_t n = k.size(0), heads = k.size(1), head_dim = k.size(2);
  const size_t row_bytes = static_cast<size_t>(head_dim) * dtype_size(k.dtype);
  const int64_t slot_elems = heads * head_dim;  // one token's K (or V) in the pages
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = slots.ptr<int32_t>()[i];
    for (int64_t h = 0; h < heads; ++h) {
      std::memcpy(k_pages.at(slot * slot_elems + h * head_dim),
                  k.at(i * k.stride(0) + h * k.stride(1)), row_bytes);
      if (v.data != nullptr)
        std::memcpy(v_pages.at(slot * slot_elems + h * head_dim),
                  v.at(i * v.stride(0) + h * v.stride(1)), row_bytes);
    }
  }
}

}  // namespace braid::cpu
