// moe_grouped_gemm_fp8: the reference against a plain per-row formula, swiglu_gate_last against
// swiglu on swapped halves, an fp8 y against moe_fp8_quantize of the f32 y; CUDA against the
// reference on DeepSeek-like operands, with tolerances computed from the data; rows past
// offsets[E] left alone; argument errors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "ops/fp8_test_util.h"
#include "test_util.h"

namespace braid::test {
namespace {

using fp8::kB;
using ops::MoeActivation;

constexpr MoeActivation none = MoeActivation::none, swiglu = MoeActivation::swiglu,
                        gate_last = MoeActivation::swiglu_gate_last;
constexpr DType f32 = DType::f32, bf16 = DType::bf16, f8 = DType::f8e4m3;

struct Fp8GemmCase {
  int64_t rows;        // M
  int64_t valid_rows;  // offsets[E]: rows past it belong to no expert
  int64_t experts, n, k;
  int x_terms;         // R
  MoeActivation act;
  DType y_dtype;
  int y_terms = 1;     // R', for an f8e4m3 y
  bool skewed = false; // every row in one expert
  bool padded = false; // x, y and the scales as views of wider storage
};

std::string case_name(const Fp8GemmCase& c) {
  const char* act = c.act == none ? "none" : c.act == swiglu ? "swiglu" : "gatelast";
  return "M" + std::to_string(c.rows) + "_V" + std::to_string(c.valid_rows) + "_E" +
         std::to_string(c.experts) + "_N" + std::to_string(c.n) + "_K" + std::to_string(c.k) +
         "_R" + std::to_string(c.x_terms) + "_" + act + "_" + std::string(dtype_name(c.y_dtype)) +
         (c.y_dtype == f8 ? "x" + std::to_string(c.y_terms) : "") + (c.skewed ? "_skewed" : "") +
         (c.padded ? "_padded" : "");
}
void PrintTo(const Fp8GemmCase& c, std::ostream* os) { *os << case_name(c); }

int64_t out_cols(const Fp8GemmCase& c) { return c.act == none ? c.n : c.n / 2; }

struct Problem {
  fp8::Fp8Tensor x, w;
  OwnedTensor offsets;
};

Problem make_problem(const Fp8GemmCase& c, uint64_t seed) {
  return {fp8::activations(c.rows, c.k, c.x_terms, seed), fp8::weights(c.experts, c.n, c.k, seed + 1),
          fp8::offsets(c.valid_rows, c.experts, seed + 2, c.skewed)};
}

// A device copy of a host [rows, cols] tensor as a view of [rows, cols + pad] storage.
struct Padded {
  OwnedTensor storage;
  Tensor view;
};
Padded padded_copy(const Tensor& host, int64_t pad, Device device) {
  const int64_t rows = host.shape[0], cols = host.shape[1], elem = dtype_size(host.dtype);
  OwnedTensor wide(host.dtype, {rows, cols + pad}, Device::cpu());
  fill_bytes(wide, 0xFF);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(wide.data()) + r * (cols + pad) * elem,
                static_cast<const char*>(host.data) + r * cols * elem, cols * elem);
  Padded p{to_device(wide, device), {}};
  p.view = p.storage.view().slice(1, 0, cols);
  return p;
}

// What the op wrote, copied to the host: the storage (padding included) and the op's views of it.
struct Output {
  OwnedTensor y_storage, s_storage;
  Tensor y, y_scale;  // y_scale: an fp8 y only
};

// Runs the op on `device` into poisoned outputs (every byte 0xFF: NaN in every float type).
Output run(const Fp8GemmCase& c, const Problem& p, Device device, MoeActivation act,
           DType y_dtype, int y_terms) {
  const int64_t pad = c.padded ? 16 : 0, s_pad = c.padded ? 4 : 0;
  const Padded x = padded_copy(p.x.q, pad, device), xs = padded_copy(p.x.scale, s_pad, device);
  const OwnedTensor w = to_device(p.w.q, device), ws = to_device(p.w.scale, device);
  const OwnedTensor offsets = to_device(p.offsets, device);
  const int64_t cols = (act == none ? c.n : c.n / 2) * (y_dtype == f8 ? y_terms : 1);
  const int64_t y_pad = c.padded ? 16 / static_cast<int64_t>(dtype_size(y_dtype)) : 0;
  const OwnedTensor y = poisoned(y_dtype, {c.rows, cols + y_pad}, device);
  OwnedTensor ys;
  Tensor y_scale;  // none unless y is fp8
  if (y_dtype == f8) {
    ys = poisoned(f32, {cols / kB, c.rows + s_pad}, device);
    y_scale = ys.view().slice(1, 0, c.rows);
  }
  ops::moe_grouped_gemm_fp8(x.view, xs.view, w, ws, offsets, act, y.view().slice(1, 0, cols),
                            y_scale);
  Output out;
  out.y_storage = to_device(y, Device::cpu());
  out.y = out.y_storage.view().slice(1, 0, cols);
  if (y_dtype == f8) {
    out.s_storage = to_device(ys, Device::cpu());
    out.y_scale = out.s_storage.view().slice(1, 0, c.rows);
  }
  return out;
}

// Expects every byte of `storage` ([rows, width] elements) outside rows [0, valid_rows) x columns
// [0, cols) to be still 0xFF: y's rows past offsets[E] and padding; for y_scale ([blocks, M + pad])
// the columns past offsets[E].
void expect_untouched(const Tensor& storage, int64_t valid_rows, int64_t cols, const char* what) {
  const int64_t elem = static_cast<int64_t>(dtype_size(storage.dtype)), width = storage.shape[1];
  const uint8_t* b = storage.ptr<uint8_t>();
  int64_t bad = 0;
  for (int64_t r = 0; r < storage.shape[0]; ++r)
    for (int64_t j = 0; j < width; ++j) {
      if (r < valid_rows && j < cols) continue;
      for (int64_t i = 0; i < elem; ++i)
        if (b[(r * width + j) * elem + i] != 0xFF && bad++ < 3)
          ADD_FAILURE() << what << " [" << r << ", " << j << "] written (outside the rows of experts)";
    }
  EXPECT_EQ(bad, 0) << what;
}

// ---- the reference against plain formulas ------------------------------------------------------

int64_t expert_of(const Tensor& offsets, int64_t r) {
  const int32_t* o = offsets.ptr<int32_t>();
  return std::upper_bound(o, o + offsets.shape[0], static_cast<int32_t>(r)) - o - 1;
}

// G[r, i] by the definition, element by element: dequantized products (fp32, as DeepSeek's
// definition dequantizes), summed in fp64 over the terms and K.
double plain_g(const Problem& p, int64_t r, int64_t i, int64_t k) {
  const Tensor &xq = p.x.q, &xs = p.x.scale, &wq = p.w.q, &ws = p.w.scale;
  const int64_t e = expert_of(p.offsets, r), n = wq.shape[1], terms = xq.shape[1] / k;
  double g = 0;
  for (int64_t t = 0; t < terms; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const float a = f8e4m3_to_float(xq.ptr<uint8_t>()[r * xq.shape[1] + t * k + j]) *
                      xs.ptr<float>()[(t * k / kB + j / kB) * xs.shape[1] + r];
      const float b = f8e4m3_to_float(wq.ptr<uint8_t>()[(e * n + i) * k + j]) *
                      ws.ptr<float>()[(e * (n / kB) + i / kB) * (k / kB) + j / kB];
      g += double{a} * b;
    }
  return g;
}

TEST(MoeGroupedGemmFp8Reference, MatchesPlainFormula) {
  for (int terms : {1, 2})
    for (MoeActivation act : {none, swiglu, gate_last})
      for (DType y_dtype : {f32, bf16}) {
        if (act != none && y_dtype == bf16) continue;
        const Fp8GemmCase c{9, 8, 3, 256, 256, terms, act, y_dtype};
        SCOPED_TRACE(case_name(c));
        const Problem p = make_problem(c, 40 + terms);
        const Output out = run(c, p, Device::cpu(), act, y_dtype, 1);
        const std::vector<float> y = to_floats(out.y);
        const int64_t cols = out_cols(c);
        for (int64_t r = 0; r < c.valid_rows; ++r)
          for (int64_t i = 0; i < cols; ++i) {
            double want;
            if (act == none) {
              want = plain_g(p, r, i, c.k);
            } else {
              const double a = plain_g(p, r, i, c.k), b = plain_g(p, r, cols + i, c.k);
              const double g = act == swiglu ? a : b, u = act == swiglu ? b : a;
              want = g / (1 + std::exp(-g)) * u;
            }
            const double tol = 1e-6 * std::fabs(want) + 1e-9 + (y_dtype == bf16 ? std::ldexp(std::fabs(want), -8) : 0);
            EXPECT_NEAR(y[r * cols + i], want, tol) << r << ", " << i;
          }
        expect_untouched(out.y_storage, c.valid_rows, cols, "y");
      }
}

// swiglu_gate_last is swiglu with the two halves of every w[e] (and of its scales) swapped.
TEST(MoeGroupedGemmFp8Reference, GateLastIsSwigluOnSwappedHalves) {
  const Fp8GemmCase c{20, 20, 3, 512, 256, 2, gate_last, f32};
  const Problem p = make_problem(c, 77);
  Problem swapped{fp8::Fp8Tensor{OwnedTensor(p.x.q.view().dtype, {c.rows, 2 * c.k}, Device::cpu()),
                                 OwnedTensor(f32, {2 * c.k / kB, c.rows}, Device::cpu())},
                  fp8::weights(c.experts, c.n, c.k, 1), OwnedTensor(DType::i32, {c.experts + 1}, Device::cpu())};
  copy(p.x.q, swapped.x.q);
  copy(p.x.scale, swapped.x.scale);
  copy(p.offsets, swapped.offsets);
  const int64_t half = c.n / 2, kb = c.k / kB;
  for (int64_t e = 0; e < c.experts; ++e)
    for (int64_t i = 0; i < c.n; ++i) {
      const int64_t from = e * c.n + (i + half) % c.n, to = e * c.n + i;
      std::memcpy(swapped.w.q.view().ptr<uint8_t>() + to * c.k, p.w.q.view().ptr<uint8_t>() + from * c.k, c.k);
      if (i % kB == 0)
        std::memcpy(swapped.w.scale.view().ptr<float>() + (to / kB) * kb,
                    p.w.scale.view().ptr<float>() + (from / kB) * kb, kb * sizeof(float));
    }
  const Output a = run(c, p, Device::cpu(), gate_last, f32, 1);
  const Output b = run(c, swapped, Device::cpu(), swiglu, f32, 1);
  EXPECT_EQ(fp8::bytes_of(a.y_storage), fp8::bytes_of(b.y_storage));
}

// An fp8 y is the f32 y quantized exactly as moe_fp8_quantize does it.
TEST(MoeGroupedGemmFp8Reference, Fp8OutputIsQuantizedF32Output) {
  for (int y_terms : {1, 3}) {
    const Fp8GemmCase c{12, 10, 2, 512, 128, 1, gate_last, f8, y_terms, false, true};
    SCOPED_TRACE(case_name(c));
    const Problem p = make_problem(c, 5 + y_terms);
    const Output h = run(c, p, Device::cpu(), gate_last, f32, 1);
    const Output q = run(c, p, Device::cpu(), gate_last, f8, y_terms);
    OwnedTensor h_rows(f32, {c.valid_rows, c.n / 2}, Device::cpu());
    const std::vector<float> hv = to_floats(h.y);
    std::copy(hv.begin(), hv.begin() + c.valid_rows * c.n / 2, h_rows.view().ptr<float>());
    const fp8::Fp8Tensor want = fp8::quantize_rows(h_rows, y_terms);
    for (int64_t r = 0; r < c.valid_rows; ++r) {
      for (int64_t j = 0; j < y_terms * c.n / 2; ++j)
        ASSERT_EQ(q.y.ptr<uint8_t>()[r * q.y.row_stride() + j],
                  want.q.view().ptr<uint8_t>()[r * y_terms * c.n / 2 + j]) << r << ", " << j;
      for (int64_t b = 0; b < y_terms * c.n / 2 / kB; ++b)
        EXPECT_EQ(q.y_scale.ptr<float>()[b * q.y_scale.row_stride() + r],
                  want.scale.view().ptr<float>()[b * c.valid_rows + r]) << r << ", " << b;
    }
    expect_untouched(q.y_storage, c.valid_rows, y_terms * c.n / 2, "y");
    expect_untouched(q.s_storage, y_terms * c.n / 2 / kB, c.valid_rows, "y_scale");
  }
}

// ---- CUDA against the reference ------------------------------------------------------------------

// Bound on the difference between two fp32 sums of the same products in different orders, as a
// fraction of sum_t |x_t| |w| >= sum |products| (Cauchy-Schwarz). Hopper's fp8 tensor cores keep
// only about 13-14 bits while they accumulate within a 128-deep slice (DeepSeek-V3's report says
// about 14): measured on the H100, the Hopper kernel used up to 1.3e-4 of this sum (the simple
// kernel, fp32 throughout, far less), so the bound is 4e-4.
constexpr double kAccumulation = 4e-4;

// Per row, sum over the terms of |dequantized x_t|; per weight row, |dequantized w|.
struct Norms {
  std::vector<double> x, w;
};
Norms norms(const Problem& p, int64_t k) {
  const Tensor &xq = p.x.q, &xs = p.x.scale, &wq = p.w.q, &ws = p.w.scale;
  const int64_t rows = xq.shape[0], terms = xq.shape[1] / k, experts = wq.shape[0], n = wq.shape[1];
  Norms out{std::vector<double>(static_cast<size_t>(rows)), std::vector<double>(static_cast<size_t>(experts * n))};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < terms; ++t) {
      double sq = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double v = double{f8e4m3_to_float(xq.ptr<uint8_t>()[r * xq.shape[1] + t * k + j])} *
                         xs.ptr<float>()[(t * k / kB + j / kB) * rows + r];
        sq += v * v;
      }
      out.x[r] += std::sqrt(sq);
    }
  for (int64_t row = 0; row < experts * n; ++row) {
    double sq = 0;
    for (int64_t j = 0; j < k; ++j) {
      const double v = double{f8e4m3_to_float(wq.ptr<uint8_t>()[row * k + j])} *
                       ws.ptr<float>()[(row / kB) * (k / kB) + j / kB];
      sq += v * v;
    }
    out.w[row] = std::sqrt(sq);
  }
  return out;
}

