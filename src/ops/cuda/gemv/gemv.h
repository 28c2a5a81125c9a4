// GEMV / skinny GEMM for decode: out[m, n] = a[m, k] @ w[n, k]^T (+ bias[n]) for 1 <= m <= 16
// rows against f16/bf16 weights in the Hugging Face [out_features, in_features] layout. It is
// braid::cuda::gemm's fast path (cuda_gemm_lt.cpp): gemm calls gemv whenever gemv_applicable says
// it can, and cuBLASLt otherwise. The contract is ops::gemm's (include/braid/ops.h); arguments
// arrive checked by ops::gemm.
#pragma once

#include <cstdint>
#include <string>

#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::cuda {

inline constexpr int64_t kGemvMaxRows = 16;

// True when gemv can run these (already checked) gemm arguments: CUDA tensors of f16/bf16,
// 1 <= m <= 16, k a multiple of 8, a and w 16-byte aligned and a's rows 16-byte aligned (any
// row stride when m = 1). bias and out may be anything ops::gemm accepts.
bool gemv_applicable(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out);

// How one call is spread over the GPU. Every warp computes a 16-row tile of out's columns (16
// rows of w) over a slice of k; `split` warps of a block share one tile, each taking 1/split of
// k, and add their partial sums in shared memory; a block holds tiles_per_block such tiles.
struct GemvLaunch {
  int tiles_per_block = 1;
  int split = 8;  // tiles_per_block * split <= 8
};

// The launch gemv uses for an [m, k] x [n, k] product (measured on an H100: docs/perf/gemv.md).
GemvLaunch gemv_launch_for(int64_t m, int64_t n, int64_t k);
// "tiles/block 1, split 8": for reports.
std::string describe(const GemvLaunch& launch);

// Enqueues the product on `stream`: one kernel launch, no allocation, no synchronisation
// (graph-capturable). Requires gemv_applicable(a, w, bias, out).
void gemv(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out, Stream stream);
// The same with a given launch shape (benchmarks and tests). Throws braid::Error
// (invalid_argument) for a launch outside the limits above.
void gemv(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out,
          const GemvLaunch& launch, Stream stream);

// Batched (gemm_batched's path for up to 16 rows): out[:, b, :] = a[:, b, :] @ w[b]^T for every b,
// one launch with the batch as the grid's y. Applicable to checked gemm_batched arguments on CUDA
// in f16/bf16 with 1 <= m <= 16, k a multiple of 8, w[b] in rows of k (w.stride(2) == 1), and
// a, w and every row and part of them starting on 16 bytes; out as gemm_batched allows.
bool gemv_batched_applicable(const Tensor& a, const Tensor& w, const Tensor& out);
// Its launch: a block's 8 warps split a tile's k, several tiles a block when k has fewer 32-column
// steps than warps.
GemvLaunch gemv_batched_launch(int64_t k);
void gemv_batched(const Tensor& a, const Tensor& w, const Tensor& out, Stream stream);

}  // namespace braid::cuda
