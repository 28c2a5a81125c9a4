// moe_grouped_gemm: the reference against a plain per-row formula, CUDA (the Hopper kernel and
// the simple one) against the reference element by element, rows past offsets[E] left alone,
// and argument errors.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

using ops::MoeActivation;

// Offsets of `rows` rows spread over `experts` experts at random (some empty), or all in expert
// experts / 2 when skewed.
OwnedTensor random_offsets(int64_t rows, int64_t experts, uint64_t seed, bool skewed) {
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

struct GemmCase {
  DType dtype;
  int64_t rows;        // M: rows of x and y
  int64_t valid_rows;  // offsets[E]: rows past it belong to no expert
  int64_t experts, n, k;
  MoeActivation act;
  bool skewed = false;
  int64_t x_pad = 0, y_pad = 0;  // extra elements per row (strided views)
};

std::string case_name(const GemmCase& c) {
  return std::string(dtype_name(c.dtype)) + "_M" + std::to_string(c.rows) + "_V" +
         std::to_string(c.valid_rows) + "_E" + std::to_string(c.experts) + "_N" +
         std::to_string(c.n) + "_K" + std::to_string(c.k) +
         (c.act == MoeActivation::swiglu ? "_swiglu" : "") + (c.skewed ? "_skewed" : "") +
         (c.x_pad || c.y_pad ? "_strided" : "");
}
void PrintTo(const GemmCase& c, std::ostream* os) { *os << case_name(c); }

struct GemmProblem {
  OwnedTensor x_storage, w, offsets;
};

// x of [M, K + x_pad] storage (the op sees the first K columns), w scaled for unit-size outputs.
GemmProblem make_problem(const GemmCase& c, uint64_t seed) {
  const float scale = 2.0f / std::sqrt(static_cast<float>(c.k));
  return {random_host(c.dtype, {c.rows, c.k + c.x_pad}, seed),
          random_host(c.dtype, {c.experts, c.n, c.k}, seed + 1, -scale, scale),
          random_offsets(c.valid_rows, c.experts, seed + 2, c.skewed)};
}

int64_t out_cols(const GemmCase& c) { return c.act == MoeActivation::swiglu ? c.n / 2 : c.n; }

// Runs the op on `device` into a poisoned y (NaN everywhere) and returns y's [M, out_cols] view
// as floats, padding columns dropped.
std::vector<float> run_gemm(const GemmCase& c, const GemmProblem& p, Device device) {
  auto xs = to_device(p.x_storage, device), w = to_device(p.w, device);
  auto offsets = to_device(p.offsets, device);
  auto y_storage = poisoned(c.dtype, {c.rows, out_cols(c) + c.y_pad}, device);
  const Tensor x = xs.view().slice(1, 0, c.k), y = y_storage.view().slice(1, 0, out_cols(c));
  ops::moe_grouped_gemm(x, w, offsets, c.act, y);
  const std::vector<float> all = to_floats(y_storage);
  std::vector<float> out;
  for (int64_t r = 0; r < c.rows; ++r)
    out.insert(out.end(), all.begin() + r * (out_cols(c) + c.y_pad),
               all.begin() + r * (out_cols(c) + c.y_pad) + out_cols(c));
  return out;
}

// The largest rounding step of the dtype near 1 (bf16 2^-8, f16 2^-11), and fp32's tolerance.
double step(DType t) {
  return t == DType::bf16 ? 1.0 / 256 : t == DType::f16 ? 1.0 / 2048 : 1e-5;
}

// Element by element: rows with an expert within a few rounding steps (the sums' order differs,
// and for SwiGLU a flipped rounding of g or u moves h by a step), rows past offsets[E] untouched
// (still NaN).
void expect_matches(const GemmCase& c, const std::vector<float>& got, const std::vector<float>& ref,
                    int64_t valid_rows) {
  ASSERT_EQ(got.size(), ref.size());
  const int64_t cols = out_cols(c);
  double sq = 0;
  for (int64_t i = 0; i < valid_rows * cols; ++i) sq += double{ref[i]} * ref[i];
  const double rms = valid_rows > 0 ? std::sqrt(sq / static_cast<double>(valid_rows * cols)) : 0;
  int bad = 0;
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const float g = got[r * cols + j], w = ref[r * cols + j];
      if (r >= valid_rows) {
        if (!std::isnan(g) && bad++ < 5) ADD_FAILURE() << "row " << r << " past offsets[E] written";
        continue;
      }
      const double tol = 4 * step(c.dtype) * (std::fabs(w) + rms);
      if (!(std::fabs(g - w) <= tol) && bad++ < 5)
        ADD_FAILURE() << "y[" << r << ", " << j << "] = " << g << ", reference " << w;
    }
  EXPECT_EQ(bad, 0);
}

class MoeGroupedGemmDiff : public ::testing::TestWithParam<GemmCase> {};

