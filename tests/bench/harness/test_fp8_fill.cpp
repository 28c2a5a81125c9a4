// The FP8 benchmarks' input generators and dense fp8 GEMM (bench/fp8_fill.h, bench/fp8_gemm.h):
// the block-scale rule, the layouts of the scales, reproducibility, argument errors (CPU), and on
// a GPU the kernels against the host loops and cuBLASLt's fp8 GEMM against fp64.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "bench/harness/cuda/fp8_gemm.h"
#include "bench/harness/fp8_fill.h"
#include "bench/harness/fp8_random.h"
#include "braid/buffer.h"
#include "braid/dtype.h"
#include "test_util.h"

namespace braid::bench {
namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  OwnedTensor host(t.dtype, std::vector<int64_t>(t.shape, t.shape + t.ndim), Device::cpu());
  copy(t, host);
  const uint8_t* p = static_cast<const uint8_t*>(host.data());
  return {p, p + host.view().nbytes()};
}

TEST(BenchFp8Fill, NormalValuesAreReproducibleAndStandard) {
  OwnedTensor a(DType::f32, {4096}, Device::cpu()), b(DType::f32, {4096}, Device::cpu());
  fill_normal(a, 7, 0.0f, 1.0f);
  fill_normal(b, 7, 0.0f, 1.0f);
  EXPECT_EQ(bytes_of(a), bytes_of(b));
  double sum = 0, sq = 0;
  for (int i = 0; i < 4096; ++i) {
    const double v = a.view().ptr<float>()[i];
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sq += v * v;
  }
  EXPECT_NEAR(sum / 4096, 0.0, 0.05);           // 4 standard errors of the mean
  EXPECT_NEAR(std::sqrt(sq / 4096), 1.0, 0.05);
  fill_normal(b, 8, 0.0f, 1.0f);
  EXPECT_NE(bytes_of(a), bytes_of(b));
  OwnedTensor c(DType::bf16, {16}, Device::cpu());
  fill_normal(c, 7, 10.0f, 0.0f);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(load_as_float(c.data(), DType::bf16, i), 10.0f);
}

TEST(BenchFp8Fill, WeightBlocksTakeAmaxOver448) {
  // Two 128 x 128 blocks side by side: block 0 holds the values i / 1000 with one -6 among
  // them; block 1 is all zero.
  OwnedTensor src(DType::f32, {128, 256}, Device::cpu());
  float* s = src.view().ptr<float>();
  for (int r = 0; r < 128; ++r)
    for (int c = 0; c < 256; ++c) s[r * 256 + c] = c < 128 ? float(r * 128 + c) / 1000.0f : 0.0f;
  s[5 * 256 + 7] = -6.0f;
  OwnedTensor q(DType::f8e4m3, {128, 256}, Device::cpu()), scale(DType::f32, {1, 2}, Device::cpu());
  quantize_weight_blocks(src, q, scale);
  const float amax = 16383.0f / 1000.0f;  // the largest |value| of block 0
  EXPECT_FLOAT_EQ(scale.view().ptr<float>()[0], amax / 448.0f);
  EXPECT_FLOAT_EQ(scale.view().ptr<float>()[1], 1.0f);  // all zero: scale 1
  const uint8_t* qp = q.view().ptr<uint8_t>();
  EXPECT_EQ(f8e4m3_to_float(qp[127 * 256 + 127]), 448.0f);  // the amax element maps onto 448
  for (int r = 0; r < 128; ++r)
    for (int c = 0; c < 256; ++c) {
      const float v = s[r * 256 + c], sc = scale.view().ptr<float>()[c / 128];
      const float back = f8e4m3_to_float(qp[r * 256 + c]) * sc;
      // e4m3 keeps 3 mantissa bits: within 1/16 of the value, or of the smallest normal.
      ASSERT_LE(std::fabs(back - v), std::fabs(v) / 16 + sc * 0.016f) << r << ", " << c;
    }
}

TEST(BenchFp8Fill, RandomWeightBlocksEqualQuantizingTheSameNormals) {
  const int64_t E = 2, N = 256, K = 384;
  OwnedTensor src(DType::f32, {E, N, K}, Device::cpu());
  fill_normal(src, 99, 0.0f, 1.5f);
  OwnedTensor q1(DType::f8e4m3, {E, N, K}, Device::cpu()), s1(DType::f32, {E, 2, 3}, Device::cpu());
  OwnedTensor q2(DType::f8e4m3, {E, N, K}, Device::cpu()), s2(DType::f32, {E, 2, 3}, Device::cpu());
  quantize_weight_blocks(src, q1, s1);
  random_weight_blocks(q2, s2, 99, 1.5f);
  EXPECT_EQ(bytes_of(q1), bytes_of(q2));
  EXPECT_EQ(bytes_of(s1), bytes_of(s2));
  // Scales are per (expert, 128-row block, 128-column block): all differ.
  const float* sp = s1.view().ptr<float>();
  for (int i = 1; i < E * 2 * 3; ++i) EXPECT_NE(sp[i], sp[0]);
}

TEST(BenchFp8Fill, ActivationScalesAreTransposed) {
  // Row m, block b holds the value (m + 1) * (b + 1) at its first column, smaller ones elsewhere.
  const int64_t M = 3, K = 256;
  OwnedTensor src(DType::bf16, {M, K}, Device::cpu());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      store_from_float(src.data(), DType::bf16, m * K + k,
                       k % 128 == 0 ? float((m + 1) * (k / 128 + 1)) : 0.25f);
  OwnedTensor q(DType::f8e4m3, {M, K}, Device::cpu()), scale(DType::f32, {2, M}, Device::cpu());
  quantize_activation_blocks(src, q, scale);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t m = 0; m < M; ++m)
      EXPECT_FLOAT_EQ(scale.view().ptr<float>()[b * M + m], float((m + 1) * (b + 1)) / 448.0f);
}

