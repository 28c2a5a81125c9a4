// moe_fp8_quantize and moe_gather_fp8: the reference on hand-made blocks (zero block, exact
// values, ties to even, the amax at 448), the error of 1, 2 and 3 terms, the gather against its
// formula; CUDA against the reference bit for bit; argument errors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "braid/ops.h"
#include "ops/fp8_test_util.h"
#include "test_util.h"

namespace braid::test {
namespace {

using fp8::kB;

// q [M, terms * K] and q_scale [terms * K / 128, M] for x [M, K], quantized by the op on x's device.
fp8::Fp8Tensor quantize(const Tensor& x, int terms) {
  const int64_t m = x.shape[0], k = x.shape[1];
  fp8::Fp8Tensor t{poisoned(DType::f8e4m3, {m, terms * k}, x.device),
                   poisoned(DType::f32, {terms * k / kB, m}, x.device)};
  ops::moe_fp8_quantize(x, t.q, t.scale);
  return t;
}

OwnedTensor f32_rows(const std::vector<float>& values, int64_t rows) {
  const int64_t k = static_cast<int64_t>(values.size()) / rows;
  OwnedTensor t(DType::f32, {rows, k}, Device::cpu());
  std::copy(values.begin(), values.end(), t.view().ptr<float>());
  return t;
}

uint8_t code(const fp8::Fp8Tensor& t, int64_t r, int64_t c) {
  return t.q.view().ptr<uint8_t>()[r * t.q.view().shape[1] + c];
}
float scale(const fp8::Fp8Tensor& t, int64_t block, int64_t r) {
  return t.scale.view().ptr<float>()[block * t.scale.view().shape[1] + r];
}

// ---- the reference on hand-made blocks ---------------------------------------------------------

TEST(MoeFp8QuantizeReference, ZeroBlockHasScaleOne) {
  std::vector<float> x(2 * kB, 0.0f);
  x[kB + 5] = 3.5f;  // block 1 is not zero: s = 3.5 / 448 = 2^-7 exactly
  const fp8::Fp8Tensor t = quantize(f32_rows(x, 1), 2);
  for (int64_t j = 0; j < kB; ++j) {
    EXPECT_EQ(code(t, 0, j), 0x00) << j;           // term 0, block 0
    EXPECT_EQ(code(t, 0, 2 * kB + j), 0x00) << j;  // term 1, block 0
  }
  EXPECT_EQ(scale(t, 0, 0), 1.0f);  // term 0, block 0
  EXPECT_EQ(scale(t, 2, 0), 1.0f);  // term 1, block 0
  EXPECT_EQ(scale(t, 1, 0), 0.0078125f);
  EXPECT_EQ(code(t, 0, kB + 5), 0x7E);  // 448
  EXPECT_EQ(scale(t, 3, 0), 1.0f);      // 3.5 is exact in one term: the rest is zero
}

// amax = 56 makes s = 1/8 exactly, so v / s is exact and the rounding of e4m3 shows directly.
// The expected codes are written out by hand (sign | exponent (bias 7) << 3 | mantissa).
TEST(MoeFp8QuantizeReference, ExactScaleTiesToEvenAndTheNextTerm) {
  std::vector<float> x(kB, 0.0f);
  const float s = 0.125f;
  x[0] = 56.0f;             // 448 = 1.110b * 2^8        -> 0x7E
  x[1] = -56.0f;            //                              0xFE
  x[2] = 8.0f * s;          // 8 = 1.000b * 2^3          -> 0x50
  x[3] = 8.5f * s;          // tie of 8 and 9: even 8    -> 0x50
  x[4] = 9.5f * s;          // tie of 9 and 10: even 10  -> 0x52
  x[5] = -9.5f * s;         //                              0xD2
  x[6] = std::ldexp(s, -10);      // tie of 0 and 2^-9 (subnormal): even 0 -> 0x00
  x[7] = 3 * std::ldexp(s, -10);  // tie of 2^-9 and 2^-8: even 2^-8      -> 0x02
  x[8] = 0.3125f * s;       // 0.3125 = 1.010b * 2^-2    -> 0x2A
  const fp8::Fp8Tensor t = quantize(f32_rows(x, 1), 2);
  EXPECT_EQ(scale(t, 0, 0), s);
  const uint8_t want0[9] = {0x7E, 0xFE, 0x50, 0x50, 0x52, 0xD2, 0x00, 0x02, 0x2A};
  for (int j = 0; j < 9; ++j) EXPECT_EQ(code(t, 0, j), want0[j]) << "term 0, column " << j;
  for (int j = 9; j < kB; ++j) EXPECT_EQ(code(t, 0, j), 0x00) << "term 0, column " << j;
  EXPECT_EQ(f8e4m3_to_float(0x52), 10.0f);  // the hand encoding agrees with dtype.h's decoder

  // The rest: +-1/16 at columns 3..5, +-2^-13 at 6 and 7, 0 elsewhere; amax 1/16 gives
  // +-448 there and 2^-13 / s1 = 0.875 = 1.110b * 2^-1 (0x36) at columns 6 and 7.
  EXPECT_EQ(scale(t, 1, 0), 0.0625f / 448.0f);
  const uint8_t want1[9] = {0x00, 0x00, 0x00, 0x7E, 0xFE, 0x7E, 0x36, 0xB6, 0x00};
  for (int j = 0; j < 9; ++j) EXPECT_EQ(code(t, 0, kB + j), want1[j]) << "term 1, column " << j;
}

// v / s can round above 448 in fp32 (s = amax / 448 rounded down): the code saturates at 448,
// never the NaN code 0x7F.
TEST(MoeFp8QuantizeReference, AmaxTakesTheLargestCode) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  int above = 0;
  for (int i = 0; i < 200; ++i) {
    const float amax = std::ldexp(mantissa(rng), static_cast<int>(i % 40) - 20);
    if (amax / (amax / 448.0f) > 448.0f) ++above;
    std::vector<float> x(kB, amax / 3);
    x[i % kB] = (i % 2) ? amax : -amax;
    const fp8::Fp8Tensor t = quantize(f32_rows(x, 1), 1);
    EXPECT_EQ(code(t, 0, i % kB), (i % 2) ? 0x7E : 0xFE) << "amax " << amax;
    EXPECT_EQ(scale(t, 0, 0), amax / 448.0f);
  }
  EXPECT_GT(above, 0) << "no case where v / s exceeds 448: the test does not test saturation";
}

// The error of the sum of the terms: one term within half an e4m3 step of each element (2^-4
// relative, 2^-10 s for subnormals); each further term shrinks it by more than 2^4 (measured:
// 2.6e-2, 6.3e-4 and 1.5e-5 here, about 2^5.3 per term).
TEST(MoeFp8QuantizeReference, MoreTermsSmallerError) {
  const int64_t m = 16, k = 1024;
  const OwnedTensor x = fp8::activation_values(m, k, 5);
  const std::vector<float> xv = to_floats(x);
  double previous = 1.0;
  for (int terms = 1; terms <= ops::kFp8MaxTerms; ++terms) {
    const fp8::Fp8Tensor t = quantize(x, terms);
    double num = 0, den = 0;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const double v = xv[r * k + c], rec = fp8::reconstruct(t.q, t.scale, k, r, c);
        num += (v - rec) * (v - rec);
        den += v * v;
        if (terms == 1) {
          const double bound = std::ldexp(std::fabs(v), -4) + std::ldexp(scale(t, c / kB, r), -10);
          EXPECT_LE(std::fabs(v - rec), bound * (1 + 1e-6)) << r << ", " << c;
        }
      }
    const double rel = std::sqrt(num / den);
    std::printf("moe_fp8_quantize: %d term(s), relative L2 error %.3g\n", terms, rel);
    EXPECT_LT(rel, terms == 1 ? std::ldexp(1.0, -4) : previous / 16) << terms << " terms";
    previous = rel;
  }
  EXPECT_LT(previous, 1e-4);  // three terms: close to fp32 for the GEMM that follows
}

