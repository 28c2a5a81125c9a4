// The paged KV cache of one sequence: per layer, K and V pages of page_size tokens each.
// The page table is the identity (page i holds positions [i * page_size, (i + 1) * page_size)),
// kept as a tensor so that the attention kernels read K/V exactly as they will once several
// sequences share the pages.
#pragma once

#include <vector>

#include "braid/buffer.h"
#include "model/config.h"

namespace braid::engine {

struct KVCache {
  KVCache(const model::ModelConfig& config, int max_tokens, int page_size, Device device,
          DType dtype);

  int page_size = 0;
  int num_pages = 0;
  int max_tokens = 0;  // what was asked for; the pages may hold a few more
  int capacity() const { return max_tokens; }
  std::vector<OwnedTensor> k, v;  // per layer: [num_pages, page_size, kv_heads, head_dim]
  OwnedTensor page_table;         // [1, num_pages] i32 on the device
};

}  // namespace braid::engine
