// moe_experts with fp8 experts (e4m3 weights, one f32 scale per 128 x 128 block): the CPU
// reference against the contract written out on dequantized weights, and against the 16-bit path
// on the same weights dequantized to f32; the argument checks of the fp8 form; and the CUDA
// kernels against the CPU reference (skipped without a GPU) from 1 to 16 tokens, 8 to 128
// experts, top-1 to top-8, the Qwen3-30B-A3B-FP8 shape (H 2048, I 768) among them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "braid/ops.h"
#include "ops/fp8_test_util.h"
#include "ops/moe/moe_test_util.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct Fp8Experts {
  OwnedTensor x, weights, ids;
  const fp8::Fp8Tensor& gate_up;  // [E, 2I, H] with its block scales (expert_weights)
  const fp8::Fp8Tensor& down;     // [E, H, I]
};

// fp8 weights [experts, n, k] whose blocks have scales 2^-2 .. 2^2 apart (fp8::weights: a scale
// applied to the wrong block shows), made once per shape with a seed of its own: the
// Qwen3-30B-A3B-sized ones (600 M codes) take a minute to make on the GPU machine's CPU, and six
// tests use them.
const fp8::Fp8Tensor& expert_weights(int64_t experts, int64_t n, int64_t k) {
  static std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<fp8::Fp8Tensor>> made;
  auto& slot = made[{experts, n, k}];
  if (!slot) {
    const uint64_t seed = static_cast<uint64_t>(experts * 1000003 + n * 1009 + k);
    slot = std::make_unique<fp8::Fp8Tensor>(fp8::weights(experts, n, k, seed));
  }
  return *slot;
}

// Activations of order 1, positive routing weights and k distinct random experts per token, from
// `seed`; the shape's expert weights.
Fp8Experts make_fp8_experts(DType dtype, int64_t tokens, int64_t experts, int64_t k,
                            int64_t hidden, int64_t inter, uint64_t seed) {
  Fp8Experts p{random_host(dtype, {tokens, hidden}, seed),
               random_host(DType::f32, {tokens, k}, seed + 1, 0.05f, 1.0f),
               OwnedTensor(DType::i32, {tokens, k}, Device::cpu()),
               expert_weights(experts, 2 * inter, hidden),
               expert_weights(experts, hidden, inter)};
  moe::distinct_routing(p.ids.view(), experts, seed + 4);
  return p;
}

// moe_experts on `device` with copies of p's tensors; out as floats. x_pad > 0 hands x over as
// the first columns of wider rows (a row stride that is no multiple of 16 bytes when odd);
// `quantized`: with quantize_activations.
std::vector<float> run_fp8(const Fp8Experts& p, Device device, int64_t x_pad = 0, bool quantized = false) {
  const Tensor& xt = p.x.view();
  const int64_t tokens = xt.shape[0], hidden = xt.shape[1];
  const int64_t k = p.ids.view().shape[1], inter = p.down.q.view().shape[2];
  OwnedTensor wide(xt.dtype, {tokens, hidden + x_pad}, Device::cpu());
  fill_bytes(wide.view(), 0);
  const size_t row_bytes = static_cast<size_t>(hidden) * dtype_size(xt.dtype);
  for (int64_t t = 0; t < tokens; ++t)
    std::memcpy(static_cast<char*>(wide.data()) + t * (hidden + x_pad) * dtype_size(xt.dtype),
                static_cast<const char*>(xt.data) + t * row_bytes, row_bytes);
  auto x_store = to_device(wide.view(), device);
  const Tensor x = x_store.view().slice(1, 0, hidden);
  auto w = to_device(p.weights, device), ids = to_device(p.ids, device);
  auto gu = to_device(p.gate_up.q, device), gu_s = to_device(p.gate_up.scale, device);
  auto dn = to_device(p.down.q, device), dn_s = to_device(p.down.scale, device);
  auto ws = poisoned(DType::f32, {tokens * k, inter}, device);  // NaN: h must be written first
  auto out = poisoned(xt.dtype, {tokens, hidden}, device);
  ops::MoeExpertsExtras extras;
  extras.quantize_activations = quantized;
  ops::moe_experts(x, w, ids, gu, dn, ws, out, gu_s, dn_s, extras);
  return to_floats(out);
}

