// Helpers for the FP8 block-scale tests: DeepSeek-like operands (activation rows quantized into
// terms with per-128-column scales, stored transposed; weights quantized per 128 x 128 block),
// expert offsets, and reading the operands back.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test::fp8 {

constexpr int64_t kB = ops::kFp8Block;

// Values in [M, K] f32 like DeepSeek's activations: 2 * randn, each (row, 128-column block)
// times 2^u with u uniform in [-2, 2], so that scales differ from block to block and a scale
// applied to the wrong block shows.
inline OwnedTensor activation_values(int64_t rows, int64_t k, uint64_t seed) {
  OwnedTensor x(DType::f32, {rows, k}, Device::cpu());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<float> exponent(-2.0f, 2.0f);
  float* p = x.view().ptr<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < k / kB; ++b) {
      const float magnitude = std::exp2(exponent(rng));
      for (int64_t j = 0; j < kB; ++j) p[r * k + b * kB + j] = normal(rng) * magnitude;
    }
  return x;
}

// An fp8 operand and its scales, on the CPU.
struct Fp8Tensor {
  OwnedTensor q;      // [rows, terms * K] f8e4m3 (activations) or [E, N, K] (weights)
  OwnedTensor scale;  // [terms * K / 128, rows] f32, or [E, N / 128, K / 128]
};

// x [rows, k] f32 quantized into `terms` terms by the CPU moe_fp8_quantize.
inline Fp8Tensor quantize_rows(const Tensor& x, int terms) {
  const int64_t rows = x.shape[0], k = x.shape[1];
  Fp8Tensor t{OwnedTensor(DType::f8e4m3, {rows, terms * k}, Device::cpu()),
              OwnedTensor(DType::f32, {terms * k / kB, rows}, Device::cpu())};
  ops::moe_fp8_quantize(x, t.q, t.scale);
  return t;
}

// DeepSeek-like activations: activation_values quantized into `terms` terms.
inline Fp8Tensor activations(int64_t rows, int64_t k, int terms, uint64_t seed) {
  return quantize_rows(activation_values(rows, k, seed), terms);
}

// DeepSeek-like weights [E, N, K]: randn / sqrt(K) (so that G and SwiGLU's gate are of order 1),
// each 128 x 128 block times 2^u (u uniform in [-2, 2]), quantized per block: s = amax / 448,
// q = e4m3(v / s). Written here, independently of the op.
inline Fp8Tensor weights(int64_t experts, int64_t n, int64_t k, uint64_t seed) {
  Fp8Tensor w{OwnedTensor(DType::f8e4m3, {experts, n, k}, Device::cpu()),
              OwnedTensor(DType::f32, {experts, n / kB, k / kB}, Device::cpu())};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-2.0f, 2.0f);
  std::vector<float> block(static_cast<size_t>(kB * kB));
  uint8_t* q = w.q.view().ptr<uint8_t>();
  float* s = w.scale.view().ptr<float>();
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t bi = 0; bi < n / kB; ++bi)
      for (int64_t bj = 0; bj < k / kB; ++bj) {
        const float magnitude = std::exp2(exponent(rng)) / std::sqrt(static_cast<float>(k));
        float amax = 0;
        for (float& v : block) {
          v = normal(rng) * magnitude;
          amax = std::fmax(amax, std::fabs(v));
        }
        const float scale = amax / 448.0f;
        s[(e * (n / kB) + bi) * (k / kB) + bj] = scale;
        for (int64_t i = 0; i < kB; ++i)
          for (int64_t j = 0; j < kB; ++j)
            q[(e * n + bi * kB + i) * k + bj * kB + j] = float_to_f8e4m3(block[i * kB + j] / scale);
      }
  return w;
}

// Offsets of `rows` rows over `experts` experts: random counts (some experts empty), or every
// row in expert experts / 2 when skewed.
inline OwnedTensor offsets(int64_t rows, int64_t experts, uint64_t seed, bool skewed) {
  std::vector<int32_t> counts(static_cast<size_t>(experts), 0);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, experts - 1);
  for (int64_t r = 0; r < rows; ++r) ++counts[static_cast<size_t>(skewed ? experts / 2 : pick(rng))];
  OwnedTensor t(DType::i32, {experts + 1}, Device::cpu());
  int32_t* o = t.view().ptr<int32_t>();
  o[0] = 0;
  for (int64_t e = 0; e < experts; ++e) o[e + 1] = o[e] + counts[static_cast<size_t>(e)];
  return t;
}

// Element (r, c) of a [rows, terms * width] fp8 operand as the sum of its terms, each code times
// its scale (scale [terms * width / 128, rows], any row stride), in fp64.
inline double reconstruct(const Tensor& q, const Tensor& scale, int64_t width, int64_t r,
                          int64_t c) {
  const int64_t terms = q.shape[1] / width;
  double v = 0;
  for (int64_t t = 0; t < terms; ++t) {
    const uint8_t code = q.ptr<uint8_t>()[r * q.row_stride() + t * width + c];
    const float s = scale.ptr<float>()[(t * width / kB + c / kB) * scale.row_stride() + r];
    v += double{f8e4m3_to_float(code)} * s;
  }
  return v;
}

// The spacing of e4m3 values at code `c` (2^-9 for subnormals and zero): one unit in the last
// place.
inline double e4m3_ulp(uint8_t c) {
  const int exponent_bits = (c >> 3) & 0xF;
  return std::ldexp(1.0, (exponent_bits == 0 ? 1 : exponent_bits) - 7 - 3);
}

// Copies of a contiguous host tensor's bytes, for exact comparisons.
inline std::vector<uint8_t> bytes_of(const Tensor& host) {
  std::vector<uint8_t> b(host.nbytes());
  std::memcpy(b.data(), host.data, b.size());
  return b;
}

}  // namespace braid::test::fp8