TEST_P(MoeGroupedGemmDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const GemmCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const GemmProblem p = make_problem(c, seed);
  const auto ref = run_gemm(c, p, Device::cpu());
  const auto got = run_gemm(c, p, Device::cuda());
  expect_matches(c, got, ref, c.valid_rows);
}

constexpr DType bf16 = DType::bf16, f16 = DType::f16, f32 = DType::f32;
constexpr MoeActivation none = MoeActivation::none, swiglu = MoeActivation::swiglu;

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeGroupedGemmDiff,
    ::testing::Values(
        // The Hopper kernel: several row and column tiles per expert, empty experts.
        GemmCase{bf16, 700, 700, 8, 512, 256, none},
        GemmCase{bf16, 700, 700, 8, 512, 256, swiglu},
        GemmCase{f16, 700, 700, 8, 512, 256, swiglu},
        GemmCase{bf16, 1000, 1000, 60, 320, 192, none},  // columns past N in the last tile
        GemmCase{bf16, 300, 300, 5, 2 * 96, 200, swiglu},  // I = 96; K not a multiple of 64
        GemmCase{bf16, 64, 64, 128, 2 * 768, 512, swiglu},  // decode-like: most experts empty
        GemmCase{bf16, 1500, 1500, 7, 256, 128, none, true},  // one expert takes every row
        GemmCase{bf16, 500, 430, 16, 256, 128, swiglu},       // rows past offsets[E]
        GemmCase{bf16, 300, 300, 8, 384, 256, none, false, 8, 24},  // strided x and y
        GemmCase{bf16, 520, 520, 16, 2 * 1024, 512, swiglu},  // 2 column tiles of h, 8 slices
        GemmCase{f16, 260, 260, 3, 4096, 64, none},           // wide N, one slice
        // The simple kernel: f32, K < 64, K not a multiple of 8.
        GemmCase{f32, 90, 90, 5, 40, 30, swiglu},
        GemmCase{f32, 90, 80, 5, 40, 30, none},
        GemmCase{bf16, 90, 90, 5, 2 * 20, 36, swiglu},
        GemmCase{f16, 90, 90, 5, 40, 100, none},
        GemmCase{bf16, 0, 0, 4, 64, 64, none}),  // no rows
    [](const auto& info) { return case_name(info.param); });

// The reference against the formula written per row, with the expert looked up per row.
TEST(MoeGroupedGemmReference, MatchesPerRowFormula) {
  const GemmCase c{f32, 9, 8, 3, 6, 5, swiglu};
  const GemmProblem p = make_problem(c, 42);
  const auto got = run_gemm(c, p, Device::cpu());
  const int32_t* o = p.offsets.view().ptr<int32_t>();
  const auto x = to_floats(p.x_storage), w = to_floats(p.w);
  for (int64_t r = 0; r < c.valid_rows; ++r) {
    const int64_t e = std::upper_bound(o, o + c.experts + 1, r) - o - 1;
    for (int64_t j = 0; j < c.n / 2; ++j) {
      double g = 0, u = 0;
      for (int64_t i = 0; i < c.k; ++i) {
        g += double{x[r * c.k + i]} * w[(e * c.n + j) * c.k + i];
        u += double{x[r * c.k + i]} * w[(e * c.n + c.n / 2 + j) * c.k + i];
      }
      EXPECT_NEAR(got[r * (c.n / 2) + j], g / (1 + std::exp(-g)) * u, 1e-5) << r << ", " << j;
    }
  }
  EXPECT_TRUE(std::isnan(got[8 * (c.n / 2)]));  // row 8 is past offsets[E] = 8
}

TEST(MoeGroupedGemmReference, RoundsGateAndUpToTheDtype) {
  // One row, one expert, K = 1: g = 1 * w_g and u = 1 * w_u exactly, so h must equal
  // bf16(silu(w_g) * w_u) computed from the bf16 weights.
  const GemmCase c{bf16, 1, 1, 1, 2, 1, swiglu};
  GemmProblem p = make_problem(c, 7);
  store_from_float(p.x_storage.data(), bf16, 0, 1.0f);
  store_from_float(p.w.data(), bf16, 0, 2.5f);
  store_from_float(p.w.data(), bf16, 1, -1.25f);
  const auto got = run_gemm(c, p, Device::cpu());
  EXPECT_EQ(got[0], quantize(bf16, 2.5f / (1.0f + std::exp(-2.5f)) * -1.25f));
}

class MoeGroupedGemmErrors : public ::testing::Test {
 protected:
  // A valid problem: M = 6, K = 8, E = 3, N = 4, bf16.
  OwnedTensor x{bf16, {6, 8}, Device::cpu()}, w{bf16, {3, 4, 8}, Device::cpu()};
  OwnedTensor offsets{DType::i32, {4}, Device::cpu()}, y{bf16, {6, 4}, Device::cpu()};

