// softmax: CUDA against the CPU reference (both row-per-warp and row-per-block kernels, vocab-
// sized rows, -inf masking), the reference against hand-computed values, and argument errors.
#include <cmath>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct SoftmaxCase {
  DType dtype, out_dtype;
  int64_t rows, d;
};

std::string case_name(const SoftmaxCase& c) {
  return std::string(dtype_name(c.dtype)) + "_to_" + std::string(dtype_name(c.out_dtype)) + "_" +
         std::to_string(c.rows) + "x" + std::to_string(c.d);
}
void PrintTo(const SoftmaxCase& c, std::ostream* os) { *os << case_name(c); }

class SoftmaxDiff : public ::testing::TestWithParam<SoftmaxCase> {};

TEST_P(SoftmaxDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto x = random_host(c.dtype, {c.rows, c.d}, seed, -8, 8);
  auto ref = poisoned(c.out_dtype, {c.rows, c.d}, Device::cpu());
  ops::softmax(x, ref);

  auto dx = to_device(x, Device::cuda());
  auto dout = poisoned(c.out_dtype, {c.rows, c.d}, Device::cuda());
  ops::softmax(dx, dout);
  EXPECT_LE(rel_error(to_floats(dout), to_floats(ref)), tolerance(c.out_dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SoftmaxDiff,
    ::testing::Values(SoftmaxCase{DType::f32, DType::f32, 3, 151936},  // Qwen2 vocab
                      SoftmaxCase{DType::bf16, DType::f32, 2, 151936},
                      SoftmaxCase{DType::bf16, DType::bf16, 4, 151936},
                      SoftmaxCase{DType::f16, DType::f32, 1, 128256},  // Llama-3 vocab
                      SoftmaxCase{DType::f32, DType::f32, 5, 1},
                      SoftmaxCase{DType::f16, DType::f16, 9, 7},
                      SoftmaxCase{DType::bf16, DType::bf16, 64, 128},
                      SoftmaxCase{DType::f32, DType::f32, 3, 1000},
                      SoftmaxCase{DType::bf16, DType::f32, 1, 1000},
                      SoftmaxCase{DType::bf16, DType::bf16, 4, 1025},  // first row-per-block width
                      SoftmaxCase{DType::f16, DType::f32, 2, 4097}),   // odd: scalar path
    [](const auto& info) { return case_name(info.param); });

// Rows with -inf entries (as from a mask) and a row of only -inf, in both kernel shapes.
TEST(SoftmaxCuda, MinusInfinityEntries) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t d : {100, 5000}) {
    SCOPED_TRACE("d " + std::to_string(d));
    auto x = random_host(DType::f32, {3, d}, seed, -4, 4);
    float* xp = x.view().ptr<float>();
    for (int64_t j = 0; j < d; ++j) {
      xp[j] = -INFINITY;                        // row 0: all -inf
      if (j % 3 != 1) xp[d + j] = -INFINITY;    // row 1: two thirds masked
    }
    xp[2 * d + d - 1] = -INFINITY;              // row 2: the last entry masked
    auto ref = poisoned(DType::f32, {3, d}, Device::cpu());
    ops::softmax(x, ref);
    auto dx = to_device(x, Device::cuda());
    auto dout = poisoned(DType::f32, {3, d}, Device::cuda());
    ops::softmax(dx, dout);
    const auto got = to_floats(dout), want = to_floats(ref);
    for (int64_t j = 0; j < d; ++j) ASSERT_TRUE(std::isnan(got[j])) << "all -inf row, column " << j;
    const std::vector<float> got_rest(got.begin() + d, got.end()), want_rest(want.begin() + d, want.end());
    EXPECT_LE(rel_error(got_rest, want_rest), tolerance(DType::f32));
    for (int64_t j = 0; j < d; ++j)
      if (j % 3 != 1) EXPECT_EQ(got[d + j], 0.0f) << "masked column " << j;
  }
}