TEST(MoeFp8QuantizeReference, Bf16InputAndStridedScales) {
  const int64_t m = 3, k = 256;
  const OwnedTensor x32 = fp8::activation_values(m, k, 9);
  OwnedTensor x16(DType::bf16, {m, k}, Device::cpu());
  for (int64_t i = 0; i < m * k; ++i)
    store_from_float(x16.data(), DType::bf16, i, x32.view().ptr<float>()[i]);
  // The bf16 values as f32 give the same terms; q_scale here has a row stride of m + 5.
  const fp8::Fp8Tensor want = quantize(x16, 2);
  OwnedTensor x16f(DType::f32, {m, k}, Device::cpu());
  for (int64_t i = 0; i < m * k; ++i)
    x16f.view().ptr<float>()[i] = load_as_float(x16.data(), DType::bf16, i);
  OwnedTensor q(DType::f8e4m3, {m, 2 * k}, Device::cpu());
  OwnedTensor scale_storage = poisoned(DType::f32, {2 * k / kB, m + 5}, Device::cpu());
  const Tensor q_scale = scale_storage.view().slice(1, 0, m);
  ops::moe_fp8_quantize(x16f, q, q_scale);
  EXPECT_EQ(fp8::bytes_of(q), fp8::bytes_of(want.q));
  for (int64_t b = 0; b < 2 * k / kB; ++b)
    for (int64_t r = 0; r < m + 5; ++r) {
      const float got = scale_storage.view().ptr<float>()[b * (m + 5) + r];
      if (r < m) EXPECT_EQ(got, scale(want, b, r)) << b << ", " << r;
      else EXPECT_TRUE(std::isnan(got)) << "padding written at " << b << ", " << r;
    }
}

