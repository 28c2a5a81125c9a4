// Host side of the tensor-core FlashAttention kernel (flash_prefill.cuh): one launcher per
// head_dim, each compiled in its own .cu (flash_prefill_d64.cu, flash_prefill_d128.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "braid/dtype.h"

namespace braid::cuda::flash {

constexpr int kBlockN = 64;  // keys per tile (a block's query rows: 16 per warp)

struct Params {
  const void* q;
  const void* k;  // contiguous: [rows, kv_heads, D]; paged: k_pages [pages, page_size, kv_heads, D]
  const void* v;
  void* out;
  float* lse;  // [total_q, q_heads] or null
  int64_t q_row_stride, k_row_stride, v_row_stride, o_row_stride;  // elements per token row
  int64_t q_rows, kv_rows;  // contiguous: rows of q and of k/v (the TMA maps' bounds)
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_kv;  // contiguous K/V: row offsets per sequence
  const int32_t* page_table;     // paged K/V: [batch, max_pages]
  const int32_t* kv_lens;        // paged K/V: [batch]
  int max_pages, page_size;
  int q_heads, kv_heads;
  float scale_log2;  // softmax_scale * log2(e), > 0
  bool causal;
};

// Launches (query tiles, q_heads, batch) blocks; max_q bounds the longest q_len. Throws
// ErrorKind::unsupported past the grid's limits (65535 sequences or heads).
template <int D>
void launch(const Params& p, DType dtype, bool paged, int64_t batch, int64_t max_q,
            cudaStream_t stream);

}  // namespace braid::cuda::flash
