// A paged KV cache for a fixed number of sequences: per layer, K and V pages of page_size tokens.
// Sequence s owns pages [s * pages_per_seq, (s + 1) * pages_per_seq) in order, so its position p
// lives in slot s * pages_per_seq * page_size + p. The page table is kept as a tensor so that the
// attention kernels read K/V exactly as they will once pages are shared and handed out on demand.
#pragma once

#include <vector>

#include "braid/buffer.h"
#include "model/config.h"

namespace braid::engine {

struct KVCache {
  KVCache(const model::ModelConfig& config, int max_tokens, int page_size, Device device,
          DType dtype, int num_seqs = 1);

  int page_size = 0;
  int num_seqs = 1;
  int pages_per_seq = 0;
  int max_tokens = 0;  // per sequence, as asked for; its pages may hold a few more
  int capacity() const { return max_tokens; }
  int64_t slot(int seq, int position) const {
    return (static_cast<int64_t>(seq) * pages_per_seq) * page_size + position;
  }
  // Per layer: [num_seqs * pages_per_seq, page_size, heads, dim] (ModelConfig::cache_heads and
  // cache_key_dim / cache_value_dim); v empty (undefined views) for an MLA latent cache.
  std::vector<OwnedTensor> k, v;
  OwnedTensor page_table;         // [num_seqs, pages_per_seq] i32 on the device
};

}  // namespace braid::engine