// ---- gather --------------------------------------------------------------------------------------

struct GatherProblem {
  OwnedTensor x, x_scale, pairs;
};

GatherProblem gather_problem(int64_t tokens, int k, int64_t width, uint64_t seed) {
  GatherProblem p{random_host(DType::u8, {tokens, width}, seed, 0, 256),
                  random_host(DType::f32, {width / kB, tokens}, seed + 1, 0.5f, 2.0f),
                  OwnedTensor(DType::i32, {tokens * k}, Device::cpu())};
  std::vector<int32_t> perm(static_cast<size_t>(tokens * k));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed + 2));
  std::copy(perm.begin(), perm.end(), p.pairs.view().ptr<int32_t>());
  return p;
}

// x as f8e4m3 (the bytes of the u8 tensor).
Tensor as_fp8(const Tensor& t) {
  Tensor v = t;
  v.dtype = DType::f8e4m3;
  return v;
}

TEST(MoeGatherFp8Reference, Formula) {
  const int64_t tokens = 5, width = 256;
  const int k = 3;
  const GatherProblem p = gather_problem(tokens, k, width, 3);
  // Strided outputs, their padding filled with 0xAB: the op writes only the view.
  OwnedTensor xs_storage(DType::f8e4m3, {tokens * k, width + 16}, Device::cpu());
  OwnedTensor scale_storage(DType::f32, {width / kB, tokens * k + 3}, Device::cpu());
  fill_bytes(xs_storage, 0xAB);
  fill_bytes(scale_storage, 0xAB);
  ops::moe_gather_fp8(as_fp8(p.x), p.x_scale, p.pairs, k, xs_storage.view().slice(1, 0, width),
                      scale_storage.view().slice(1, 0, tokens * k));
  const uint8_t* x = p.x.view().ptr<uint8_t>();
  const uint8_t* xs = xs_storage.view().ptr<uint8_t>();
  const float* xsc = p.x_scale.view().ptr<float>();
  const float* sc = scale_storage.view().ptr<float>();
  for (int64_t r = 0; r < tokens * k; ++r) {
    const int64_t t = p.pairs.view().ptr<int32_t>()[r] / k;
    for (int64_t c = 0; c < width + 16; ++c)
      ASSERT_EQ(xs[r * (width + 16) + c], c < width ? x[t * width + c] : 0xAB) << r << ", " << c;
    for (int64_t b = 0; b < width / kB; ++b)
      EXPECT_EQ(sc[b * (tokens * k + 3) + r], xsc[b * tokens + t]) << r << ", " << b;
  }
  uint32_t pad;
  std::memcpy(&pad, sc + tokens * k, 4);
  EXPECT_EQ(pad, 0xABABABABu);
}

