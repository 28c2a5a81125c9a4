// argmax: CUDA against the CPU reference on rows with one planted maximum (so the answer is
// unique), ties and NaNs on both backends against hand-built expectations, and argument errors.
#include <cmath>
#include <random>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

// The smallest value of dtype t above v.
float next_up(DType t, float v) {
  float step = std::fabs(v) * 1e-9f + 1e-30f;
  while (quantize(t, v + step) <= v) step *= 2;
  return quantize(t, v + step);
}

// Random rows in which one random position holds a value one step above everything else, so
// the argmax is unique however the rest of the row ties. Returns the planted positions.
std::vector<int64_t> plant_unique_max(const OwnedTensor& x, int64_t rows, int64_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> where(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float max = -INFINITY;
    for (int64_t j = 0; j < d; ++j) max = std::fmax(max, load_as_float(x.data(), x.view().dtype, r * d + j));
    where[r] = std::uniform_int_distribution<int64_t>(0, d - 1)(rng);
    store_from_float(x.data(), x.view().dtype, r * d + where[r], next_up(x.view().dtype, max));
  }
  return where;
}

std::vector<int64_t> indices(const Tensor& out) {
  OwnedTensor host(out.dtype, {out.size(0)}, Device::cpu());
  copy(out, host.view());
  std::vector<int64_t> v(static_cast<size_t>(out.size(0)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = out.dtype == DType::i32 ? host.view().ptr<int32_t>()[i] : host.view().ptr<int64_t>()[i];
  return v;
}

struct ArgmaxCase {
  DType dtype, out_dtype;
  int64_t rows, d;
};

std::string case_name(const ArgmaxCase& c) {
  return std::string(dtype_name(c.dtype)) + "_to_" + std::string(dtype_name(c.out_dtype)) + "_" +
         std::to_string(c.rows) + "x" + std::to_string(c.d);
}
void PrintTo(const ArgmaxCase& c, std::ostream* os) { *os << case_name(c); }

class ArgmaxDiff : public ::testing::TestWithParam<ArgmaxCase> {};

TEST_P(ArgmaxDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto x = random_host(c.dtype, {c.rows, c.d}, seed, -4, 4);
  const auto planted = plant_unique_max(x, c.rows, c.d, seed + 1);
  auto ref = poisoned(c.out_dtype, {c.rows}, Device::cpu());
  ops::argmax(x, ref);
  EXPECT_EQ(indices(ref), planted);

  auto dx = to_device(x, Device::cuda());
  auto dout = poisoned(c.out_dtype, {c.rows}, Device::cuda());
  ops::argmax(dx, dout);
  EXPECT_EQ(indices(dout), indices(ref));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ArgmaxDiff,
    ::testing::Values(ArgmaxCase{DType::bf16, DType::i64, 1, 151936},  // Qwen2 vocab
                      ArgmaxCase{DType::f32, DType::i32, 3, 128256},   // Llama-3 vocab
                      ArgmaxCase{DType::f16, DType::i64, 4, 151936},
                      ArgmaxCase{DType::bf16, DType::i32, 5, 1},
                      ArgmaxCase{DType::f32, DType::i64, 7, 1000},
                      ArgmaxCase{DType::bf16, DType::i32, 33, 17},  // odd width: scalar path
                      ArgmaxCase{DType::f16, DType::i32, 2, 4097}),
    [](const auto& info) { return case_name(info.param); });

// Rows whose answer depends on the tie and NaN rules, with the expected index of each.
struct SpecialRows {
  OwnedTensor x;
  std::vector<int64_t> expected;
};

SpecialRows special_rows(DType t, int64_t d, uint64_t seed) {
  const int64_t rows = 7;
  SpecialRows s{random_host(t, {rows, d}, seed, -1, 1), {}};
  auto set = [&](int64_t r, int64_t j, float v) { store_from_float(s.x.data(), t, r * d + j, v); };
  // 0: every entry equal.
  for (int64_t j = 0; j < d; ++j) set(0, j, 0.5f);
  s.expected.push_back(0);
  // 1: the maximum at three places far apart (different threads and warps on the GPU).
  for (int64_t j : {d - 1, d / 2 + 3, int64_t{17}}) set(1, j, 2.0f);
  s.expected.push_back(17);
  // 2: the maximum twice in the last 16-byte vector.
  set(2, d - 1, 2.0f);
  set(2, d - 2, 2.0f);
  s.expected.push_back(d - 2);
  // 3: all -inf.
  for (int64_t j = 0; j < d; ++j) set(3, j, -INFINITY);
  s.expected.push_back(0);
  // 4: NaN beats +inf, and the first NaN wins.
  set(4, 0, INFINITY);
  set(4, d - 1, NAN);
  set(4, d / 2, NAN);
  s.expected.push_back(d / 2);
  // 5: a single NaN at the very end.
  set(5, d - 1, NAN);
  s.expected.push_back(d - 1);
  // 6: NaNs in several places, the first in thread 0's first vector.
  for (int64_t j : {d - 1, d / 3 + 1, int64_t{5}}) set(6, j, NAN);
  s.expected.push_back(5);
  return s;
}

TEST(ArgmaxReference, TiesGoToTheLowestIndexAndNaNIsLargest) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    auto s = special_rows(t, 100, fresh_seed());
    auto out = poisoned(DType::i64, {7}, Device::cpu());
    ops::argmax(s.x, out);
    EXPECT_EQ(indices(out), s.expected);
  }
}

