// A decode batch for the attention_decode tests: one query per sequence over a paged cache whose
// pages are shuffled and whose unowned slots are NaN poison.
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {

// A decode batch in the op's layout, on the host: one query per sequence. Each sequence's pages
// come from a shuffled pool; every slot no sequence owns holds NaN and unused page-table entries
// hold -1, so a read outside a sequence shows up in the output. `spare_pages` extra page-table
// columns make the table's capacity (which sets the split count) larger than any sequence.
struct DecodeBatch {
  OwnedTensor q, k_pages, v_pages, page_table, kv_lens;
  ops::PagedKV paged() const { return {k_pages, v_pages, page_table, kv_lens}; }
  int64_t capacity() const { return page_table.view().shape[1] * k_pages.view().shape[1]; }
};

inline DecodeBatch make_batch(DType dtype, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                       int64_t page_size, const std::vector<int32_t>& lens, int64_t spare_pages,
                       uint64_t seed) {
  DecodeBatch d;
  const int64_t batch = static_cast<int64_t>(lens.size());
  int64_t pages_needed = 0, max_pages = 1;
  for (int32_t len : lens) {
    const int64_t p = (len + page_size - 1) / page_size;
    pages_needed += p;
    max_pages = std::max(max_pages, p + spare_pages);
  }
  const int64_t num_pages = pages_needed + 2;
  d.q = random_host(dtype, {batch, q_heads, head_dim}, seed);
  d.k_pages = random_host(dtype, {num_pages, page_size, kv_heads, head_dim}, seed + 1);
  d.v_pages = random_host(dtype, {num_pages, page_size, kv_heads, head_dim}, seed + 2);
  d.page_table = OwnedTensor(DType::i32, {batch, max_pages}, Device::cpu());
  d.kv_lens = OwnedTensor(DType::i32, {batch}, Device::cpu());

  std::vector<int32_t> pool(static_cast<size_t>(num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937_64(seed + 3));
  std::vector<bool> owned(static_cast<size_t>(num_pages * page_size), false);
  int32_t* table = d.page_table.view().ptr<int32_t>();
  std::fill_n(table, batch * max_pages, -1);
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t len = lens[static_cast<size_t>(b)];
    d.kv_lens.view().ptr<int32_t>()[b] = len;
    for (int64_t j = 0; j < len; ++j) {
      if (j % page_size == 0) {
        table[b * max_pages + j / page_size] = pool.back();
        pool.pop_back();
      }
      owned[static_cast<size_t>(table[b * max_pages + j / page_size] * page_size + j % page_size)] = true;
    }
  }
  const int64_t token_elems = kv_heads * head_dim;
  for (int64_t slot = 0; slot < num_pages * page_size; ++slot) {
    if (owned[static_cast<size_t>(slot)]) continue;
    for (int64_t e = 0; e < token_elems; ++e) {
      store_from_float(d.k_pages.data(), dtype, slot * token_elems + e, NAN);
      store_from_float(d.v_pages.data(), dtype, slot * token_elems + e, NAN);
    }
  }
  return d;
}

struct DeviceBatch {
  OwnedTensor q, k_pages, v_pages, page_table, kv_lens;
  ops::PagedKV paged() const { return {k_pages, v_pages, page_table, kv_lens}; }
};

inline DeviceBatch to_cuda(const DecodeBatch& b) {
  const Device d = Device::cuda();
  return {to_device(b.q, d), to_device(b.k_pages, d), to_device(b.v_pages, d),
          to_device(b.page_table, d), to_device(b.kv_lens, d)};
}

inline OwnedTensor workspace_for(const DecodeBatch& b, Device device) {
  const auto& q = b.q.view();
  return poisoned(DType::f32,
                  {ops::attention_decode_workspace_floats(q.shape[0], q.shape[1], q.shape[2],
                                                          b.capacity())},
                  device);
}

}  // namespace braid::test