// ---- CUDA against the reference ------------------------------------------------------------------

struct QuantizeCase {
  DType dtype;
  int terms;
  int64_t rows, k;
  bool strided;  // x misaligned for vector loads, q rows of an odd stride, q_scale padded
};

std::string quantize_name(const QuantizeCase& c) {
  return std::string(dtype_name(c.dtype)) + "_T" + std::to_string(c.terms) + "_M" +
         std::to_string(c.rows) + "_K" + std::to_string(c.k) + (c.strided ? "_strided" : "");
}

// activation_values with special (row, block) units, where there are enough units: the first
// all zeros, the last scaled into fp32's subnormals (a subnormal scale, so flushing subnormals to
// zero shows), the middle one with a huge value.
OwnedTensor special_values(const QuantizeCase& c, uint64_t seed) {
  OwnedTensor x = fp8::activation_values(c.rows, c.k, seed);
  const int64_t blocks = c.k / kB, units = c.rows * blocks;
  auto unit = [&](int64_t u) { return x.view().ptr<float>() + (u / blocks) * c.k + (u % blocks) * kB; };
  std::fill_n(unit(0), kB, 0.0f);
  if (units > 1)
    for (int64_t j = 0; j < kB; ++j) unit(units - 1)[j] *= 1e-39f;
  if (units > 2) unit(units / 2)[7] = 3e38f;
  return x;
}

class MoeFp8QuantizeDiff : public ::testing::TestWithParam<QuantizeCase> {};

TEST_P(MoeFp8QuantizeDiff, CudaMatchesReferenceBitForBit) {
  BRAID_REQUIRE_CUDA();
  const QuantizeCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = c.rows, k = c.k, width = c.terms * k, blocks = width / kB;
  const int64_t x_pad = c.strided ? 3 : 0, q_pad = c.strided ? 5 : 0, s_pad = c.strided ? 7 : 0;
  // x storage [M, K + x_pad]; the op sees columns [x_pad, x_pad + K) (misaligned when padded).
  const OwnedTensor values = special_values(c, seed);
  OwnedTensor x_storage(c.dtype, {m, k + x_pad}, Device::cpu());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < k; ++j)
      store_from_float(x_storage.data(), c.dtype, r * (k + x_pad) + x_pad + j,
                       values.view().ptr<float>()[r * k + j]);

  std::vector<std::vector<uint8_t>> q_bytes, s_bytes;
  for (Device device : {Device::cpu(), Device::cuda()}) {
    const OwnedTensor xs = to_device(x_storage, device);
    OwnedTensor q = poisoned(DType::f8e4m3, {m, width + q_pad}, device);
    OwnedTensor s = poisoned(DType::f32, {blocks, m + s_pad}, device);
    ops::moe_fp8_quantize(xs.view().slice(1, x_pad, x_pad + k), q.view().slice(1, 0, width),
                          s.view().slice(1, 0, m));
    q_bytes.push_back(fp8::bytes_of(to_device(q, Device::cpu())));
    s_bytes.push_back(fp8::bytes_of(to_device(s, Device::cpu())));
  }
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < q_bytes[0].size(); ++i)
    if (q_bytes[0][i] != q_bytes[1][i] && differ++ == 0) first = static_cast<int64_t>(i);
  EXPECT_EQ(differ, 0) << "codes differ, the first at row " << first / (width + q_pad)
                       << ", column " << first % (width + q_pad);
  EXPECT_EQ(s_bytes[0], s_bytes[1]) << "scales differ";
}

std::vector<QuantizeCase> quantize_cases() {
  std::vector<QuantizeCase> cases;
  for (DType dtype : {DType::f32, DType::bf16})
    for (int terms = 1; terms <= ops::kFp8MaxTerms; ++terms)
      for (int64_t rows : {1, 7, 300})
        for (int64_t k : {128, 7168}) cases.push_back({dtype, terms, rows, k, false});
  cases.push_back({DType::f32, 3, 33, 384, true});
  cases.push_back({DType::bf16, 2, 33, 384, true});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeFp8QuantizeDiff, ::testing::ValuesIn(quantize_cases()),
                         [](const auto& info) { return quantize_name(info.param); });

