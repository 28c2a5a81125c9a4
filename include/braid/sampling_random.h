// The random draw of token sampling, counter-based: the draw for a sequence's output position
// `step` is a pure function of (seed, step). The serving engine's host sampler, the CPU reference
// of ops::sample_tokens and its CUDA kernel all take their draw from here, so a seeded request
// gets the same bits on every device, whatever else shares its batch and after a preemption.
// Plain C++ (__host__ __device__ under nvcc); no CUDA headers.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BRAID_SAMPLING_HD __host__ __device__ __forceinline__
#else
#define BRAID_SAMPLING_HD inline
#endif

namespace braid::sampling {

BRAID_SAMPLING_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// 53 uniform random bits, in [0, 2^53), from (seed, step) alone.
BRAID_SAMPLING_HD uint64_t uniform_bits53(uint64_t seed, uint64_t step) {
  return splitmix64(seed ^ splitmix64(step + 0x632be59bd9b4e019ull)) >> 11;
}

// The same draw as a double in [0, 1): uniform_bits53 / 2^53 (exact).
BRAID_SAMPLING_HD double uniform(uint64_t seed, uint64_t step) {
  return static_cast<double>(uniform_bits53(seed, step)) * 0x1.0p-53;
}

}  // namespace braid::sampling