TEST(ArgmaxReference, KnownVector) {
  const float values[] = {0.5f, -1.0f, 7.0f, 2.0f, 7.0f, -7.5f};
  OwnedTensor x(DType::f32, {6}, Device::cpu());
  for (int j = 0; j < 6; ++j) x.view().ptr<float>()[j] = values[j];
  auto out = poisoned(DType::i32, {1}, Device::cpu());
  ops::argmax(x, out);
  EXPECT_EQ(out.view().ptr<int32_t>()[0], 2);
}

TEST(ArgmaxCuda, TiesGoToTheLowestIndexAndNaNIsLargest) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (int64_t d : {100, 1001, 151936}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " d " + std::to_string(d));
      auto s = special_rows(t, d, seed);
      auto dx = to_device(s.x, Device::cuda());
      auto dout = poisoned(DType::i32, {7}, Device::cuda());
      ops::argmax(dx, dout);
      EXPECT_EQ(indices(dout), s.expected);
    }
}

TEST(ArgmaxErrors, NameTheArgument) {
  OwnedTensor x(DType::bf16, {2, 8}, Device::cpu()), out(DType::i64, {2}, Device::cpu());
  OwnedTensor x_i32(DType::i32, {2, 8}, Device::cpu()), x_empty(DType::bf16, {2, 0}, Device::cpu());
  OwnedTensor out_f32(DType::f32, {2}, Device::cpu()), out_bad(DType::i64, {3}, Device::cpu());
  OwnedTensor out_2d(DType::i64, {2, 1}, Device::cpu());
  expect_error([&] { ops::argmax(x_i32, out); }, ErrorKind::dtype, {"argmax", "'x'", "i32"});
  expect_error([&] { ops::argmax(x, out_f32); }, ErrorKind::dtype, {"'out'", "i32 or i64", "f32"});
  expect_error([&] { ops::argmax(x, out_bad); }, ErrorKind::shape, {"'out'", "[2]", "[3]"});
  expect_error([&] { ops::argmax(x, out_2d); }, ErrorKind::shape, {"'out'", "[2, 1]"});
  expect_error([&] { ops::argmax(x_empty, out); }, ErrorKind::shape, {"'x'", "non-empty", "[2, 0]"});
  Tensor out_cuda = fake_cuda(DType::i64, {2});
  expect_error([&] { ops::argmax(x, out_cuda); }, ErrorKind::device, {"'out'", "cpu", "cuda:0"});
}

}  // namespace
}  // namespace braid::test