struct GatherCase {
  int64_t tokens;
  int k;
  int64_t width;
  bool strided;  // rows and scales of odd strides (byte copies)
};

class MoeGatherFp8Diff : public ::testing::TestWithParam<GatherCase> {};

TEST_P(MoeGatherFp8Diff, CudaMatchesReferenceExactly) {
  BRAID_REQUIRE_CUDA();
  const GatherCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const GatherProblem p = gather_problem(c.tokens, c.k, c.width, seed);
  const int64_t pairs = c.tokens * c.k, pad = c.strided ? 3 : 0, blocks = c.width / kB;
  std::vector<std::vector<uint8_t>> xs_bytes, s_bytes;
  for (Device device : {Device::cpu(), Device::cuda()}) {
    const OwnedTensor x = to_device(p.x, device), x_scale = to_device(p.x_scale, device);
    const OwnedTensor pairs_t = to_device(p.pairs, device);
    OwnedTensor xs = poisoned(DType::f8e4m3, {pairs, c.width + pad}, device);
    OwnedTensor s = poisoned(DType::f32, {blocks, pairs + pad}, device);
    ops::moe_gather_fp8(as_fp8(x), x_scale, pairs_t, c.k, xs.view().slice(1, 0, c.width),
                        s.view().slice(1, 0, pairs));
    xs_bytes.push_back(fp8::bytes_of(to_device(xs, Device::cpu())));
    s_bytes.push_back(fp8::bytes_of(to_device(s, Device::cpu())));
  }
  EXPECT_EQ(xs_bytes[0], xs_bytes[1]);
  EXPECT_EQ(s_bytes[0], s_bytes[1]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeGatherFp8Diff,
                         ::testing::Values(GatherCase{1, 8, 7168, false},  // decode, DeepSeek-V3
                                           GatherCase{37, 8, 7168, false},
                                           GatherCase{300, 1, 128, false},
                                           GatherCase{300, 8, 384, true}),
                         [](const auto& info) {
                           const GatherCase& c = info.param;
                           return "T" + std::to_string(c.tokens) + "_k" + std::to_string(c.k) +
                                  "_K" + std::to_string(c.width) + (c.strided ? "_strided" : "");
                         });

// ---- argument errors ---------------------------------------------------------------------------

TEST(MoeFp8QuantizeErrors, BadArguments) {
  const Device cpu = Device::cpu();
  OwnedTensor x(DType::f32, {4, 256}, cpu), q(DType::f8e4m3, {4, 512}, cpu);
  OwnedTensor s(DType::f32, {4, 4}, cpu);
  fill_bytes(x, 0);
  EXPECT_NO_THROW(ops::moe_fp8_quantize(x, q, s));
  const char* op = "moe_fp8_quantize";
  auto expect = [&](const Tensor& xa, const Tensor& qa, const Tensor& sa, ErrorKind kind,
                    std::vector<std::string> fragments) {
    fragments.insert(fragments.begin(), op);
    expect_error([&] { ops::moe_fp8_quantize(xa, qa, sa); }, kind, fragments);
  };
  OwnedTensor x_f16(DType::f16, {4, 256}, cpu), x_k(DType::f32, {4, 200}, cpu);
  OwnedTensor q_u8(DType::u8, {4, 512}, cpu), q_4(DType::f8e4m3, {4, 1024}, cpu);
  OwnedTensor q_odd(DType::f8e4m3, {4, 300}, cpu), q_rows(DType::f8e4m3, {3, 512}, cpu);
  OwnedTensor s_short(DType::f32, {2, 4}, cpu), s_bf16(DType::bf16, {4, 4}, cpu);
  OwnedTensor s_wide(DType::f32, {4, 8}, cpu);
  expect(x_f16, q, s, ErrorKind::dtype, {"'x'", "f32 or bf16", "f16"});
  expect(x_k, q, s, ErrorKind::shape, {"'x'", "multiple of 128", "[4, 200]"});
  expect(x, q_u8, s, ErrorKind::dtype, {"'q'", "f8e4m3", "u8"});
  expect(x, q_4, s, ErrorKind::shape, {"'q'", "1 <= terms <= 3", "[4, 1024]"});
  expect(x, q_odd, s, ErrorKind::shape, {"'q'", "terms * 256", "[4, 300]"});
  expect(x, q_rows, s, ErrorKind::shape, {"'q'", "size 4 in dimension 0", "[3, 512]"});
  expect(x, q, s_short, ErrorKind::shape, {"'q_scale'", "[4, 4]", "[2, 4]"});
  expect(x, q, s_bf16, ErrorKind::dtype, {"'q_scale'", "f32", "bf16"});
  // A [4, 4] view of [4, 8] storage is fine; one whose rows overlap is not.
  EXPECT_NO_THROW(ops::moe_fp8_quantize(x, q, s_wide.view().slice(1, 2, 6)));
  Tensor overlapping = s;
  overlapping.strides[0] = 2;
  expect(x, q, overlapping, ErrorKind::shape, {"'q_scale'", "row stride >= 4", "row stride 2"});
  expect(x, q, fake_cuda(DType::f32, {4, 4}), ErrorKind::device, {"'q_scale'", "cpu", "cuda:0"});
}

TEST(MoeGatherFp8Errors, BadArguments) {
  const Device cpu = Device::cpu();
  const int k = 2;
  GatherProblem p = gather_problem(3, k, 256, 1);
  const Tensor x = as_fp8(p.x);
  OwnedTensor xs(DType::f8e4m3, {6, 256}, cpu), s(DType::f32, {2, 6}, cpu);
  EXPECT_NO_THROW(ops::moe_gather_fp8(x, p.x_scale, p.pairs, k, xs, s));
  const char* op = "moe_gather_fp8";
  struct Args {
    Tensor x, x_scale, pairs;
    int k;
    Tensor xs, xs_scale;
  };
  auto expect = [&](auto&& mutate, ErrorKind kind, std::vector<std::string> fragments) {
    Args a{x, p.x_scale, p.pairs, k, xs, s};
    mutate(a);
    fragments.insert(fragments.begin(), op);
    expect_error([&] { ops::moe_gather_fp8(a.x, a.x_scale, a.pairs, a.k, a.xs, a.xs_scale); },
                 kind, fragments);
  };
  OwnedTensor x_k(DType::f8e4m3, {3, 100}, cpu), sc_t(DType::f32, {2, 4}, cpu);
  OwnedTensor xs_bf16(DType::bf16, {6, 256}, cpu), pairs_short(DType::i32, {5}, cpu);
  OwnedTensor s_short(DType::f32, {1, 6}, cpu);
  expect([&](Args& a) { a.x = p.x; }, ErrorKind::dtype, {"'x'", "f8e4m3", "u8"});
  expect([&](Args& a) { a.x = x_k; }, ErrorKind::shape, {"'x'", "multiple of 128", "[3, 100]"});
  expect([&](Args& a) { a.k = 0; }, ErrorKind::invalid_argument, {"'k'", "k >= 1", "0"});
  expect([&](Args& a) { a.x_scale = sc_t; }, ErrorKind::shape, {"'x_scale'", "[2, 3]", "[2, 4]"});
  expect([&](Args& a) { a.pairs = pairs_short; }, ErrorKind::shape, {"'sorted_pairs'", "[6]", "[5]"});
  expect([&](Args& a) { a.xs = xs_bf16; }, ErrorKind::dtype, {"'xs'", "f8e4m3", "bf16"});
  expect([&](Args& a) { a.xs_scale = s_short; }, ErrorKind::shape, {"'xs_scale'", "[2, 6]", "[1, 6]"});
  expect([&](Args& a) { a.xs = fake_cuda(DType::f8e4m3, {6, 256}); }, ErrorKind::device,
         {"'xs'", "cpu", "cuda:0"});
  p.pairs.view().ptr<int32_t>()[4] = 6;
  expect([](Args&) {}, ErrorKind::invalid_argument, {"'sorted_pairs'", "[0, 6)", "sorted_pairs[4] = 6"});
}

}  // namespace
}  // namespace braid::test
