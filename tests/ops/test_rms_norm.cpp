// rms_norm / add_rms_norm: CUDA against the CPU reference, the reference against a direct
// formula, and argument errors.
#include <cmath>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct NormCase {
  DType dtype;
  int64_t rows, d;
};

std::string case_name(const NormCase& c) {
  return std::string(dtype_name(c.dtype)) + "_" + std::to_string(c.rows) + "x" +
         std::to_string(c.d);
}
void PrintTo(const NormCase& c, std::ostream* os) { *os << case_name(c); }

class RmsNormDiff : public ::testing::TestWithParam<NormCase> {};

TEST_P(RmsNormDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto x = random_host(c.dtype, {c.rows, c.d}, seed, -2, 2);
  auto w = random_host(c.dtype, {c.d}, seed + 1, 0.5f, 1.5f);
  auto ref = poisoned(c.dtype, {c.rows, c.d}, Device::cpu());
  ops::rms_norm(x, w, 1e-6f, ref);

  auto dx = to_device(x, Device::cuda());
  auto dw = to_device(w, Device::cuda());
  auto dout = poisoned(c.dtype, {c.rows, c.d}, Device::cuda());
  ops::rms_norm(dx, dw, 1e-6f, dout);
  EXPECT_LE(rel_error(to_floats(dout), to_floats(ref)), tolerance(c.dtype));
}

TEST_P(RmsNormDiff, FusedResidualCudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto x = random_host(c.dtype, {c.rows, c.d}, seed, -2, 2);
  auto res = random_host(c.dtype, {c.rows, c.d}, seed + 2, -2, 2);
  auto w = random_host(c.dtype, {c.d}, seed + 1, 0.5f, 1.5f);
  auto dx = to_device(x, Device::cuda());
  auto dres = to_device(res, Device::cuda());
  auto dw = to_device(w, Device::cuda());

  auto ref = poisoned(c.dtype, {c.rows, c.d}, Device::cpu());
  ops::add_rms_norm(x, res, w, 1e-5f, ref);  // updates res in place
  auto dout = poisoned(c.dtype, {c.rows, c.d}, Device::cuda());
  ops::add_rms_norm(dx, dres, dw, 1e-5f, dout);
  EXPECT_LE(rel_error(to_floats(dout), to_floats(ref)), tolerance(c.dtype));
  EXPECT_LE(rel_error(to_floats(dres), to_floats(res)), tolerance(c.dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RmsNormDiff,
    ::testing::Values(NormCase{DType::f32, 1, 64}, NormCase{DType::bf16, 7, 4096},
                      NormCase{DType::bf16, 33, 896}, NormCase{DType::f16, 5, 2048},
                      NormCase{DType::bf16, 3, 1001},  // odd width: scalar path
                      NormCase{DType::f32, 129, 5120}, NormCase{DType::bf16, 1, 8192}),
    [](const auto& info) { return case_name(info.param); });

TEST(RmsNormReference, MatchesFormulaInFp32) {
  const uint64_t seed = fresh_seed();
  auto x = random_host(DType::f32, {3, 10}, seed);
  auto w = random_host(DType::f32, {10}, seed + 1);
  auto out = poisoned(DType::f32, {3, 10}, Device::cpu());
  ops::rms_norm(x, w, 1e-6f, out);
  for (int r = 0; r < 3; ++r) {
    double ss = 0;
    for (int j = 0; j < 10; ++j) ss += std::pow(x.view().ptr<float>()[r * 10 + j], 2);
    double inv = 1.0 / std::sqrt(ss / 10 + 1e-6);
    for (int j = 0; j < 10; ++j)
      EXPECT_NEAR(out.view().ptr<float>()[r * 10 + j],
                  x.view().ptr<float>()[r * 10 + j] * inv * w.view().ptr<float>()[j], 1e-5);
  }
}

TEST(RmsNormReference, StridedRowsAreRespected) {
  // x is a column slice of a wider tensor: rows of 16 in a row stride of 24.
  auto wide = random_host(DType::f32, {4, 24}, fresh_seed());
  Tensor x = wide.view().slice(1, 4, 20);
  auto w = random_host(DType::f32, {16}, fresh_seed());
  auto out = poisoned(DType::f32, {4, 16}, Device::cpu());
  ops::rms_norm(x, w, 1e-6f, out);
  auto xc = random_host(DType::f32, {4, 16}, 0);
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 16; ++j) xc.view().ptr<float>()[r * 16 + j] = wide.view().ptr<float>()[r * 24 + 4 + j];
  auto out2 = poisoned(DType::f32, {4, 16}, Device::cpu());
  ops::rms_norm(xc, w, 1e-6f, out2);
  EXPECT_EQ(to_floats(out), to_floats(out2));
}

TEST(RmsNormErrors, NameTheArgument) {
  OwnedTensor x(DType::bf16, {2, 8}, Device::cpu()), w(DType::bf16, {8}, Device::cpu()),
      out(DType::bf16, {2, 8}, Device::cpu());
  OwnedTensor w_bad(DType::bf16, {7}, Device::cpu()), w_f32(DType::f32, {8}, Device::cpu());
  OwnedTensor x_i32(DType::i32, {2, 8}, Device::cpu()), out_bad(DType::bf16, {2, 9}, Device::cpu());
  expect_error([&] { ops::rms_norm(x, w_bad, 1e-6f, out); }, ErrorKind::shape,
               {"rms_norm", "'weight'", "[8]", "[7]"});
  expect_error([&] { ops::rms_norm(x, w_f32, 1e-6f, out); }, ErrorKind::dtype,
               {"rms_norm", "'weight'", "bf16", "f32"});
  expect_error([&] { ops::rms_norm(x_i32, w, 1e-6f, out); }, ErrorKind::dtype, {"'x'", "i32"});
  expect_error([&] { ops::rms_norm(x, w, 1e-6f, out_bad); }, ErrorKind::shape, {"'out'", "[2, 9]"});
  expect_error([&] { ops::rms_norm(x, w, -1.0f, out); }, ErrorKind::invalid_argument, {"'eps'"});
  Tensor w_cuda = fake_cuda(DType::bf16, {8});
  expect_error([&] { ops::rms_norm(x, w_cuda, 1e-6f, out); }, ErrorKind::device,
               {"'weight'", "cpu", "cuda:0"});
  OwnedTensor res_bad(DType::bf16, {3, 8}, Device::cpu());
  expect_error([&] { ops::add_rms_norm(x, res_bad, w, 1e-6f, out); }, ErrorKind::shape,
               {"add_rms_norm", "'residual'"});
}

}  // namespace
}  // namespace braid::test

