// attention_mla test batches: ragged queries over a paged cache of latent rows, built on the host
// (tests/ops/attention/test_attention_mla.cpp and test_attention_mla_cuda.cpp).
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {

struct MlaSeq {
  int64_t q_len, kv_len;
};

// Random queries and per-sequence rows [latent (r) | rope key (dr)], the rows scattered into
// pages in shuffled order. Slots no sequence owns hold NaN and unused page-table entries -1, so a
// read outside a sequence shows up in the output. `spare_pages` extra page-table columns make
// the table's capacity (which sets the CUDA split count) larger than any sequence.
struct MlaBatch {
  DType dtype;
  int64_t heads, r, dr, page_size;
  std::vector<MlaSeq> seqs;
  OwnedTensor q_latent, q_rope, cache, page_table, kv_lens, cu_seqlens_q;
  std::vector<OwnedTensor> rows;  // per sequence: [kv_len, r + dr], contiguous

  int64_t total_q() const { return q_latent.view().shape[0]; }
  int64_t capacity() const { return page_table.view().shape[1] * page_size; }
};

inline MlaBatch make_mla_batch(DType dtype, int64_t heads, int64_t r, int64_t dr, int64_t page_size,
                               const std::vector<MlaSeq>& seqs, int64_t spare_pages,
                               uint64_t seed) {
  MlaBatch b{dtype, heads, r, dr, page_size, seqs, {}, {}, {}, {}, {}, {}, {}};
  const int64_t batch = static_cast<int64_t>(seqs.size()), width = r + dr;
  int64_t total_q = 0, pages_needed = 0, max_pages = 1;
  for (const MlaSeq& s : seqs) {
    total_q += s.q_len;
    const int64_t p = (s.kv_len + page_size - 1) / page_size;
    pages_needed += p;
    max_pages = std::max(max_pages, p + spare_pages);
  }
  const int64_t num_pages = pages_needed + 3;
  b.q_latent = random_host(dtype, {total_q, heads, r}, seed);
  b.q_rope = random_host(dtype, {total_q, heads, dr}, seed + 1);
  b.cache = poisoned(dtype, {num_pages, page_size, 1, width}, Device::cpu());
  b.page_table = OwnedTensor(DType::i32, {batch, max_pages}, Device::cpu());
  b.kv_lens = OwnedTensor(DType::i32, {batch}, Device::cpu());
  b.cu_seqlens_q = OwnedTensor(DType::i32, {batch + 1}, Device::cpu());

  std::vector<int32_t> free_pages(static_cast<size_t>(num_pages));
  std::iota(free_pages.begin(), free_pages.end(), 0);
  std::shuffle(free_pages.begin(), free_pages.end(), std::mt19937_64(seed + 2));
  int32_t* table = b.page_table.view().ptr<int32_t>();
  std::fill_n(table, batch * max_pages, -1);
  int32_t* cu = b.cu_seqlens_q.view().ptr<int32_t>();
  cu[0] = 0;
  for (int64_t s = 0; s < batch; ++s) {
    const MlaSeq& seq = seqs[static_cast<size_t>(s)];
    b.kv_lens.view().ptr<int32_t>()[s] = static_cast<int32_t>(seq.kv_len);
    cu[s + 1] = cu[s] + static_cast<int32_t>(seq.q_len);
    b.rows.push_back(random_host(dtype, {seq.kv_len, width}, seed + 10 + static_cast<uint64_t>(s)));
    for (int64_t j = 0; j < seq.kv_len; ++j) {
      if (j % page_size == 0) {
        table[s * max_pages + j / page_size] = free_pages.back();
        free_pages.pop_back();
      }
      const int64_t slot = table[s * max_pages + j / page_size] * page_size + j % page_size;
      for (int64_t e = 0; e < width; ++e)
        store_from_float(b.cache.data(), dtype, slot * width + e,
                         load_as_float(b.rows.back().data(), dtype, j * width + e));
    }
  }
  return b;
}

// A workspace for the batch's call, poisoned with NaN (undefined when none is needed).
inline OwnedTensor mla_workspace(const MlaBatch& b, Device device) {
  const int64_t n = ops::attention_mla_workspace_floats(b.total_q(), b.heads, b.r, b.capacity());
  if (n == 0) return OwnedTensor{};
  return poisoned(DType::f32, {n}, device);
}

}  // namespace braid::test
