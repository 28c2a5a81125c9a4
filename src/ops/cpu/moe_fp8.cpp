// Reference FP8 block-scale ops (see ops.h, "FP8 block scale"): the multi-term quantization of
// activation rows, the gather of fp8 rows with their scales, and the grouped GEMM on the
// dequantized operands (dequantization in fp32 as DeepSeek's definition writes it; the sums over
// the terms and over K in fp64; SwiGLU in fp32).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

namespace {

constexpr float kE4m3Max = 448.0f;  // the largest finite e4m3 value

// The 256 e4m3 codes as floats (exact), so that dequantizing is a lookup.
const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = f8e4m3_to_float(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

// Four partial sums, so the loop is not one long chain of dependent adds.
double dot(const double* a, const float* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

}  // namespace

// Each step is one fp32 operation rounded on its own, as the CUDA kernels write it with explicit
// round-to-nearest intrinsics: the two must agree bit for bit.
void fp8_quantize_block(const float* v, int terms, uint8_t* q, int64_t term_stride, float* scale,
                        int64_t scale_stride) {
  float rest[ops::kFp8Block];
  std::copy(v, v + ops::kFp8Block, rest);
  for (int t = 0; t < terms; ++t) {
    float amax = 0.0f;
    for (float r : rest) amax = std::max(amax, std::fabs(r));
    // 1 where amax / 448 is 0: an all-zero block, or one so small that the division underflows.
    const float s = amax / kE4m3Max == 0.0f ? 1.0f : amax / kE4m3Max;
    uint8_t* qt = q + t * term_stride;
    for (int j = 0; j < ops::kFp8Block; ++j) {
      qt[j] = float_to_f8e4m3(rest[j] / s);
      // volatile: the product is rounded to fp32 before the subtraction, never fused with it
      // into an FMA (GCC contracts in C++ wherever the target has FMA, e.g. -march=native).
      const volatile float taken = f8e4m3_to_float(qt[j]) * s;
      rest[j] = rest[j] - taken;
    }
    scale[t * scale_stride] = s;
  }
}

void moe_fp8_quantize(const Tensor& x, const Tensor& q, const Tensor& q_scale) {
  const int64_t rows = x.shape[0], k = x.shape[1], terms = q.shape[1] / k;
  const int64_t blocks = k / ops::kFp8Block, scale_stride = q_scale.row_stride();
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k; ++j) row[j] = load_as_float(x.data, x.dtype, r * x.row_stride() + j);
    uint8_t* q_row = q.ptr<uint8_t>() + r * q.row_stride();
    for (int64_t b = 0; b < blocks; ++b)
      fp8_quantize_block(row.data() + b * ops::kFp8Block, static_cast<int>(terms),
                         q_row + b * ops::kFp8Block, k, q_scale.ptr<float>() + b * scale_stride + r,
                         blocks * scale_stride);
  }
}

void moe_gather_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& sorted_pairs, int k,
                    const Tensor& xs, const Tensor& xs_scale) {
  const int64_t rows = xs.shape[0], width = x.shape[1], blocks = width / ops::kFp8Block;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = sorted_pairs.ptr<int32_t>()[r] / k;
    std::memcpy(xs.ptr<uint8_t>() + r * xs.row_stride(), x.ptr<uint8_t>() + t * x.row_stride(),
                static_cast<size_t>(width));
    for (int64_t b = 0; b < blocks; ++b)
      xs_scale.ptr<float>()[b * xs_scale.row_stride() + r] =
          x_scale.ptr<float>()[b * x_scale.row_stride() + t];
  }
}

// Expert by expert: its weights dequantized once, then each of its rows of x summed over the
// terms (fp64) and multiplied with every weight row (fp64 dot products), G rounded to fp32.
void moe_grouped_gemm_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                          const Tensor& w_scale, const Tensor& expert_offsets,
                          ops::MoeActivation activation, const Tensor& y, const Tensor& y_scale) {
  constexpr int64_t B = ops::kFp8Block;
  const auto& e4m3 = e4m3_values();
  const int64_t experts = w.shape[0], n = w.shape[1], k = w.shape[2];
  const int64_t terms = x.shape[1] / k, k_blocks = k / B;
  const bool gated = activation != ops::MoeActivation::none;
  const bool gate_last = activation == ops::MoeActivation::swiglu_gate_last;
  const int64_t out_cols = gated ? n / 2 : n;
  const bool fp8_y = y.dtype == DType::f8e4m3;
  const int64_t y_terms = fp8_y ? y.shape[1] / out_cols : 1;
  const int32_t* offsets = expert_offsets.ptr<int32_t>();
  const uint8_t* xq = x.ptr<uint8_t>();
  const float* xs = x_scale.ptr<float>();

  std::vector<float> wd(static_cast<size_t>(n * k));  // w[e] dequantized
  std::vector<double> a(static_cast<size_t>(k));      // one row of x, its terms summed
  std::vector<float> g(static_cast<size_t>(n));       // one row of G
  std::vector<float> h(static_cast<size_t>(out_cols));
  for (int64_t e = 0; e < experts; ++e) {
    if (offsets[e + 1] == offsets[e]) continue;
    const uint8_t* we = w.ptr<uint8_t>() + e * n * k;
    const float* ws = w_scale.ptr<float>() + e * (n / B) * k_blocks;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j)
        wd[i * k + j] = e4m3[we[i * k + j]] * ws[(i / B) * k_blocks + j / B];

    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      std::fill(a.begin(), a.end(), 0.0);
      for (int64_t t = 0; t < terms; ++t)
        for (int64_t j = 0; j < k; ++j) {
          const float s = xs[(t * k_blocks + j / B) * x_scale.row_stride() + r];
          a[j] += e4m3[xq[r * x.row_stride() + t * k + j]] * s;  // fp32 product, fp64 sum
        }
      for (int64_t i = 0; i < n; ++i) g[i] = static_cast<float>(dot(a.data(), wd.data() + i * k, k));

      if (!gated) {
        for (int64_t i = 0; i < n; ++i) store_from_float(y.data, y.dtype, r * y.row_stride() + i, g[i]);
        continue;
      }
      for (int64_t i = 0; i < out_cols; ++i) {
        const float gate = gate_last ? g[out_cols + i] : g[i];
        const float up = gate_last ? g[i] : g[out_cols + i];
        h[i] = gate / (1.0f + std::exp(-gate)) * up;
      }
      if (!fp8_y) {
        std::copy(h.begin(), h.end(), y.ptr<float>() + r * y.row_stride());
        continue;
      }
      const int64_t y_blocks = out_cols / B, ys_stride = y_scale.row_stride();
      for (int64_t b = 0; b < y_blocks; ++b)
        fp8_quantize_block(h.data() + b * B, static_cast<int>(y_terms),
                           y.ptr<uint8_t>() + r * y.row_stride() + b * B, out_cols,
                           y_scale.ptr<float>() + b * ys_stride + r, y_blocks * ys_stride);
    }
  }
}

}  // namespace braid::cpu