TEST(SoftmaxReference, MatchesHandValues) {
  OwnedTensor x(DType::f32, {3, 2}, Device::cpu());
  float* xp = x.view().ptr<float>();
  const float ln2 = std::log(2.0f);
  xp[0] = 0; xp[1] = ln2;                  // [1/3, 2/3]
  xp[2] = 1000; xp[3] = 1000 + ln2;        // exp(1000) overflows: needs the max subtracted
  xp[4] = -5; xp[5] = -5;                  // equal entries: [1/2, 1/2]
  auto out = poisoned(DType::f32, {3, 2}, Device::cpu());
  ops::softmax(x, out);
  const float* o = out.view().ptr<float>();
  EXPECT_NEAR(o[0], 1.0 / 3, 1e-6);
  EXPECT_NEAR(o[1], 2.0 / 3, 1e-6);
  // 1000 + ln2 is rounded in fp32, so compare with the difference actually stored.
  const double gap = static_cast<double>(xp[3]) - xp[2];
  EXPECT_NEAR(o[2], 1.0 / (1.0 + std::exp(gap)), 1e-6);
  EXPECT_NEAR(o[3], 1.0 / (1.0 + std::exp(-gap)), 1e-6);
  EXPECT_EQ(o[4], 0.5f);
  EXPECT_EQ(o[5], 0.5f);
}

TEST(SoftmaxReference, RowsSumToOneAndMinusInfinityGivesZero) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto x = random_host(DType::f32, {4, 9}, seed, -10, 10);
  x.view().ptr<float>()[4] = -INFINITY;
  auto out = poisoned(DType::f32, {4, 9}, Device::cpu());
  ops::softmax(x, out);
  const float* o = out.view().ptr<float>();
  EXPECT_EQ(o[4], 0.0f);
  for (int r = 0; r < 4; ++r) {
    double sum = 0;
    for (int j = 0; j < 9; ++j) sum += o[r * 9 + j];
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << r;
  }
}

// Documented behaviour (as torch.softmax): a row of only -inf has no maximum to subtract and
// comes out NaN.
TEST(SoftmaxReference, AllMinusInfinityRowIsNaN) {
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    OwnedTensor x(t, {1, 4}, Device::cpu()), out(t, {1, 4}, Device::cpu());
    for (int j = 0; j < 4; ++j) {
      store_from_float(x.data(), t, j, -INFINITY);
      store_from_float(out.data(), t, j, 0.0f);  // not poisoned: the NaN must be written
    }
    ops::softmax(x, out);
    for (float v : to_floats(out)) EXPECT_TRUE(std::isnan(v));
  }
}

TEST(SoftmaxErrors, NameTheArgument) {
  OwnedTensor x(DType::bf16, {2, 8}, Device::cpu()), out(DType::bf16, {2, 8}, Device::cpu());
  OwnedTensor x_i32(DType::i32, {2, 8}, Device::cpu()), out_f16(DType::f16, {2, 8}, Device::cpu());
  OwnedTensor out_bad(DType::f32, {2, 9}, Device::cpu()), x_f32(DType::f32, {2, 8}, Device::cpu());
  expect_error([&] { ops::softmax(x_i32, out); }, ErrorKind::dtype, {"softmax", "'x'", "i32"});
  expect_error([&] { ops::softmax(x, out_f16); }, ErrorKind::dtype,
               {"softmax", "'out'", "f32 or bf16", "f16"});
  expect_error([&] { ops::softmax(x_f32, out); }, ErrorKind::dtype, {"'out'", "f32", "bf16"});
  expect_error([&] { ops::softmax(x, out_bad); }, ErrorKind::shape, {"'out'", "[2, 8]", "[2, 9]"});
  Tensor x_cuda = fake_cuda(DType::bf16, {2, 8});
  expect_error([&] { ops::softmax(x_cuda, out); }, ErrorKind::device, {"'out'", "cuda:0", "cpu"});
}

}  // namespace
}  // namespace braid::test
