// Does compute-sanitizer's racecheck follow an mbarrier ring's ordering? gemv_chain's consumers
// read a shared-memory slot, then release it on the slot's "empty" mbarrier, and the producer
// thread refills the slot only after that phase completes. With one arrival per warp (lane 0's,
// after __syncwarp) racecheck reported those reads against the refill; this probe, the ring alone
// in variants, said why (docs/perf/sanitizer.md: racecheck follows each thread's own arrival, not
// __syncwarp, in either proxy), and the chain now has every lane arrive. The variants:
//   bulk-lane0   the chain's first protocol: cp.async.bulk refills, proxy fence, lane 0 arrives
//   bulk-all     the same, every lane arrives (the barrier counts 32 a warp): the chain now
//   plain-lane0  the producer refills with ordinary loads and stores (generic proxy), lane 0
//   arrives plain-all    the same, every lane arrives racy         plain-all with the arrival
//   before the reads: a real race (the positive control)
// Each prints the checksum of what the consumers read against the host's, and is run as
//   nvcc -O2 -arch=sm_90a -I src -o probe tools/device/racecheck_ring_probe.cu
//   compute-sanitizer --tool racecheck ./probe bulk-lane0
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ops/cuda/hopper.cuh"  // the chain's own mbarrier and bulk-copy calls

namespace {

using namespace braid::cuda::hopper;

constexpr int kWarps = 8;         // consumers
constexpr int kSlots = 4;         // the ring
constexpr int kSlotBytes = 4096;  // a slot: each consumer warp reads its 512 bytes of it
constexpr int kPieces = 64;       // pieces each block streams through the ring

enum Variant { kBulkLane0, kBulkAll, kPlainLane0, kPlainAll, kRacy };

__global__ void __launch_bounds__(32 * (kWarps + 1))
    ring_kernel(const uint4* src, unsigned long long* sum, int variant) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t full[kSlots], empty[kSlots];
  const bool bulk = variant == kBulkLane0 || variant == kBulkAll;
  const bool all_lanes = variant == kBulkAll || variant == kPlainAll || variant == kRacy;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kSlots; ++i) {
      mbar_init(smem_u32(&full[i]), 1);
      mbar_init(smem_u32(&empty[i]), all_lanes ? 32 * kWarps : kWarps);
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  const uint4* block_src = src + static_cast<size_t>(blockIdx.x) * kPieces * (kSlotBytes / 16);
  if (warp == kWarps) {  // the producer warp: one thread
    if (lane != 0) return;
    for (int p = 0; p < kPieces; ++p) {
      const int slot = p % kSlots;
      const uint32_t parity = (p / kSlots) & 1;
      mbar_wait(smem_u32(&empty[slot]), parity ^ 1);
      const uint4* from = block_src + static_cast<size_t>(p) * (kSlotBytes / 16);
      unsigned char* to = smem + slot * kSlotBytes;
      if (bulk) {
        mbar_arrive_expect_tx(smem_u32(&full[slot]), kSlotBytes);
        bulk_copy(smem_u32(to), from, kSlotBytes, smem_u32(&full[slot]));
      } else {
        for (int i = 0; i < kSlotBytes / 16; ++i) reinterpret_cast<uint4*>(to)[i] = from[i];
        mbar_arrive(smem_u32(&full[slot]));  // release: the stores above before the arrival
      }
    }
    return;
  }
  unsigned long long acc = 0;
  for (int p = 0; p < kPieces; ++p) {
    const int slot = p % kSlots;
    mbar_wait(smem_u32(&full[slot]), (p / kSlots) & 1);
    const uint32_t* words =
        reinterpret_cast<const uint32_t*>(smem + slot * kSlotBytes + warp * 512);
    if (variant == kRacy) mbar_arrive(smem_u32(&empty[slot]));  // too early: the slot may refill
    uint32_t piece = 0;
    for (int i = lane; i < 128; i += 32) piece += words[i];
    acc += piece;
    if (bulk) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    if (variant == kRacy) continue;
    if (all_lanes) {
      mbar_arrive(smem_u32(&empty[slot]));
    } else {
      __syncwarp();
      if (lane == 0) mbar_arrive(smem_u32(&empty[slot]));
    }
  }
  atomicAdd(sum, acc);
}

}  // namespace

int main(int argc, char** argv) {
  const char* names[] = {"bulk-lane0", "bulk-all", "plain-lane0", "plain-all", "racy"};
  int variant = -1;
  for (int i = 0; i < 5; ++i)
    if (argc > 1 && std::strcmp(argv[1], names[i]) == 0) variant = i;
  if (variant < 0) {
    std::fprintf(stderr, "usage: %s bulk-lane0|bulk-all|plain-lane0|plain-all|racy\n", argv[0]);
    return 2;
  }
  const int blocks = 4;
  const size_t words = static_cast<size_t>(blocks) * kPieces * kSlotBytes / 4;
  std::vector<uint32_t> host(words);
  unsigned long long expect = 0;
  for (size_t i = 0; i < words; ++i) {
    host[i] = static_cast<uint32_t>(i * 2654435761u) >> 8;
    expect += host[i];
  }
  void* src = nullptr;
  unsigned long long* sum = nullptr;
  cudaMalloc(&src, words * 4);
  cudaMalloc(&sum, sizeof(*sum));
  cudaMemcpy(src, host.data(), words * 4, cudaMemcpyHostToDevice);
  cudaMemset(sum, 0, sizeof(*sum));
  cudaFuncSetAttribute(ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       kSlots * kSlotBytes);
  ring_kernel<<<blocks, 32 * (kWarps + 1), kSlots * kSlotBytes>>>(static_cast<const uint4*>(src),
                                                                  sum, variant);
  const cudaError_t err = cudaDeviceSynchronize();
  unsigned long long got = 0;
  cudaMemcpy(&got, sum, sizeof(got), cudaMemcpyDeviceToHost);
  std::printf("%s: %s, checksum %s (%llu, expected %llu)\n", names[variant],
              cudaGetErrorString(err), got == expect ? "matches" : "DIFFERS", got, expect);
  return err == cudaSuccess && got == expect ? 0 : 1;
}