TEST(BenchFp8Fill, BadArgumentsNameTheArgument) {
  OwnedTensor q(DType::f8e4m3, {128, 100}, Device::cpu()), s(DType::f32, {1, 1}, Device::cpu());
  test::expect_error([&] { random_weight_blocks(q, s, 1, 1.0f); }, ErrorKind::invalid_argument,
                     {"random_weight_blocks", "q", "multiples of 128"});
  OwnedTensor q2(DType::f8e4m3, {128, 128}, Device::cpu()), s2(DType::f32, {2, 1}, Device::cpu());
  test::expect_error([&] { random_weight_blocks(q2, s2, 1, 1.0f); }, ErrorKind::invalid_argument,
                     {"scale"});
  OwnedTensor x(DType::f32, {4, 128}, Device::cpu()), xq(DType::f8e4m3, {4, 128}, Device::cpu());
  OwnedTensor bad_scale(DType::f32, {4, 1}, Device::cpu());  // not transposed
  test::expect_error([&] { quantize_activation_blocks(x, xq, bad_scale); },
                     ErrorKind::invalid_argument, {"quantize_activation_blocks", "scale"});
  OwnedTensor i32(DType::i32, {8}, Device::cpu());
  test::expect_error([&] { fill_normal(i32, 1, 0, 1); }, ErrorKind::invalid_argument,
                     {"fill_normal"});
}

#if BRAID_WITH_CUDA

TEST(BenchFp8FillGpu, KernelsQuantizeExactlyAsTheHostLoops) {
  BRAID_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  // The same source on both sides (the host's normal generator may differ from the device's in
  // the last bit of a libm call, so the source is made once and copied).
  OwnedTensor src(DType::bf16, {2, 256, 384}, Device::cpu());
  fill_normal(src, 5, 0.0f, 3.0f);
  const OwnedTensor dsrc = test::to_device(src, dev);
  OwnedTensor hq(DType::f8e4m3, {2, 256, 384}, Device::cpu());
  OwnedTensor hs(DType::f32, {2, 2, 3}, Device::cpu());
  OwnedTensor dq(DType::f8e4m3, {2, 256, 384}, dev), ds(DType::f32, {2, 2, 3}, dev);
  quantize_weight_blocks(src, hq, hs);
  quantize_weight_blocks(dsrc, dq, ds);
  EXPECT_EQ(bytes_of(hq), bytes_of(dq));
  EXPECT_EQ(bytes_of(hs), bytes_of(ds));

  const Tensor rows = src.view().reshape({512, 384});
  const Tensor drows = dsrc.view().reshape({512, 384});
  OwnedTensor hxq(DType::f8e4m3, {512, 384}, Device::cpu());
  OwnedTensor hxs(DType::f32, {3, 512}, Device::cpu());
  OwnedTensor dxq(DType::f8e4m3, {512, 384}, dev), dxs(DType::f32, {3, 512}, dev);
  quantize_activation_blocks(rows, hxq, hxs);
  quantize_activation_blocks(drows, dxq, dxs);
  EXPECT_EQ(bytes_of(hxq), bytes_of(dxq));
  EXPECT_EQ(bytes_of(hxs), bytes_of(dxs));

  // Drawn on the device: reproducible, finite, scales positive.
  OwnedTensor r1(DType::f8e4m3, {1, 128, 256}, dev), rs1(DType::f32, {1, 1, 2}, dev);
  OwnedTensor r2(DType::f8e4m3, {1, 128, 256}, dev), rs2(DType::f32, {1, 1, 2}, dev);
  random_weight_blocks(r1, rs1, 11, 1.0f);
  random_weight_blocks(r2, rs2, 11, 1.0f);
  EXPECT_EQ(bytes_of(r1), bytes_of(r2));
  for (float v : test::to_floats(rs1)) EXPECT_GT(v, 0.0f);
}

TEST(BenchFp8GemmGpu, MatchesFp64OnTheSameFp8Values) {
  BRAID_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  const int64_t m = 96, n = 80, k = 256;
  OwnedTensor a(DType::f8e4m3, {m, k}, dev), w(DType::f8e4m3, {n, k}, dev);
  fill_fp8_normal(a, 1, 1.0f);
  fill_fp8_normal(w, 2, 1.0f);
  OwnedTensor out = test::poisoned(DType::bf16, {m, n}, dev);
  try {
    fp8_gemm(a, w, out, {});
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::unsupported) GTEST_SKIP() << e.what();  // no fp8 GEMM here
    throw;
  }
  const std::vector<uint8_t> ha = bytes_of(a), hw = bytes_of(w);
  const std::vector<float> got = test::to_floats(out);
  double num = 0, den = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t c = 0; c < k; ++c)
        ref += double(f8e4m3_to_float(ha[i * k + c])) * double(f8e4m3_to_float(hw[j * k + c]));
      const double d = got[i * n + j] - ref;
      num += d * d;
      den += ref * ref;
    }
  EXPECT_LT(std::sqrt(num / den), 4e-3);  // bf16 rounding of the output
  EXPECT_FALSE(fp8_gemm_plan_description(a, w, out).empty());
  OwnedTensor bad(DType::f8e4m3, {m, 100}, dev);
  test::expect_error([&] { fp8_gemm(bad, w, out, {}); }, ErrorKind::invalid_argument,
                     {"fp8_gemm"});
}

#endif  // BRAID_WITH_CUDA

}  // namespace
}  // namespace braid::bench