  void SetUp() override {
    fill_bytes(x, 0);
    fill_bytes(w, 0);
    const int32_t o[4] = {0, 2, 2, 5};
    std::copy(o, o + 4, offsets.view().ptr<int32_t>());
  }
  struct Args {
    Tensor x, w, offsets;
    MoeActivation act;
    Tensor y;
  };
  Args valid() const { return {x, w, offsets, none, y}; }
  static void run(const Args& a) { ops::moe_grouped_gemm(a.x, a.w, a.offsets, a.act, a.y); }
  template <typename F>
  void expect(F&& mutate, ErrorKind kind, std::vector<std::string> fragments) {
    Args a = valid();
    mutate(a);
    fragments.insert(fragments.begin(), "moe_grouped_gemm");
    expect_error([&] { run(a); }, kind, fragments);
  }
};

TEST_F(MoeGroupedGemmErrors, ValidProblemRuns) { EXPECT_NO_THROW(run(valid())); }

TEST_F(MoeGroupedGemmErrors, Shapes) {
  OwnedTensor x_i32(DType::i32, {6, 8}, Device::cpu()), x_k0(bf16, {6, 0}, Device::cpu());
  OwnedTensor w_f16(f16, {3, 4, 8}, Device::cpu()), w_k(bf16, {3, 4, 9}, Device::cpu());
  OwnedTensor w_2d(bf16, {12, 8}, Device::cpu()), w_odd(bf16, {3, 5, 8}, Device::cpu());
  OwnedTensor w_many(bf16, {513, 4, 8}, Device::cpu()), off_short(DType::i32, {3}, Device::cpu());
  OwnedTensor off_i64(DType::i64, {4}, Device::cpu()), y_wide(bf16, {6, 5}, Device::cpu());
  OwnedTensor y_half(bf16, {6, 2}, Device::cpu()), w_k0(bf16, {3, 4, 0}, Device::cpu());

  expect([&](Args& a) { a.x = x_i32; }, ErrorKind::dtype, {"'x'", "i32"});
  expect([&](Args& a) { a.x = x_k0; a.w = w_k0; }, ErrorKind::shape, {"'x'", "K >= 1"});
  expect([&](Args& a) { a.w = w_f16; }, ErrorKind::dtype, {"'w'", "bf16", "f16"});
  expect([&](Args& a) { a.w = w_k; }, ErrorKind::shape, {"'w'", "size 8 in dimension 2"});
  expect([&](Args& a) { a.w = w_2d; }, ErrorKind::shape, {"'w'", "3 dimensions"});
  expect([&](Args& a) { a.w = w_many; }, ErrorKind::shape, {"'w'", "1 <= E <= 512"});
  expect([&](Args& a) { a.w = w_odd; a.act = swiglu; }, ErrorKind::shape, {"'w'", "2 I", "[3, 5, 8]"});
  expect([&](Args& a) { a.offsets = off_short; }, ErrorKind::shape, {"'expert_offsets'", "[4]", "[3]"});
  expect([&](Args& a) { a.offsets = off_i64; }, ErrorKind::dtype, {"'expert_offsets'", "i32", "i64"});
  expect([&](Args& a) { a.y = y_wide; }, ErrorKind::shape, {"'y'", "[6, 4]", "[6, 5]"});
  expect([&](Args& a) { a.act = swiglu; }, ErrorKind::shape, {"'y'", "[6, 2]", "[6, 4]"});
  expect([&](Args& a) { a.act = static_cast<MoeActivation>(7); }, ErrorKind::invalid_argument,
         {"'activation'", "swiglu", "7"});
  expect([&](Args& a) { a.w.strides[0] *= 2; }, ErrorKind::shape, {"'w'", "contiguous"});
  Args a = valid();  // SwiGLU's y is half as wide
  a.act = swiglu;
  a.y = y_half;
  EXPECT_NO_THROW(run(a));
}

TEST_F(MoeGroupedGemmErrors, OffsetsOnTheCpu) {
  int32_t* o = offsets.view().ptr<int32_t>();
  o[2] = 1;
  expect([](Args&) {}, ErrorKind::invalid_argument, {"'expert_offsets'", "non-decreasing", "expert_offsets[2] = 1"});
  o[2] = 2;
  o[3] = 7;
  expect([](Args&) {}, ErrorKind::invalid_argument, {"'expert_offsets'", "<= 6", "expert_offsets[3] = 7"});
  o[3] = 5;
  o[0] = -1;
  expect([](Args&) {}, ErrorKind::invalid_argument, {"'expert_offsets'", "expert_offsets[0] = -1"});
}

TEST_F(MoeGroupedGemmErrors, Devices) {
  Tensor w_cuda = fake_cuda(bf16, {3, 4, 8});
  expect([&](Args& a) { a.w = w_cuda; }, ErrorKind::device, {"'w'", "cpu", "cuda:0"});
}

}  // namespace
}  // namespace braid::test
