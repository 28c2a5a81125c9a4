// The ring of shared-memory buffers of the grouped GEMM kernels (grouped_gemm_sm90.cuh,
// grouped_gemm_fp8_sm90.cuh): the producer's TMA copies fill a buffer and complete its `full`
// barrier; the consumer warps arrive on its `empty` barrier once they have read it. Slices (one
// K step of one tile) are numbered across all of a block's tiles: slice i sits in buffer
// i % kStages and is filled in that buffer's phase (i / kStages) % 2.
#pragma once

#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/hopper.cuh"

namespace braid::cuda::moe_ring {

template <int kStages, uint32_t kStageBytes>
struct SliceRing {
  uint32_t base;  // shared address of buffer 0, 1024-aligned (the 128-byte swizzle's period)
  uint64_t* full_bar;
  uint64_t* empty_bar;

  __device__ uint32_t buffer(int slice) const { return base + (slice % kStages) * kStageBytes; }
  __device__ uint32_t full(int slice) const { return smem_addr(&full_bar[slice % kStages]); }
  __device__ uint32_t empty(int slice) const { return smem_addr(&empty_bar[slice % kStages]); }
  __device__ static uint32_t parity(int slice) { return static_cast<uint32_t>((slice / kStages) & 1); }

  // By one thread, before the block's __syncthreads: one arrival (the producer's, with the
  // bytes) completes a full barrier, one per consumer warp an empty one.
  __device__ void init(int consumer_warps) const {
    for (int i = 0; i < kStages; ++i) {
      hopper::mbar_init(full(i), 1);
      hopper::mbar_init(empty(i), consumer_warps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to TMA
  }
};

}  // namespace braid::cuda::moe_ring
