// The arithmetic of ops::sample_tokens that the CPU reference and the CUDA kernel share, written
// once so both compute the same bits: a token's relative probability (an fp32 exp2 of our own,
// made of correctly rounded operations only, so no libm or fast-math intrinsic can differ between
// host and device), its integer weight, the per-row parameters as the op reads them, and the
// 128-bit products behind the top-p target and the draw. Every fp32 operation goes through a
// *_rn helper: nvcc would otherwise fuse a * b + c into one fma (host code here is built without
// FMA contraction: ISO C++ mode, no -march). Plain C++ (__host__ __device__ under nvcc).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "braid/sampling_random.h"

namespace braid::sampling {

// Below this temperature a row is greedy (the engine's SamplingParams::greedy()).
inline constexpr float kMinTemperature = 1e-5f;
// Weights are fixed point with this many fraction bits: w = floor(p * 2^40), p in [0, 1].
inline constexpr int kWeightBits = 40;
// A row's weights sum exactly in 64 bits while vocab * 2^40 < 2^64.
inline constexpr int64_t kMaxVocab = (int64_t{1} << 24) - 1;
inline constexpr float kLog2e = 1.44269504088896341f;

BRAID_SAMPLING_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}

BRAID_SAMPLING_HD float bits_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

// Correctly rounded fp32 operations that are never contracted into an fma.
BRAID_SAMPLING_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
BRAID_SAMPLING_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
BRAID_SAMPLING_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
BRAID_SAMPLING_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
// Round to the nearest integer, ties to even (the default rounding mode on the host).
BRAID_SAMPLING_HD float rint_rn(float a) {
#if defined(__CUDA_ARCH__)
  return rintf(a);
#else
  return std::nearbyint(a);
#endif
}

// A logit as the op reads it: NaN is -inf.
BRAID_SAMPLING_HD float canonical(float l) { return l != l ? -INFINITY : l; }

// An unsigned key with the order of canonical logits: a < b exactly when key(a) < key(b), equal
// values (-0 and +0 too) have equal keys, and every key is above 0.
BRAID_SAMPLING_HD uint32_t logit_key(float l) {
  l = canonical(l);
  const uint32_t b = float_bits(l == 0.0f ? 0.0f : l);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// 2^y for y <= 0 (-inf included), with a relative error under 2^-22, and exactly 1 at y = 0.
// Results below 2^-125 are flushed to 0 (their weight, floor(p * 2^40), is 0 anyway).
// y = n + f with n = rint(y), f in [-1/2, 1/2] (exact); 2^f by its degree-7 Taylor polynomial
// (truncation error 5e-9); times 2^n, a normal number.
BRAID_SAMPLING_HD float exp2_nonpositive(float y) {
  if (!(y >= -125.0f)) return 0.0f;
  const float n = rint_rn(y);
  const float f = sub_rn(y, n);
  float q = 1.5252733804059840e-5f;           // ln2^7 / 7!
  q = fma_rn(q, f, 1.5403530393381608e-4f);   // ln2^6 / 6!
  q = fma_rn(q, f, 1.3333558146428443e-3f);   // ln2^5 / 5!
  q = fma_rn(q, f, 9.6181291076284772e-3f);   // ln2^4 / 4!
  q = fma_rn(q, f, 5.5504108664821580e-2f);   // ln2^3 / 3!
  q = fma_rn(q, f, 2.4022650695910071e-1f);   // ln2^2 / 2!
  q = fma_rn(q, f, 6.9314718055994531e-1f);   // ln2
  q = fma_rn(q, f, 1.0f);
  const uint32_t scale_bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  return mul_rn(q, bits_float(scale_bits));
}

// A token's probability relative to the most likely one (m = the row's maximum, finite), at the
// temperature behind c = log2(e) / T: p = 2^((l - m) * c), 1 at the maximum, 0 for -inf and NaN.
BRAID_SAMPLING_HD float relative_prob(float l, float m, float c) {
  return exp2_nonpositive(mul_rn(sub_rn(canonical(l), m), c));
}

// A probability's integer weight, floor(p * 2^40): sums of weights are exact, so they do not
// depend on the order they are added in.
BRAID_SAMPLING_HD uint64_t weight_of(float p) {
  return static_cast<uint64_t>(mul_rn(p, 0x1p40f));
}

// floor(a * b / 2^s), 0 < s < 128.
BRAID_SAMPLING_HD uint64_t mul_shift_floor(uint64_t a, uint64_t b, int s) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p >> s);
}

// The mass top-p must reach, ceil(top_p * total) exactly (top_p in [0, 1)), and at least 1.
BRAID_SAMPLING_HD uint64_t top_p_target(float top_p, uint64_t total) {
  if (!(top_p > 0.0f)) return 1;
  const uint32_t b = float_bits(top_p);
  const uint32_t e = (b >> 23) & 0xFFu;
  const uint64_t mant = e == 0 ? (b & 0x7FFFFFu) : ((b & 0x7FFFFFu) | 0x800000u);
  const int s = e == 0 ? 149 : 150 - static_cast<int>(e);  // top_p = mant / 2^s, s >= 24
  const unsigned __int128 p = static_cast<unsigned __int128>(mant) * total;
  uint64_t target;
  if (s >= 128) {
    target = p != 0 ? 1 : 0;
  } else {
    const unsigned __int128 one = 1;
    target = static_cast<uint64_t>(p >> s) + (((p & ((one << s) - 1)) != 0) ? 1 : 0);
  }
  return target > 0 ? target : 1;
}

// The draw as a point in the kept mass: floor(uniform(seed, step) * total), in [0, total).
BRAID_SAMPLING_HD uint64_t draw_point(uint64_t seed, uint64_t step, uint64_t total) {
  return mul_shift_floor(uniform_bits53(seed, step), total, 53);
}

// One row's parameters as the op uses them (ops.h: values outside the documented ranges, which
// only CUDA accepts, are read as stated there).
struct RowParams {
  bool sample;    // false: greedy
  float c;        // log2(e) / temperature
  int32_t top_k;  // 0: off (also when top_k >= vocab)
  float top_p;    // 1: off; in [0, 1) otherwise
  float min_p;    // in [0, 1]
  uint64_t seed, step;
};

BRAID_SAMPLING_HD RowParams row_params(float temperature, int32_t top_k, float top_p,
                                       float min_p, int64_t seed, int64_t step, int64_t vocab) {
  RowParams r;
  r.sample = temperature >= kMinTemperature && temperature <= FLT_MAX;
  r.c = r.sample ? div_rn(kLog2e, temperature) : 0.0f;
  r.top_k = top_k > 0 && top_k < vocab ? top_k : 0;
  r.top_p = top_p < 1.0f ? (top_p > 0.0f ? top_p : 0.0f) : 1.0f;
  r.min_p = min_p > 0.0f ? (min_p < 1.0f ? min_p : 1.0f) : 0.0f;
  r.seed = static_cast<uint64_t>(seed);
  r.step = static_cast<uint64_t>(step);
  return r;
}

}  // namespace braid::sampling
