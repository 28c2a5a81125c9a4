// Reference embedding lookup: row copies, with every id checked first so a bad id leaves `out`
// untouched.
#include <cstring>
#include <string>

#include "braid/error.h"
#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

static int64_t id_at(const Tensor& ids, int64_t i) {
  return ids.dtype == DType::i32 ? ids.ptr<const int32_t>()[i] : ids.ptr<const int64_t>()[i];
}

void embedding(const Tensor& ids, const Tensor& table, const Tensor& out) {
  const int64_t n = ids.size(0), vocab = table.size(0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = id_at(ids, i);
    if (id < 0 || id >= vocab)
      throw_arg_error(ErrorKind::invalid_argument, "embedding", "ids",
                      "ids in [0, " + std::to_string(vocab) + ") (the table's vocab size)",
                      "id " + std::to_string(id) + " at position " + std::to_string(i));
  }
  embedding_rows(ids, table, 0, out);  // every id checked: no zero rows
}

void embedding_rows(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out) {
  const int64_t n = ids.size(0), rows = table.size(0);
  const size_t row_bytes = static_cast<size_t>(table.size(1)) * dtype_size(table.dtype);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = id_at(ids, i) - first_id;
    if (row >= 0 && row < rows)
      std::memcpy(out.at(i * out.row_stride()), table.at(row * table.row_stride()), row_bytes);
    else
      std::memset(out.at(i * out.row_stride()), 0, row_bytes);
  }
}

}  // namespace braid::cpu
