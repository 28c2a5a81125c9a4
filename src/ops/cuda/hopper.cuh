// Hopper (sm_90a) building blocks for warp-specialised kernels, as inline PTX:
//   mbarriers   - a transaction barrier in shared memory: arrivals plus a byte count that TMA copies
//                 decrement as they land; waiters spin on the parity of the phase they expect;
//   TMA         - cp.async.bulk.tensor: one thread copies a box of a tensor (described by a
//                 CUtensorMap built on the host, tma_map.h) into shared memory, swizzled, and signals
//                 an mbarrier when the bytes have arrived; rows past the tensor's end read as zero;
//   named barriers (bar.sync / bar.arrive with an id and a thread count), for sub-block handshakes;
//   setmaxnreg  - moves registers from a producer warpgroup to the consumer warpgroups.
// Everything here compiles only for sm_90a; callers guard with __CUDA_ARCH_FEAT_SM90_ALL.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace braid::cuda::hopper {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

// One arrival that also announces `bytes` of TMA traffic the phase must wait for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Returns once the phase of parity `parity` has completed. A fresh barrier is in phase 0, so
// waiting on parity 1 returns at once (a producer's first pass over free buffers).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Makes barriers just initialised visible to the async proxy (the bulk copies that complete on
// them); mbar_init's thread runs it before the block's barrier that publishes them.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// `bytes` (a multiple of 16, 16-byte aligned both ends) from global memory into shared memory,
// completing on mbarrier `bar`, whose expected byte count must include them.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// A grid-wide counter read with acquire semantics (what other blocks released before their
// arrival is visible after it).
__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// A grid-wide counter not reached after this many clock cycles (~10 s) means a block of the grid
// never became resident: spin_until traps with an error rather than hang the GPU.
constexpr long long kGridSpinLimitCycles = 20'000'000'000LL;

// One thread spins until *counter >= target (acquire), or traps past kGridSpinLimitCycles.
__device__ __forceinline__ void spin_until(const unsigned int* counter, unsigned int target) {
  const long long start = clock64();
  while (load_acquire(counter) < target)
    if (clock64() - start > kGridSpinLimitCycles) __trap();
}

// A 3-D box of `map` at coordinates (c0 innermost, c1, c2) into shared memory at dst; completes
// on mbarrier `bar` (whose expected byte count must include the box).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                            int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Per-thread register budget of the calling warpgroup (all its threads must execute it).
template <int kRegs>
__device__ __forceinline__ void set_max_registers_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void set_max_registers_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace braid::cuda::hopper
