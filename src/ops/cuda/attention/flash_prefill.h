// Host side of the tensor-core FlashAttention kernel (flash_prefill.cuh): one launcher per
// head_dim, each compiled in its own .cu (flash_prefill_d64.cu, flash_prefill_d128.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "braid/dtype.h"

namespace braid::cuda::flash {

constexpr int kBlockM = 64;  // query rows per block
constexpr int kBlockN = 64;  // keys per tile
constexpr int kWarps = 4;    // 16 query rows each
constexpr int kThreads = kWarps * 32;

struct Params {
  const void* q;
  const void* k;  // contiguous: [rows, kv_heads, D]; paged: k_pages [pages, page_size, kv_heads, D]
  const void* v;
  void* out;
  float* lse;  // [total_q, q_heads] or null
  int64_t q_row_stride, k_row_stride, v_row_stride, o_row_stride;  // elements per token row
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_kv;  // contiguous K/V: row offsets per sequence
  const int32_t* page_table;     // paged K/V: [batch, max_pages]
  const int32_t* kv_lens;        // paged K/V: [batch]
  int max_pages, page_size;
  int q_heads, kv_heads;
  float scale_log2;  // softmax_scale * log2(e)
  bool causal;
};

// Grid: (q_heads, batch, m_blocks); m_blocks * 64 must cover the longest q_len.
template <int D>
void launch(const Params& p, DType dtype, bool paged, int batch, int m_blocks, cudaStream_t stream);

}  // namespace braid::cuda::flash