class MoeGroupedGemmFp8Diff : public ::testing::TestWithParam<Fp8GemmCase> {};

TEST_P(MoeGroupedGemmFp8Diff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const Fp8GemmCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Problem p = make_problem(c, seed);
  const Norms nm = norms(p, c.k);
  const int64_t cols = out_cols(c), valid = c.valid_rows;
  // G in fp32 from the reference, and each element's tolerance.
  const std::vector<float> g = to_floats(run(c, p, Device::cpu(), none, f32, 1).y);
  auto tol_g = [&](int64_t r, int64_t i) {
    return kAccumulation * nm.x[r] * nm.w[expert_of(p.offsets, r) * c.n + i];
  };
  // SwiGLU: |d silu(g) / dg| <= 1.1 and |silu(g)| <= |g|; plus fp32 rounding and expf.
  auto tol_h = [&](int64_t r, int64_t i) {
    const int64_t gi = c.act == swiglu ? i : cols + i, ui = c.act == swiglu ? cols + i : i;
    const double gv = g[r * c.n + gi], uv = g[r * c.n + ui], h = gv / (1 + std::exp(-gv)) * uv;
    return 1.1 * std::fabs(uv) * tol_g(r, gi) + std::fabs(gv) * tol_g(r, ui) + 1e-6 * std::fabs(h);
  };

  const Output got = run(c, p, Device::cuda(), c.act, c.y_dtype, c.y_terms);
  const int64_t y_cols = cols * (c.y_dtype == f8 ? c.y_terms : 1);
  expect_untouched(got.y_storage, valid, y_cols, "y");
  int64_t bad = 0;
  double used = 0;  // the largest fraction of its tolerance an element used
  auto check = [&](double d, double tol, int64_t r, int64_t i, double want) {
    used = std::max(used, d / tol);
    if (!(d <= tol) && bad++ < 5)
      ADD_FAILURE() << "y[" << r << ", " << i << "]: off by " << d << " from " << want
                    << " (tolerance " << tol << ")";
  };

  if (c.y_dtype != f8) {
    const std::vector<float> y = to_floats(got.y);
    const std::vector<float> h =
        c.act == none ? g : to_floats(run(c, p, Device::cpu(), c.act, f32, 1).y);
    for (int64_t r = 0; r < valid; ++r)
      for (int64_t i = 0; i < cols; ++i) {
        const double want = c.y_dtype == bf16 ? quantize(bf16, h[r * cols + i]) : h[r * cols + i];
        double tol = c.act == none ? tol_g(r, i) : tol_h(r, i);
        if (c.y_dtype == bf16) tol += std::ldexp(std::fabs(want), -7);  // a rounding flipped
        check(std::fabs(y[r * cols + i] - want), tol, r, i, want);
      }
  } else {
    // The terms' sum against the reference's fp32 h, within h's tolerance plus one step of the
    // last term (h differs in its last bits, so a code may round to its neighbour); the first
    // term's scales (amax / 448 of h's blocks) within what h's tolerance allows.
    expect_untouched(got.s_storage, got.s_storage.view().shape[0], valid, "y_scale");
    OwnedTensor h_rows(f32, {valid, cols}, Device::cpu());
    const std::vector<float> h = to_floats(run(c, p, Device::cpu(), c.act, f32, 1).y);
    std::copy(h.begin(), h.begin() + valid * cols, h_rows.view().ptr<float>());
    const int64_t last = c.y_terms - 1, ys = got.y_scale.row_stride();
    for (int64_t r = 0; r < valid; ++r)
      for (int64_t i = 0; i < cols; ++i) {
        const uint8_t q_last = got.y.ptr<uint8_t>()[r * got.y.row_stride() + last * cols + i];
        const float s_last = got.y_scale.ptr<float>()[(last * cols / kB + i / kB) * ys + r];
        const double want = h[r * cols + i];
        const double tol = tol_h(r, i) + fp8::e4m3_ulp(q_last) * s_last + std::ldexp(std::fabs(want), -20);
        check(std::fabs(fp8::reconstruct(got.y, got.y_scale, cols, r, i) - want), tol, r, i, want);
      }
    for (int64_t r = 0; r < valid; ++r)
      for (int64_t b = 0; b < cols / kB; ++b) {
        float amax = 0;
        double slack = 0;
        for (int64_t j = 0; j < kB; ++j) {
          amax = std::max(amax, std::fabs(h[r * cols + b * kB + j]));
          slack = std::max(slack, tol_h(r, b * kB + j));
        }
        const double want = amax == 0 ? 1.0 : amax / 448.0f, s = got.y_scale.ptr<float>()[b * ys + r];
        if (!(std::fabs(s - want) <= slack / 448 + std::ldexp(want, -22)) && bad++ < 5)
          ADD_FAILURE() << "y_scale[" << b << ", " << r << "] = " << s << ", reference " << want;
      }
    // How many codes differ from the reference's (reported: the tolerance above bounds the effect).
    const fp8::Fp8Tensor ref = fp8::quantize_rows(h_rows, c.y_terms);
    int64_t differ = 0;
    for (int64_t r = 0; r < valid; ++r)
      for (int64_t j = 0; j < y_cols; ++j)
        differ += got.y.ptr<uint8_t>()[r * got.y.row_stride() + j] != ref.q.view().ptr<uint8_t>()[r * y_cols + j];
    std::printf("%s: %lld of %lld codes differ from the reference's\n", case_name(c).c_str(),
                static_cast<long long>(differ), static_cast<long long>(valid * y_cols));
  }
  std::printf("%s: at most %.3g of the tolerance used\n", case_name(c).c_str(), used);
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeGroupedGemmFp8Diff,
    ::testing::Values(
        // activation none, f32 and bf16 y
        Fp8GemmCase{1, 1, 1, 128, 128, 1, none, f32},
        Fp8GemmCase{5, 5, 3, 256, 256, 1, none, bf16},
        Fp8GemmCase{130, 130, 3, 384, 2048, 3, none, f32},
        Fp8GemmCase{700, 700, 32, 256, 256, 1, none, bf16, 1, false, true},
        Fp8GemmCase{700, 700, 32, 4096, 128, 1, none, f32},
        Fp8GemmCase{130, 130, 1, 4096, 2048, 1, none, bf16},
        Fp8GemmCase{700, 700, 32, 256, 256, 3, none, f32, 1, true},  // one expert takes all
        Fp8GemmCase{130, 100, 3, 256, 128, 1, none, f32},            // rows past offsets[E]
        Fp8GemmCase{0, 0, 4, 128, 128, 1, none, f32},                // no rows
        // swiglu and swiglu_gate_last, f32 y
        Fp8GemmCase{5, 5, 3, 256, 256, 1, swiglu, f32},
        Fp8GemmCase{700, 650, 32, 512, 256, 3, swiglu, f32},
        Fp8GemmCase{130, 130, 3, 4096, 256, 3, gate_last, f32},
        Fp8GemmCase{1, 1, 32, 256, 2048, 1, gate_last, f32},  // decode: most experts empty
        // swiglu_gate_last, fp8 y of 1 and 3 terms
        Fp8GemmCase{130, 120, 3, 512, 2048, 1, gate_last, f8, 1},
        Fp8GemmCase{700, 700, 32, 256, 256, 3, gate_last, f8, 3, false, true},
        Fp8GemmCase{5, 5, 1, 4096, 2048, 3, gate_last, f8, 3},
        Fp8GemmCase{700, 700, 3, 256, 2048, 1, gate_last, f8, 3, true},
        Fp8GemmCase{1, 1, 32, 512, 128, 3, gate_last, f8, 1}),
    [](const auto& info) { return case_name(info.param); });

