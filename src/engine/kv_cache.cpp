#include "engine/kv_cache.h"

#include <numeric>

#include "braid/error.h"

namespace braid::engine {

KVCache::KVCache(const model::ModelConfig& c, int max_tokens_, int page_size_, Device device,
                 DType dtype)
    : page_size(page_size_), max_tokens(max_tokens_) {
  if (page_size <= 0 || max_tokens <= 0)
    throw Error(ErrorKind::invalid_argument, "kv cache: page size and token capacity must be positive");
  num_pages = (max_tokens + page_size - 1) / page_size;
  for (int l = 0; l < c.num_layers; ++l) {
    k.emplace_back(dtype, std::vector<int64_t>{num_pages, page_size, c.num_kv_heads, c.head_dim}, device);
    v.emplace_back(dtype, std::vector<int64_t>{num_pages, page_size, c.num_kv_heads, c.head_dim}, device);
  }
  OwnedTensor table(DType::i32, {1, num_pages}, Device::cpu());
  std::iota(table.view().ptr<int32_t>(), table.view().ptr<int32_t>() + num_pages, 0);
  page_table = OwnedTensor(DType::i32, {1, num_pages}, device);
  copy(table.view(), page_table.view());
}

}  // namespace braid::engine
