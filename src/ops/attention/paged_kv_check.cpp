#include "ops/attention/paged_kv_check.h"

#include <string>

#include "ops/check.h"

namespace braid::ops::detail {

int64_t check_paged_kv_shapes(const char* op, const Tensor& q, const PagedKV& kv,
                              bool one_query_per_sequence) {
  check::defined(op, "q", q);
  check::defined(op, "kv.k_pages", kv.k_pages);
  check::defined(op, "kv.v_pages", kv.v_pages);
  check::defined(op, "kv.page_table", kv.page_table);
  check::defined(op, "kv.kv_lens", kv.kv_lens);

  check::dtype_in(op, "q", q, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(op, "q", q, 3);
  check::dense_last_dim(op, "q", q);
  const int64_t q_heads = q.shape[1], head_dim = q.shape[2];

  check::dtype_eq(op, "kv.k_pages", kv.k_pages, q.dtype);
  check::ndim_eq(op, "kv.k_pages", kv.k_pages, 4);
  check::dim_eq(op, "kv.k_pages", kv.k_pages, 3, head_dim, "head_dim, as in q");
  check::contiguous(op, "kv.k_pages", kv.k_pages);
  if (kv.k_pages.shape[1] == 0)
    check::fail(ErrorKind::shape, op, "kv.k_pages", "a page_size (dimension 1) > 0",
                shape_string(kv.k_pages));
  const int64_t kv_heads = kv.k_pages.shape[2];
  if (kv_heads == 0 || q_heads % kv_heads != 0)
    check::fail(ErrorKind::shape, op, "kv.k_pages",
                "a kv_heads (dimension 2) that divides q's " + std::to_string(q_heads) + " heads",
                shape_string(kv.k_pages));
  check::dtype_eq(op, "kv.v_pages", kv.v_pages, q.dtype);
  check::same_shape(op, "kv.v_pages", kv.v_pages, kv.k_pages);
  check::contiguous(op, "kv.v_pages", kv.v_pages);

  check::dtype_eq(op, "kv.page_table", kv.page_table, DType::i32);
  check::ndim_eq(op, "kv.page_table", kv.page_table, 2);
  if (one_query_per_sequence)
    check::dim_eq(op, "kv.page_table", kv.page_table, 0, q.shape[0], "batch, as q's dimension 0");
  check::contiguous(op, "kv.page_table", kv.page_table);
  const int64_t batch = kv.page_table.shape[0];
  check::dtype_eq(op, "kv.kv_lens", kv.kv_lens, DType::i32);
  check::shape_eq(op, "kv.kv_lens", kv.kv_lens, {batch});
  check::contiguous(op, "kv.kv_lens", kv.kv_lens);
  return batch;
}

int64_t check_paged_kv_cache(const char* op, const PagedKV& kv) {
  check::defined(op, "kv.k_pages", kv.k_pages);
  check::defined(op, "kv.v_pages", kv.v_pages);
  check::defined(op, "kv.page_table", kv.page_table);
  check::defined(op, "kv.kv_lens", kv.kv_lens);

  check::dtype_in(op, "kv.k_pages", kv.k_pages, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(op, "kv.k_pages", kv.k_pages, 4);
  check::contiguous(op, "kv.k_pages", kv.k_pages);
  if (kv.k_pages.shape[1] == 0)
    check::fail(ErrorKind::shape, op, "kv.k_pages", "a page_size (dimension 1) > 0",
                shape_string(kv.k_pages));
  check::dtype_eq(op, "kv.v_pages", kv.v_pages, kv.k_pages.dtype);
  check::same_shape(op, "kv.v_pages", kv.v_pages, kv.k_pages);
  check::contiguous(op, "kv.v_pages", kv.v_pages);

  check::dtype_eq(op, "kv.page_table", kv.page_table, DType::i32);
  check::ndim_eq(op, "kv.page_table", kv.page_table, 2);
  check::contiguous(op, "kv.page_table", kv.page_table);
  const int64_t batch = kv.page_table.shape[0];
  check::dtype_eq(op, "kv.kv_lens", kv.kv_lens, DType::i32);
  check::shape_eq(op, "kv.kv_lens", kv.kv_lens, {batch});
  check::contiguous(op, "kv.kv_lens", kv.kv_lens);
  return batch;
}

void check_attention_outputs(const char* op, const Tensor& q, const Tensor& out, const Tensor& lse) {
  check::defined(op, "out", out);
  check::dtype_eq(op, "out", out, q.dtype);
  check::same_shape(op, "out", out, q);
  check::dense_last_dim(op, "out", out);
  if (lse.data != nullptr || lse.ndim != 0) {  // optional
    check::defined(op, "lse", lse);
    check::dtype_eq(op, "lse", lse, DType::f32);
    check::shape_eq(op, "lse", lse, {q.shape[0], q.shape[1]});
    check::contiguous(op, "lse", lse);
  }
}

void check_paged_kv_values(const char* op, const PagedKV& kv, const std::vector<int64_t>& min_kv_len,
                           const char* min_meaning) {
  const int64_t batch = kv.page_table.shape[0], max_pages = kv.page_table.shape[1];
  const int64_t num_pages = kv.k_pages.shape[0], page_size = kv.k_pages.shape[1];
  const int64_t capacity = max_pages * page_size;
  const int32_t* kv_lens = kv.kv_lens.ptr<int32_t>();
  const int32_t* table = kv.page_table.ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t kv_len = kv_lens[b];
    if (kv_len < min_kv_len[b] || kv_len > capacity)
      check::fail(ErrorKind::invalid_argument, op, "kv.kv_lens",
                  "kv_lens[" + std::to_string(b) + "] between " + std::string(min_meaning) + (*min_meaning ? " " : "") +
                      std::to_string(min_kv_len[b]) + " and the page table's capacity " +
                      std::to_string(capacity),
                  std::to_string(kv_len));
    const int64_t used = (kv_len + page_size - 1) / page_size;
    for (int64_t p = 0; p < used; ++p) {
      const int32_t page = table[b * max_pages + p];
      if (page < 0 || page >= num_pages)
        check::fail(ErrorKind::invalid_argument, op, "kv.page_table",
                    "page ids in [0, " + std::to_string(num_pages) + ")",
                    "page_table[" + std::to_string(b) + ", " + std::to_string(p) + "] = " +
                        std::to_string(page));
    }
  }
}

}  // namespace braid::ops::detail
