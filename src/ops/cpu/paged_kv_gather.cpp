// Reference paged_kv_gather: each sequence's tokens copied, one at a time, out of their pages.
#include <cstring>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

void paged_kv_gather(const ops::PagedKV& kv, const Tensor& cu_seqlens_kv, const Tensor& k_out,
                     const Tensor& v_out) {
  const int64_t batch = kv.page_table.shape[0], max_pages = kv.page_table.shape[1];
  const int64_t page_size = kv.k_pages.shape[1];
  const int64_t token_elems = kv.k_pages.shape[2] * kv.k_pages.shape[3];  // one token's K (or V)
  const size_t token_bytes = static_cast<size_t>(token_elems) * dtype_size(kv.k_pages.dtype);
  const int32_t* table = kv.page_table.ptr<int32_t>();
  const int32_t* lens = kv.kv_lens.ptr<int32_t>();
  const int32_t* cu = cu_seqlens_kv.ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < lens[b]; ++t) {
      const int64_t slot = int64_t{table[b * max_pages + t / page_size]} * page_size + t % page_size;
      const int64_t row = cu[b] + t;
      std::memcpy(k_out.at(row * token_elems), kv.k_pages.at(slot * token_elems), token_bytes);
      std::memcpy(v_out.at(row * token_elems), kv.v_pages.at(slot * token_elems), token_bytes);
    }
}

}  // namespace braid::cpu