namespace braid::test {
namespace {

// Per-head q norm: q is the first q_heads*head_dim columns of a packed QKV output, seen as
// [tokens, heads, head_dim]. Every head row must be normalised on its own; K/V columns untouched.
Tensor head_view(const Tensor& packed, int64_t col0, int64_t heads, int64_t head_dim) {
  Tensor v = packed.slice(1, col0, col0 + heads * head_dim);
  v.ndim = 3;
  v.shape[1] = heads;
  v.shape[2] = head_dim;
  v.strides[0] = packed.strides[0];
  v.strides[1] = head_dim;
  v.strides[2] = 1;
  return v;
}

TEST(RmsNormHeads, ReferenceNormalisesEachHeadOfAPackedView) {
  const int64_t n = 3, heads = 4, hd = 16, width = (heads + 4) * hd;
  auto packed = random_host(DType::f32, {n, width}, fresh_seed(), -2, 2);
  auto before = to_floats(packed);
  auto w = random_host(DType::f32, {hd}, fresh_seed(), 0.5f, 1.5f);
  Tensor q = head_view(packed, 0, heads, hd);
  ops::rms_norm(q, w, 1e-6f, q);  // in place
  auto after = to_floats(packed);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      double ss = 0;
      for (int64_t j = 0; j < hd; ++j) ss += std::pow(before[t * width + h * hd + j], 2);
      const double inv = 1.0 / std::sqrt(ss / hd + 1e-6);
      for (int64_t j = 0; j < hd; ++j)
        EXPECT_NEAR(after[t * width + h * hd + j],
                    before[t * width + h * hd + j] * inv * w.view().ptr<float>()[j], 1e-5);
    }
    for (int64_t j = heads * hd; j < width; ++j) EXPECT_EQ(after[t * width + j], before[t * width + j]);
  }
}

TEST(RmsNormHeads, CudaMatchesReferenceOnPackedViews) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t hd : {64, 128, 40}) {
    const int64_t n = 7, heads = 6, kv = 2, width = (heads + 2 * kv) * hd;
    auto packed = random_host(DType::bf16, {n, width}, seed, -2, 2);
    auto w = random_host(DType::bf16, {hd}, seed + 1, 0.5f, 1.5f);
    auto dpacked = to_device(packed, Device::cuda());
    auto dw = to_device(w, Device::cuda());
    ops::rms_norm(head_view(packed, heads * hd, kv, hd), w, 1e-6f, head_view(packed, heads * hd, kv, hd));
    ops::rms_norm(head_view(dpacked, heads * hd, kv, hd), dw, 1e-6f,
                  head_view(dpacked, heads * hd, kv, hd));
    EXPECT_LE(rel_error(to_floats(dpacked), to_floats(packed)), tolerance(DType::bf16)) << hd;
  }
}

}  // namespace
}  // namespace braid::test
