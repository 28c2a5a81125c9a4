// Argument checks shared by the ops that read a paged KV cache (attention, attention_decode,
// paged_kv_gather).
#pragma once

#include <cstdint>
#include <vector>

#include "braid/ops.h"

namespace braid::ops::detail {

// q [tokens, q_heads, head_dim] with a dense last dimension, and the cache: k/v pages of q's dtype
// and head_dim, kv_heads dividing q_heads, an i32 page table [batch, max_pages] and kv_lens
// [batch]. With one_query_per_sequence, the batch must be q's dimension 0. Returns the batch
// (the page table's rows).
int64_t check_paged_kv_shapes(const char* op, const Tensor& q, const PagedKV& kv,
                              bool one_query_per_sequence = false);

// The cache alone (no queries): k/v pages f32/f16/bf16 [num_pages, page_size > 0, kv_heads,
// head_dim], contiguous, of one dtype and shape; an i32 page table [batch, max_pages] and kv_lens
// [batch], contiguous. Returns the batch.
int64_t check_paged_kv_cache(const char* op, const PagedKV& kv);

// out [tokens, q_heads, head_dim] like q (dense last dimension), and lse either undefined or
// [tokens, q_heads] f32, contiguous.
void check_attention_outputs(const char* op, const Tensor& q, const Tensor& out, const Tensor& lse);

// On the CPU only (a CUDA kernel could not look without a host synchronisation): every kv_lens[b]
// between min_kv_len[b] (which the message calls `min_meaning`, "" for no name) and the page
// table's capacity, and every page id a sequence uses within the pool. Entries past a sequence's
// used pages may be padding.
void check_paged_kv_values(const char* op, const PagedKV& kv, const std::vector<int64_t>& min_kv_len,
                           const char* min_meaning = "its query count");

}  // namespace braid::ops::detail
