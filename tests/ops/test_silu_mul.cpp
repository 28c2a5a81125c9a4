// silu_mul: CUDA against the CPU reference, the reference against the formula, and argument
// errors.
#include <cmath>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct SiluCase {
  DType dtype;
  std::vector<int64_t> lead;  // leading dimensions of x and out
  int64_t d;                  // x's last dimension is 2 * d
};

std::string case_name(const SiluCase& c) {
  std::string name = std::string(dtype_name(c.dtype)) + "_";
  for (int64_t s : c.lead) name += std::to_string(s) + "x";
  return name + std::to_string(c.d);
}
void PrintTo(const SiluCase& c, std::ostream* os) { *os << case_name(c); }

std::vector<int64_t> with_last(std::vector<int64_t> lead, int64_t last) {
  lead.push_back(last);
  return lead;
}

class SiluMulDiff : public ::testing::TestWithParam<SiluCase> {};

TEST_P(SiluMulDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // [-8, 8) covers both tails of silu: ~0 for negative gates, ~identity for positive ones.
  auto x = random_host(c.dtype, with_last(c.lead, 2 * c.d), seed, -8, 8);
  auto ref = poisoned(c.dtype, with_last(c.lead, c.d), Device::cpu());
  ops::silu_mul(x, ref);

  auto dx = to_device(x, Device::cuda());
  auto dout = poisoned(c.dtype, with_last(c.lead, c.d), Device::cuda());
  ops::silu_mul(dx, dout);
  EXPECT_LE(rel_error(to_floats(dout), to_floats(ref)), tolerance(c.dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SiluMulDiff,
    ::testing::Values(SiluCase{DType::bf16, {3}, 4864},   // Qwen2-0.5B intermediate
                      SiluCase{DType::bf16, {1}, 11008},  // Llama-2-7B intermediate, one token
                      SiluCase{DType::f16, {5}, 11008}, SiluCase{DType::f32, {2}, 4864},
                      SiluCase{DType::f32, {7}, 1},       // scalar path, tiny rows
                      SiluCase{DType::bf16, {33}, 17},    // odd width: scalar path
                      SiluCase{DType::f16, {2, 3}, 96},   // 3-d input
                      SiluCase{DType::bf16, {70000}, 8}), // rows past gridDim.y's 65535
    [](const auto& info) { return case_name(info.param); });

TEST(SiluMulReference, MatchesFormula) {
  // gate = [0, 1, -2], up = [3, 4, 5]
  const float values[] = {0, 1, -2, 3, 4, 5};
  OwnedTensor x(DType::f32, {1, 6}, Device::cpu());
  for (int i = 0; i < 6; ++i) x.view().ptr<float>()[i] = values[i];
  auto out = poisoned(DType::f32, {1, 3}, Device::cpu());
  ops::silu_mul(x, out);
  const float* o = out.view().ptr<float>();
  EXPECT_EQ(o[0], 0.0f);  // silu(0) = 0
  EXPECT_NEAR(o[1], 4.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(o[2], 5.0 * -2.0 / (1.0 + std::exp(2.0)), 1e-6);
}

TEST(SiluMulReference, RoundsOnceToTheOutputType) {
  // silu(g) * u in fp32, then one rounding to bf16; rounding silu(g) first would differ for
  // many inputs.
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t rows = 4, d = 64;
  auto x = random_host(DType::bf16, {rows, 2 * d}, seed, -4, 4);
  auto out = poisoned(DType::bf16, {rows, d}, Device::cpu());
  ops::silu_mul(x, out);
  const auto xf = to_floats(x), of = to_floats(out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < d; ++j) {
      const float g = xf[r * 2 * d + j], u = xf[r * 2 * d + d + j];
      EXPECT_EQ(of[r * d + j], quantize(DType::bf16, g / (1.0f + std::exp(-g)) * u))
          << "row " << r << ", column " << j;
    }
}

TEST(SiluMulErrors, NameTheArgument) {
  OwnedTensor x(DType::bf16, {2, 16}, Device::cpu()), out(DType::bf16, {2, 8}, Device::cpu());
  OwnedTensor x_odd(DType::bf16, {2, 15}, Device::cpu()), x_i32(DType::i32, {2, 16}, Device::cpu());
  OwnedTensor out_full(DType::bf16, {2, 16}, Device::cpu()), out_rows(DType::bf16, {3, 8}, Device::cpu());
  OwnedTensor out_f32(DType::f32, {2, 8}, Device::cpu());
  expect_error([&] { ops::silu_mul(x_odd, out); }, ErrorKind::shape,
               {"silu_mul", "'x'", "even", "[2, 15]"});
  expect_error([&] { ops::silu_mul(x_i32, out); }, ErrorKind::dtype, {"'x'", "i32"});
  expect_error([&] { ops::silu_mul(x, out_full); }, ErrorKind::shape, {"'out'", "[2, 8]", "[2, 16]"});
  expect_error([&] { ops::silu_mul(x, out_rows); }, ErrorKind::shape, {"'out'", "[2, 8]", "[3, 8]"});
  expect_error([&] { ops::silu_mul(x, out_f32); }, ErrorKind::dtype, {"'out'", "bf16", "f32"});
  Tensor out_cuda = fake_cuda(DType::bf16, {2, 8});
  expect_error([&] { ops::silu_mul(x, out_cuda); }, ErrorKind::device, {"'out'", "cpu", "cuda:0"});
}

}  // namespace
}  // namespace braid::test
