// Hopper warpgroup MMA (wgmma) around the generated instruction wrappers (wgmma_ops.cuh): shared-
// memory descriptors for the 128-byte-swizzled K-major tiles that TMA writes, and the fence /
// commit / wait protocol of the asynchronous products. Compiles only for sm_90a; callers guard with
// __CUDA_ARCH_FEAT_SM90_ALL.
#pragma once

#include <cstdint>

#include "ops/cuda/wgmma_ops.cuh"

namespace braid::cuda {

// A wgmma shared-memory descriptor, 128-byte swizzle; lbo/sbo in bytes.
__device__ __forceinline__ uint64_t descriptor(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t{(addr >> 4) & 0x3fffu}) | (uint64_t{(lbo >> 4) & 0x3fffu} << 16) |
         (uint64_t{(sbo >> 4) & 0x3fffu} << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N of this warpgroup's committed wgmma groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void wgmma_wait_all() { wgmma_wait<0>(); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Pins accumulator registers at this point of the program: the compiler sees wgmma's outputs as
// ready when its asm statement ends, not at the wait, so without this it may read or write them
// while the asynchronous product is still in flight.
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

}  // namespace braid::cuda
