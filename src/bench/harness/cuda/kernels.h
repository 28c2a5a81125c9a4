// Small device kernels the benchmarks need around the work they time: random fills and a plain
// copy. Declared without CUDA headers (code outside cuda/ reaches them through BRAID_CUDA_ONLY).
#pragma once

#include <cstddef>
#include <cstdint>

#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::bench {

// Fills a contiguous f32/f16/bf16 CUDA tensor with values uniform in [lo, hi] (rounded to the
// dtype), a pure function of (seed, element index): the same seed gives the same tensor.
void fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi, Stream stream);

// The grid-stride copy kernel of the copy ceiling: 16 bytes per thread per step. `bytes` must be
// a multiple of 16 and both pointers 16-byte aligned (throws braid::Error otherwise).
// `blocks` = 0 picks enough blocks of 256 threads to fill every SM (copy_kernel_blocks()).
void copy_kernel(const void* src, void* dst, size_t bytes, int blocks, Stream stream);
int copy_kernel_blocks();

// Fixed-cost probes (seed 000): an empty kernel, and one thread that reads one int and writes
// one int (out[0] = in[0] + 1). Both <<<1, 1>>>.
void launch_empty_kernel(Stream stream);
void launch_minimal_rw_kernel(const int* in, int* out, Stream stream);

}  // namespace braid::bench