// An fp8 weight tensor [E, N, K] dequantized (code x its block's scale), in double.
std::vector<double> dequantize(const fp8::Fp8Tensor& w) {
  const Tensor q = w.q.view();
  const int64_t experts = q.shape[0], n = q.shape[1], k = q.shape[2];
  std::vector<double> out(static_cast<size_t>(experts * n * k));
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const int64_t i = (e * n + r) * k + c;
        const float s = w.scale.view().ptr<float>()[(e * (n / fp8::kB) + r / fp8::kB) * (k / fp8::kB) + c / fp8::kB];
        out[static_cast<size_t>(i)] = double{f8e4m3_to_float(q.ptr<uint8_t>()[i])} * s;
      }
  return out;
}

// v[0, n) replaced by its quantized values per 128 columns, the rule written out: s = amax / 448
// in fp32 (1 where that is 0), each element the e4m3 code of v / s, times s (in double).
std::vector<double> quantized_values(const float* v, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; b += fp8::kB) {
    float amax = 0.0f;
    for (int64_t c = b; c < b + fp8::kB; ++c) amax = std::max(amax, std::fabs(v[c]));
    const float s = amax / 448.0f == 0.0f ? 1.0f : amax / 448.0f;
    for (int64_t c = b; c < b + fp8::kB; ++c)
      out[static_cast<size_t>(c)] = double{f8e4m3_to_float(float_to_f8e4m3(v[c] / s))} * s;
  }
  return out;
}

// The contract on the dequantized weights, in double: g and u rounded to the dtype, h =
// dtype(silu(g) * u), out = dtype(sum_j w_j * (down[e] @ h)). `quantized`: x and h enter the
// products as their quantized values.
std::vector<float> fp8_experts_by_formula(const Fp8Experts& p, bool quantized = false) {
  const Tensor& xt = p.x.view();
  const DType dt = xt.dtype;
  const int64_t tokens = xt.shape[0], hidden = xt.shape[1];
  const int64_t k = p.ids.view().shape[1], inter = p.down.q.view().shape[2];
  const auto x = to_floats(p.x), w = to_floats(p.weights);
  const auto gu = dequantize(p.gate_up), dn = dequantize(p.down);
  std::vector<float> out(static_cast<size_t>(tokens * hidden));
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> acc(static_cast<size_t>(hidden), 0.0);
    std::vector<double> xt(x.begin() + t * hidden, x.begin() + (t + 1) * hidden);
    if (quantized) xt = quantized_values(x.data() + t * hidden, hidden);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = p.ids.view().ptr<int32_t>()[t * k + j];
      std::vector<float> h(static_cast<size_t>(inter));
      for (int64_t i = 0; i < inter; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < hidden; ++c) {
          g += gu[static_cast<size_t>((e * 2 * inter + i) * hidden + c)] * xt[c];
          u += gu[static_cast<size_t>((e * 2 * inter + inter + i) * hidden + c)] * xt[c];
        }
        const float gq = quantize(dt, static_cast<float>(g)), uq = quantize(dt, static_cast<float>(u));
        h[i] = quantize(dt, gq / (1.0f + std::exp(-gq)) * uq);
      }
      std::vector<double> hv(h.begin(), h.end());
      if (quantized) hv = quantized_values(h.data(), inter);
      for (int64_t n = 0; n < hidden; ++n) {
        double y = 0;
        for (int64_t i = 0; i < inter; ++i) y += dn[static_cast<size_t>((e * hidden + n) * inter + i)] * hv[i];
        acc[n] += w[t * k + j] * y;
      }
    }
    for (int64_t n = 0; n < hidden; ++n) out[t * hidden + n] = quantize(dt, static_cast<float>(acc[n]));
  }
  return out;
}

TEST(MoeExpertsFp8Reference, MatchesTheFormulaOnDequantizedWeights) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(dtype_name(dt)));
    const Fp8Experts p = make_fp8_experts(dt, 3, 4, 2, 256, 128, seed);
    EXPECT_LE(rel_error(run_fp8(p, Device::cpu()), fp8_experts_by_formula(p)), 1e-6);
  }
}

