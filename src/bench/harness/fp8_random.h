// The arithmetic the FP8 benchmarks' input generators share between the host and the device: a
// counter-based normal generator (a pure function of seed and element index, so every tensor is
// reproducible and needs no generator state) and the block-scale rule. Plain C++ with
// __host__ __device__ under nvcc; no CUDA headers.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define BRAID_BENCH_HD __host__ __device__ __forceinline__
#else
#define BRAID_BENCH_HD inline
#endif

namespace braid::bench::fp8rand {

BRAID_BENCH_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Standard normal by Box-Muller from 2 x 24 random bits of one hash: u1 in (0, 1) (never 0, so
// the log is finite), u2 in [0, 1). Host and device libm may differ in the last bit; the values
// are random data, never compared across devices.
BRAID_BENCH_HD float normal(uint64_t seed, uint64_t index) {
  const uint64_t h = splitmix64(seed ^ splitmix64(index));
  const float u1 = (static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
  const float u2 = static_cast<float>((h >> 16) & 0xffffffull) * (1.0f / 16777216.0f);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795865f * u2);
}

// e4m3's largest finite value: a block's scale maps its largest magnitude onto it.
inline constexpr float kE4m3Max = 448.0f;

// The scale of a block whose largest magnitude is amax: amax / 448, and 1 for an all-zero block
// (as moe_fp8_quantize's contract states it), so that q = v / s is always finite.
BRAID_BENCH_HD float block_scale(float amax) { return amax > 0.0f ? amax / kE4m3Max : 1.0f; }

}  // namespace braid::bench::fp8rand