// ---- argument errors ---------------------------------------------------------------------------

class MoeGroupedGemmFp8Errors : public ::testing::Test {
 protected:
  // A valid problem: M = 6, K = 128, R = 1, E = 3, N = 256.
  const Device cpu = Device::cpu();
  OwnedTensor x{f8, {6, 128}, cpu}, xs{f32, {1, 6}, cpu}, w{f8, {3, 256, 128}, cpu};
  OwnedTensor ws{f32, {3, 2, 1}, cpu}, offsets{DType::i32, {4}, cpu}, y{f32, {6, 256}, cpu};

  void SetUp() override {
    fill_bytes(x, 0);
    fill_bytes(xs, 0);
    fill_bytes(w, 0);
    fill_bytes(ws, 0);
    const int32_t o[4] = {0, 2, 2, 5};
    std::copy(o, o + 4, offsets.view().ptr<int32_t>());
  }
  struct Args {
    Tensor x, xs, w, ws, offsets;
    MoeActivation act;
    Tensor y, y_scale;
  };
  Args valid() const { return {x, xs, w, ws, offsets, none, y, Tensor{}}; }
  static void run(const Args& a) {
    ops::moe_grouped_gemm_fp8(a.x, a.xs, a.w, a.ws, a.offsets, a.act, a.y, a.y_scale);
  }
  template <typename F>
  void expect(F&& mutate, ErrorKind kind, std::vector<std::string> fragments) {
    Args a = valid();
    mutate(a);
    fragments.insert(fragments.begin(), "moe_grouped_gemm_fp8");
    expect_error([&] { run(a); }, kind, fragments);
  }
  OwnedTensor t(DType d, std::initializer_list<int64_t> shape) { return OwnedTensor(d, shape, cpu); }
};