// Quantized activations: the formula with x and h quantized, and a difference from the exact
// products of the size e4m3's 3 fraction bits give (test_engine_fp8.cpp derives ~0.046 for the
// norm-wise error of both roundings; far above the exact path's 1e-6).
TEST(MoeExpertsFp8Reference, QuantizedActivationsMatchTheFormula) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(dtype_name(dt)));
    const Fp8Experts p = make_fp8_experts(dt, 3, 4, 2, 256, 256, seed);
    const auto got = run_fp8(p, Device::cpu(), 0, true);
    EXPECT_LE(rel_error(got, fp8_experts_by_formula(p, true)), 1e-6);
    const double off_exact = rel_error(got, fp8_experts_by_formula(p, false));
    EXPECT_GT(off_exact, 1e-3);
    EXPECT_LT(off_exact, 0.08);
  }
}

// The same weights dequantized to f32 through the 16-bit form's f32 path: equal up to the f32
// rounding of code x scale (the fp8 form keeps it exact).
TEST(MoeExpertsFp8Reference, AgreesWithTheF32PathOnDequantizedWeights) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Fp8Experts p = make_fp8_experts(DType::f32, 4, 6, 3, 256, 256, seed);
  auto to_f32 = [](const fp8::Fp8Tensor& w) {
    const Tensor q = w.q.view();
    OwnedTensor t(DType::f32, {q.shape[0], q.shape[1], q.shape[2]}, Device::cpu());
    const auto v = dequantize(w);
    for (size_t i = 0; i < v.size(); ++i) t.view().ptr<float>()[i] = static_cast<float>(v[i]);
    return t;
  };
  auto gu = to_f32(p.gate_up), dn = to_f32(p.down);
  auto ws = poisoned(DType::f32, {12, 256}, Device::cpu());
  auto out = poisoned(DType::f32, {4, 256}, Device::cpu());
  ops::moe_experts(p.x, p.weights, p.ids, gu, dn, ws, out);
  EXPECT_LE(rel_error(run_fp8(p, Device::cpu()), to_floats(out)), tolerance(DType::f32));
}

class MoeExpertsFp8Errors : public ::testing::Test {
 protected:
  // A valid fp8 problem: T = 2, E = 3, k = 2, H = 256, I = 128, bf16 activations.
  OwnedTensor x{DType::bf16, {2, 256}, Device::cpu()}, w{DType::f32, {2, 2}, Device::cpu()};
  OwnedTensor ids{DType::i32, {2, 2}, Device::cpu()};
  OwnedTensor gate_up{DType::f8e4m3, {3, 256, 256}, Device::cpu()};
  OwnedTensor down{DType::f8e4m3, {3, 256, 128}, Device::cpu()};
  OwnedTensor gu_scale{DType::f32, {3, 2, 2}, Device::cpu()}, dn_scale{DType::f32, {3, 2, 1}, Device::cpu()};
  OwnedTensor ws{DType::f32, {4, 128}, Device::cpu()}, out{DType::bf16, {2, 256}, Device::cpu()};

  void SetUp() override {
    for (OwnedTensor* t : {&x, &w, &ids, &gate_up, &down, &gu_scale, &dn_scale}) fill_bytes(t->view(), 0);
  }
  struct Args {
    Tensor x, w, ids, gate_up, down, ws, out, gu_scale, dn_scale;
  };
  Args valid() const { return {x, w, ids, gate_up, down, ws, out, gu_scale, dn_scale}; }
  static void run(const Args& a) {
    ops::moe_experts(a.x, a.w, a.ids, a.gate_up, a.down, a.ws, a.out, a.gu_scale, a.dn_scale);
  }
  template <typename F>
  void expect(F&& mutate, ErrorKind kind, std::vector<std::string> fragments) {
    Args a = valid();
    mutate(a);
    fragments.insert(fragments.begin(), "moe_experts");
    expect_error([&] { run(a); }, kind, fragments);
  }
};

TEST_F(MoeExpertsFp8Errors, ValidProblemRuns) { EXPECT_NO_THROW(run(valid())); }

