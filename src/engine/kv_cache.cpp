#include "engine/kv_cache.h"

#include <numeric>

#include "braid/error.h"

namespace braid::engine {

KVCache::KVCache(const model::ModelConfig& c, int max_tokens_, int page_size_, Device device,
                 DType dtype, int num_seqs_)
    : page_size(page_size_), num_seqs(num_seqs_), max_tokens(max_tokens_) {
  if (page_size <= 0 || max_tokens <= 0 || num_seqs <= 0)
    throw Error(ErrorKind::invalid_argument,
                "kv cache: page size, token capacity and sequence count must be positive");
  pages_per_seq = (max_tokens + page_size - 1) / page_size;
  const int64_t pages = int64_t{num_seqs} * pages_per_seq;
  for (int l = 0; l < c.num_layers; ++l) {
    k.emplace_back(dtype, std::vector<int64_t>{pages, page_size, c.cache_heads(), c.cache_key_dim()}, device);
    // An MLA cache holds one latent row per token: keys only, v stays empty.
    v.emplace_back();
    if (c.cache_value_dim() > 0)
      v.back() = OwnedTensor(dtype, {pages, page_size, c.cache_heads(), c.cache_value_dim()}, device);
  }
  OwnedTensor table(DType::i32, {num_seqs, pages_per_seq}, Device::cpu());
  std::iota(table.view().ptr<int32_t>(), table.view().ptr<int32_t>() + pages, 0);
  page_table = OwnedTensor(DType::i32, {num_seqs, pages_per_seq}, device);
  copy(table.view(), page_table.view());
}

}  // namespace braid::engine