TEST_F(MoeGroupedGemmFp8Errors, ValidProblemsRun) {
  EXPECT_NO_THROW(run(valid()));
  OwnedTensor y_h = t(f32, {6, 128}), y_q = t(f8, {6, 384}), y_qs = t(f32, {3, 6});
  Args a = valid();
  a.act = swiglu;
  a.y = y_h;
  EXPECT_NO_THROW(run(a));
  a.act = gate_last;
  a.y = y_q;
  a.y_scale = y_qs;
  EXPECT_NO_THROW(run(a));
}

TEST_F(MoeGroupedGemmFp8Errors, Operands) {
  OwnedTensor x_bf16 = t(bf16, {6, 128}), x_200 = t(f8, {6, 200}), x_r4 = t(f8, {6, 512});
  OwnedTensor xs_r2 = t(f32, {2, 6}), xs_bf16 = t(bf16, {1, 6});
  OwnedTensor w_f32 = t(f32, {3, 256, 128}), w_n = t(f8, {3, 200, 128}), w_k = t(f8, {3, 256, 100});
  OwnedTensor w_i = t(f8, {3, 128, 128}), ws_bad = t(f32, {3, 1, 1}), off_i64 = t(DType::i64, {4});
  OwnedTensor off_short = t(DType::i32, {3});
  const Tensor w_many(reinterpret_cast<void*>(uintptr_t{0x1000}), f8, cpu, {513, 128, 128});
  expect([&](Args& a) { a.x = x_bf16; }, ErrorKind::dtype, {"'x'", "f8e4m3", "bf16"});
  expect([&](Args& a) { a.x = x_200; }, ErrorKind::shape, {"'x'", "terms * 128", "[6, 200]"});
  expect([&](Args& a) { a.x = x_r4; }, ErrorKind::shape, {"'x'", "1 <= terms <= 3", "[6, 512]"});
  expect([&](Args& a) { a.xs = xs_r2; }, ErrorKind::shape, {"'x_scale'", "[1, 6]", "[2, 6]"});
  expect([&](Args& a) { a.xs = xs_bf16; }, ErrorKind::dtype, {"'x_scale'", "f32", "bf16"});
  expect([&](Args& a) { a.w = w_f32; }, ErrorKind::dtype, {"'w'", "f8e4m3", "f32"});
  expect([&](Args& a) { a.w = w_n; }, ErrorKind::shape, {"'w'", "multiples of 128", "[3, 200, 128]"});
  expect([&](Args& a) { a.w = w_k; }, ErrorKind::shape, {"'w'", "multiples of 128", "[3, 256, 100]"});
  expect([&](Args& a) { a.w = w_many; }, ErrorKind::shape, {"'w'", "1 <= E <= 512", "[513, 128, 128]"});
  expect([&](Args& a) { a.w = w_i; a.act = swiglu; }, ErrorKind::shape, {"'w'", "2 I", "[3, 128, 128]"});
  expect([&](Args& a) { a.w.strides[0] *= 2; }, ErrorKind::shape, {"'w'", "contiguous"});
  expect([&](Args& a) { a.ws = ws_bad; }, ErrorKind::shape, {"'w_scale'", "[3, 2, 1]", "[3, 1, 1]"});
  expect([&](Args& a) { a.offsets = off_i64; }, ErrorKind::dtype, {"'expert_offsets'", "i32", "i64"});
  expect([&](Args& a) { a.offsets = off_short; }, ErrorKind::shape, {"'expert_offsets'", "[4]", "[3]"});
  expect([&](Args& a) { a.act = static_cast<MoeActivation>(7); }, ErrorKind::invalid_argument,
         {"'activation'", "swiglu_gate_last (2)", "7"});
  Tensor xs_overlap = xs;  // [1, 6] has one row: any stride; [2, 6] rows must not overlap
  xs_overlap.strides[0] = 0;
  Args a = valid();
  a.xs = xs_overlap;
  EXPECT_NO_THROW(run(a));
}