TEST_F(MoeExpertsFp8Errors, Scales) {
  OwnedTensor gu_s_bad(DType::f32, {3, 1, 2}, Device::cpu()), dn_s_bad(DType::f32, {3, 1, 2}, Device::cpu());
  OwnedTensor gu_s_bf16(DType::bf16, {3, 2, 2}, Device::cpu());
  OwnedTensor bf16_gu(DType::bf16, {3, 256, 256}, Device::cpu()), bf16_dn(DType::bf16, {3, 256, 128}, Device::cpu());
  expect([&](Args& a) { a.gu_scale = Tensor{}; }, ErrorKind::invalid_argument, {"'gate_up_scale'", "expected a tensor"});
  expect([&](Args& a) { a.dn_scale = Tensor{}; }, ErrorKind::invalid_argument, {"'down_scale'", "expected a tensor"});
  expect([&](Args& a) { a.gu_scale = gu_s_bad; }, ErrorKind::shape, {"'gate_up_scale'", "[3, 2, 2]", "[3, 1, 2]"});
  expect([&](Args& a) { a.dn_scale = dn_s_bad; }, ErrorKind::shape, {"'down_scale'", "[3, 2, 1]", "[3, 1, 2]"});
  expect([&](Args& a) { a.gu_scale = gu_s_bf16; }, ErrorKind::dtype, {"'gate_up_scale'", "f32", "bf16"});
  expect([&](Args& a) { a.gu_scale.strides[0] *= 2; }, ErrorKind::shape, {"'gate_up_scale'", "contiguous"});
  // Scales with 16-bit weights, and a 16-bit down beside an fp8 gate_up.
  expect([&](Args& a) { a.gate_up = bf16_gu, a.down = bf16_dn; }, ErrorKind::invalid_argument,
         {"'gate_up_scale'", "no scales"});
  expect([&](Args& a) { a.down = bf16_dn; }, ErrorKind::dtype, {"'down'", "f8e4m3", "bf16"});
}

TEST_F(MoeExpertsFp8Errors, QuantizedActivationsNeedFp8Weights) {
  OwnedTensor bf16_gu(DType::bf16, {3, 256, 256}, Device::cpu()), bf16_dn(DType::bf16, {3, 256, 128}, Device::cpu());
  fill_bytes(bf16_gu.view(), 0);
  fill_bytes(bf16_dn.view(), 0);
  ops::MoeExpertsExtras extras;
  extras.quantize_activations = true;
  expect_error([&] { ops::moe_experts(x, w, ids, bf16_gu, bf16_dn, ws, out, Tensor{}, Tensor{}, extras); },
               ErrorKind::invalid_argument, {"moe_experts", "'quantize_activations'", "fp8 weights"});
  EXPECT_NO_THROW(ops::moe_experts(x, w, ids, gate_up, down, ws, out, gu_scale, dn_scale, extras));
}

TEST_F(MoeExpertsFp8Errors, WidthsMustBeWholeScaleBlocks) {
  // I = 64: the gate's and the up's rows would share a 128-row scale block.
  OwnedTensor gu64(DType::f8e4m3, {3, 128, 256}, Device::cpu()), dn64(DType::f8e4m3, {3, 256, 64}, Device::cpu());
  OwnedTensor ws64(DType::f32, {4, 64}, Device::cpu());
  OwnedTensor gu_s64(DType::f32, {3, 1, 2}, Device::cpu()), dn_s64(DType::f32, {3, 2, 1}, Device::cpu());
  expect([&](Args& a) { a.gate_up = gu64, a.down = dn64, a.ws = ws64, a.gu_scale = gu_s64, a.dn_scale = dn_s64; },
         ErrorKind::shape, {"'gate_up'", "multiples of 128", "[3, 128, 256]"});
  // H = 192.
  OwnedTensor x192(DType::bf16, {2, 192}, Device::cpu()), out192(DType::bf16, {2, 192}, Device::cpu());
  OwnedTensor gu192(DType::f8e4m3, {3, 256, 192}, Device::cpu()), dn192(DType::f8e4m3, {3, 192, 128}, Device::cpu());
  expect([&](Args& a) { a.x = x192, a.out = out192, a.gate_up = gu192, a.down = dn192; },
         ErrorKind::shape, {"'gate_up'", "multiples of 128", "[3, 256, 192]"});
}

#if BRAID_WITH_CUDA
TEST_F(MoeExpertsFp8Errors, F32ActivationsOnCudaAreUnsupported) {
  Args a{fake_cuda(DType::f32, {2, 256}),       fake_cuda(DType::f32, {2, 2}),
         fake_cuda(DType::i32, {2, 2}),         fake_cuda(DType::f8e4m3, {3, 256, 256}),
         fake_cuda(DType::f8e4m3, {3, 256, 128}), fake_cuda(DType::f32, {4, 128}),
         fake_cuda(DType::f32, {2, 256}),       fake_cuda(DType::f32, {3, 2, 2}),
         fake_cuda(DType::f32, {3, 2, 1})};
  expect_error([&] { run(a); }, ErrorKind::unsupported, {"moe_experts", "'x'", "f16 or bf16", "f32"});
}
#endif

