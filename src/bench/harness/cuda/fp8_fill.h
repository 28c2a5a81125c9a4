// The FP8 benchmarks' input generators on the GPU (fp8_fill.cu), behind harness/fp8_fill.h.
#pragma once

#include <cstdint>

#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::bench {

namespace fp8_fill_cuda {
// The CUDA kernels behind harness/fp8_fill.h's functions (arguments already checked there).
void fill_normal(const Tensor& t, uint64_t seed, float mean, float stddev, Stream stream);
void fill_fp8_normal(const Tensor& t, uint64_t seed, float stddev, Stream stream);
// Blocks of block_rows x 128 over `matrices` matrices of rows x cols; the scale of block (e, rb,
// cb) at scale[e * scale_matrix_stride + rb * scale_row_stride + cb * scale_col_stride].
// src == nullptr: the values are stddev * N(0, 1) drawn from `seed`.
struct BlockLayout {
  int64_t matrices, rows, cols;
  int block_rows;  // 128 (weights) or 1 (activations)
  int64_t scale_matrix_stride, scale_row_stride, scale_col_stride;
};
void quantize_blocks(const Tensor& src, const BlockLayout& layout, uint64_t seed, float stddev,
                     const Tensor& q, const Tensor& scale, Stream stream);
}  // namespace fp8_fill_cuda

}  // namespace braid::bench