TEST_F(MoeGroupedGemmFp8Errors, Outputs) {
  OwnedTensor y_f8 = t(f8, {6, 256}), y_bf16_h = t(bf16, {6, 128}), y_narrow = t(f32, {6, 128});
  OwnedTensor y_q4 = t(f8, {6, 512}), y_q = t(f8, {6, 256}), qs_bad = t(f32, {1, 6});
  OwnedTensor qs = t(f32, {2, 6}), qs_f16 = t(DType::f16, {2, 6});
  expect([&](Args& a) { a.y = y_f8; }, ErrorKind::dtype, {"'y'", "needs activation swiglu", "f8e4m3"});
  expect([&](Args& a) { a.y = y_narrow; }, ErrorKind::shape, {"'y'", "[6, 256]", "[6, 128]"});
  expect([&](Args& a) { a.y_scale = qs; }, ErrorKind::invalid_argument, {"'y_scale'", "none", "f32"});
  expect([&](Args& a) { a.act = swiglu; }, ErrorKind::shape, {"'y'", "[6, 128]", "[6, 256]"});
  expect([&](Args& a) { a.act = swiglu; a.y = y_bf16_h; }, ErrorKind::dtype, {"'y'", "f32 or f8e4m3", "bf16"});
  expect([&](Args& a) { a.act = gate_last; a.y = y_q4; a.y_scale = qs; }, ErrorKind::shape,
         {"'y'", "1 <= terms <= 3", "[6, 512]"});
  expect([&](Args& a) { a.act = gate_last; a.y = y_q; }, ErrorKind::invalid_argument,
         {"'y_scale'", "the scales of the f8e4m3 y, [2, 6] f32", "got none"});
  expect([&](Args& a) { a.act = gate_last; a.y = y_q; a.y_scale = qs_bad; }, ErrorKind::shape,
         {"'y_scale'", "[2, 6]", "[1, 6]"});
  expect([&](Args& a) { a.act = gate_last; a.y = y_q; a.y_scale = qs_f16; }, ErrorKind::dtype,
         {"'y_scale'", "f32", "f16"});
  expect([&](Args& a) { a.act = gate_last; a.y = y_q; a.y_scale = fake_cuda(f32, {2, 6}); },
         ErrorKind::device, {"'y_scale'", "cpu", "cuda:0"});
}

TEST_F(MoeGroupedGemmFp8Errors, OffsetsOnTheCpu) {
  int32_t* o = offsets.view().ptr<int32_t>();
  o[2] = 1;
  expect([](Args&) {}, ErrorKind::invalid_argument, {"'expert_offsets'", "non-decreasing", "expert_offsets[2] = 1"});
  o[2] = 2;
  o[3] = 7;
  expect([](Args&) {}, ErrorKind::invalid_argument, {"'expert_offsets'", "<= 6", "expert_offsets[3] = 7"});
}

}  // namespace
}  // namespace braid::test