// ---------------------------------------------------------------------------------------------
// CUDA against the CPU reference.

struct Fp8Case {
  DType dtype;
  int64_t tokens, experts, k, hidden, inter;
  int64_t x_pad = 0;  // extra elements per x row: a row stride that is no 16-byte multiple
};

std::string case_name(const Fp8Case& c) {
  return std::string(dtype_name(c.dtype)) + "_T" + std::to_string(c.tokens) + "_E" +
         std::to_string(c.experts) + "_k" + std::to_string(c.k) + "_H" + std::to_string(c.hidden) +
         "_I" + std::to_string(c.inter) + (c.x_pad ? "_pad" + std::to_string(c.x_pad) : "");
}
void PrintTo(const Fp8Case& c, std::ostream* os) { *os << case_name(c); }

class MoeExpertsFp8Diff : public ::testing::TestWithParam<Fp8Case> {};

// The case's problem from `seed`, run on the CPU and on CUDA, `quantized` or not.
struct Fp8DiffRun {
  Fp8Experts p;
  std::vector<float> ref, got;
};
Fp8DiffRun run_both(const Fp8Case& c, uint64_t seed, bool quantized) {
  Fp8DiffRun r{make_fp8_experts(c.dtype, c.tokens, c.experts, c.k, c.hidden, c.inter, seed), {}, {}};
  r.ref = run_fp8(r.p, Device::cpu(), c.x_pad, quantized);
  r.got = run_fp8(r.p, Device::cuda(), c.x_pad, quantized);
  return r;
}

TEST_P(MoeExpertsFp8Diff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Fp8DiffRun r = run_both(c, seed, false);
  // The same roundings; fp32 sums in another order than the reference's fp64.
  EXPECT_LE(rel_error(r.got, r.ref), tolerance(c.dtype));
}

// Quantized activations (the fp8 tensor cores) against the CPU reference quantizing the same way:
// the same codes but where a g or u rounded in another order moves an h block's amax or an
// element across a code boundary, so the dtype's tolerance still holds; and clearly not the
// exact products.
TEST_P(MoeExpertsFp8Diff, CudaQuantizedMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Fp8DiffRun r = run_both(c, seed, true);
  EXPECT_LE(rel_error(r.got, r.ref), tolerance(c.dtype));
  EXPECT_GT(rel_error(r.got, run_fp8(r.p, Device::cpu(), c.x_pad, false)), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeExpertsFp8Diff,
    ::testing::Values(Fp8Case{DType::bf16, 1, 8, 1, 128, 128},
                      Fp8Case{DType::bf16, 1, 128, 8, 2048, 768},   // Qwen3-30B-A3B-FP8 decode
                      Fp8Case{DType::bf16, 4, 128, 8, 2048, 768},
                      Fp8Case{DType::bf16, 16, 128, 8, 2048, 768},  // two token tiles
                      Fp8Case{DType::bf16, 9, 8, 8, 512, 256},      // every expert shared
                      Fp8Case{DType::f16, 5, 64, 4, 256, 384},
                      Fp8Case{DType::bf16, 3, 32, 2, 1024, 512},
                      Fp8Case{DType::bf16, 16, 16, 1, 384, 640},
                      Fp8Case{DType::bf16, 2, 128, 8, 2048, 768, 3}),  // unaligned x rows
    [](const auto& info) { return case_name(info.param); });

TEST(MoeExpertsFp8Cuda, OutMayBeX) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Fp8Experts p = make_fp8_experts(DType::bf16, 3, 16, 4, 256, 256, seed);
  const auto ref = run_fp8(p, Device::cpu());
  const Device d = Device::cuda();
  auto x = to_device(p.x, d), w = to_device(p.weights, d), ids = to_device(p.ids, d);
  auto gu = to_device(p.gate_up.q, d), gu_s = to_device(p.gate_up.scale, d);
  auto dn = to_device(p.down.q, d), dn_s = to_device(p.down.scale, d);
  auto ws = poisoned(DType::f32, {12, 256}, d);
  ops::moe_experts(x, w, ids, gu, dn, ws, x, gu_s, dn_s);
  EXPECT_LE(rel_error(to_floats(x), ref), tolerance(DType::bf16));
}

}  // namespace
}  // namespace braid::test
