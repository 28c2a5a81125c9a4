// moe_route_topk_softmax and moe_experts: CUDA against the CPU reference, the reference against
// formulas written out here, and argument errors.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "braid/ops.h"
#include "ops/moe/moe_test_util.h"
#include "test_util.h"

namespace braid::test {
namespace {

// ---------------------------------------------------------------------------------------------
// Router.

struct RouteCase {
  DType dtype;
  int64_t tokens, experts;
  int k;
  bool renormalize;
};

std::string case_name(const RouteCase& c) {
  return std::string(dtype_name(c.dtype)) + "_T" + std::to_string(c.tokens) + "_E" +
         std::to_string(c.experts) + "_k" + std::to_string(c.k) + (c.renormalize ? "_renorm" : "");
}
void PrintTo(const RouteCase& c, std::ostream* os) { *os << case_name(c); }

class MoeRouteDiff : public ::testing::TestWithParam<RouteCase> {};

TEST_P(MoeRouteDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Both sides choose by the logits themselves (identical bits), so the ids must agree exactly,
  // near-ties and bf16's exact ties (frequent among 128 values in [-4, 4)) included.
  auto logits = random_host(c.dtype, {c.tokens, c.experts}, seed, -4, 4);
  auto ref_w = poisoned(DType::f32, {c.tokens, c.k}, Device::cpu());
  OwnedTensor ref_ids(DType::i32, {c.tokens, c.k}, Device::cpu());
  ops::moe_route_topk_softmax(logits, c.k, c.renormalize, ref_w, ref_ids);

  auto dlogits = to_device(logits, Device::cuda());
  auto w = poisoned(DType::f32, {c.tokens, c.k}, Device::cuda());
  auto ids = poisoned(DType::i32, {c.tokens, c.k}, Device::cuda());
  ops::moe_route_topk_softmax(dlogits, c.k, c.renormalize, w, ids);
  EXPECT_EQ(to_floats(ids), to_floats(ref_ids));
  EXPECT_LE(rel_error(to_floats(w), to_floats(ref_w)), tolerance(DType::f32));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeRouteDiff,
    ::testing::Values(RouteCase{DType::f32, 1, 8, 2, true},      // Mixtral: 8 experts, top-2
                      RouteCase{DType::bf16, 5, 8, 1, false},
                      RouteCase{DType::bf16, 33, 128, 8, true},  // Qwen3-30B-A3B
                      RouteCase{DType::bf16, 33, 128, 8, false},
                      RouteCase{DType::f32, 5, 60, 8, false},    // not a power of two
                      RouteCase{DType::f16, 33, 60, 2, true},
                      RouteCase{DType::f32, 33, 512, 16, true},  // the limits
                      RouteCase{DType::bf16, 1, 3, 3, true},     // k == E
                      RouteCase{DType::bf16, 70, 128, 8, true}), // several blocks
    [](const auto& info) { return case_name(info.param); });

TEST(MoeRouteReference, MatchesSortedSoftmax) {
  // Against a different algorithm: a stable sort of all experts by descending logit.
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t tokens = 7, experts = 60;
  const int k = 8;
  auto logits = random_host(DType::f32, {tokens, experts}, seed, -4, 4);
  for (bool renormalize : {false, true}) {
    auto w = poisoned(DType::f32, {tokens, k}, Device::cpu());
    OwnedTensor ids(DType::i32, {tokens, k}, Device::cpu());
    ops::moe_route_topk_softmax(logits, k, renormalize, w, ids);
    for (int64_t t = 0; t < tokens; ++t) {
      const float* x = logits.view().ptr<float>() + t * experts;
      std::vector<int> order(static_cast<size_t>(experts));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[a] > x[b]; });
      double total = 0, chosen = 0;
      for (int64_t e = 0; e < experts; ++e) total += std::exp(static_cast<double>(x[e]));
      for (int j = 0; j < k; ++j) chosen += std::exp(static_cast<double>(x[order[j]]));
      for (int j = 0; j < k; ++j) {
        EXPECT_EQ(ids.view().ptr<int32_t>()[t * k + j], order[j]) << "token " << t << " j " << j;
        const double want = std::exp(static_cast<double>(x[order[j]])) / (renormalize ? chosen : total);
        EXPECT_NEAR(w.view().ptr<float>()[t * k + j], want, 1e-6 * want + 1e-9);
      }
    }
  }
}

TEST(MoeRouteReference, TiesGoToTheLowerIndexAndNaNRanksLast) {
  OwnedTensor logits(DType::f32, {2, 4}, Device::cpu());
  const float values[] = {1, 3, 2, 3, NAN, 0, NAN, -1};
  std::copy_n(values, 8, logits.view().ptr<float>());
  auto w = poisoned(DType::f32, {2, 3}, Device::cpu());
  OwnedTensor ids(DType::i32, {2, 3}, Device::cpu());
  ops::moe_route_topk_softmax(logits, 3, true, w, ids);
  const int32_t* id = ids.view().ptr<int32_t>();
  EXPECT_EQ((std::vector<int32_t>(id, id + 3)), (std::vector<int32_t>{1, 3, 2}));
  const double e3 = std::exp(3.0), e2 = std::exp(2.0);
  EXPECT_NEAR(w.view().ptr<float>()[0], e3 / (2 * e3 + e2), 1e-6);
  EXPECT_NEAR(w.view().ptr<float>()[2], e2 / (2 * e3 + e2), 1e-6);
  // A NaN logit: the ids are still distinct valid experts (numbers first), the weights NaN.
  EXPECT_EQ((std::vector<int32_t>(id + 3, id + 6)), (std::vector<int32_t>{1, 3, 0}));
  for (int j = 3; j < 6; ++j) EXPECT_TRUE(std::isnan(w.view().ptr<float>()[j]));
}

// The special values on CUDA, against the reference: exact ties, -0 beside +0 (equal, so the
// lower index first), -inf, NaN (ranks last, weights NaN), across lanes and slots (E = 70).
TEST(MoeRouteCuda, SpecialValuesMatchReference) {
  BRAID_REQUIRE_CUDA();
  const int64_t experts = 70;
  const int k = 8;
  OwnedTensor logits(DType::f32, {3, experts}, Device::cpu());
  float* l = logits.view().ptr<float>();
  for (int64_t i = 0; i < 3 * experts; ++i) l[i] = static_cast<float>((i * 7) % 5) - 3.0f;  // ties
  l[5] = -0.0f;  // row 0: -0 at expert 5, +0 at 40 (both above the -1..-3 values and below 1)
  l[40] = 0.0f;
  l[experts + 3] = -INFINITY;
  l[experts + 66] = -INFINITY;
  for (int64_t e = 0; e < experts; ++e)
    if (e % 3 == 0) l[experts + e] = -INFINITY;  // row 1: many -inf
  l[2 * experts + 33] = NAN;                    // row 2: a NaN
  auto ref_w = poisoned(DType::f32, {3, k}, Device::cpu());
  OwnedTensor ref_ids(DType::i32, {3, k}, Device::cpu());
  ops::moe_route_topk_softmax(logits, k, true, ref_w, ref_ids);
  auto w = poisoned(DType::f32, {3, k}, Device::cuda());
  auto ids = poisoned(DType::i32, {3, k}, Device::cuda());
  ops::moe_route_topk_softmax(to_device(logits, Device::cuda()), k, true, w, ids);
  EXPECT_EQ(to_floats(ids), to_floats(ref_ids));
  const std::vector<float> got = to_floats(w), want = to_floats(ref_w);
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "weight " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-6) << "weight " << i;
    }
  }
}

TEST(MoeRouteErrors, NameTheArgument) {
  const char* op = "moe_route_topk_softmax";
  OwnedTensor logits(DType::bf16, {3, 8}, Device::cpu()), w(DType::f32, {3, 2}, Device::cpu()),
      ids(DType::i32, {3, 2}, Device::cpu());
  OwnedTensor logits_i32(DType::i32, {3, 8}, Device::cpu()), logits_1d(DType::bf16, {8}, Device::cpu());
  OwnedTensor logits_big(DType::f32, {1, 513}, Device::cpu());
  OwnedTensor w_bf16(DType::bf16, {3, 2}, Device::cpu()), w_bad(DType::f32, {3, 3}, Device::cpu());
  OwnedTensor ids_i64(DType::i64, {3, 2}, Device::cpu()), ids_bad(DType::i32, {2, 2}, Device::cpu());
  auto run = [&](const Tensor& l, int k, const Tensor& ww, const Tensor& ii) {
    ops::moe_route_topk_softmax(l, k, true, ww, ii);
  };
  EXPECT_NO_THROW(run(logits, 2, w, ids));
  expect_error([&] { run(logits_i32, 2, w, ids); }, ErrorKind::dtype, {op, "'logits'", "i32"});
  expect_error([&] { run(logits_1d, 2, w, ids); }, ErrorKind::shape, {op, "'logits'", "2 dimensions"});
  OwnedTensor w1(DType::f32, {1, 2}, Device::cpu()), ids1(DType::i32, {1, 2}, Device::cpu());
  expect_error([&] { run(logits_big, 2, w1, ids1); }, ErrorKind::shape,
               {op, "'logits'", "between 1 and 512 experts", "[1, 513]"});
  expect_error([&] { run(logits, 0, w, ids); }, ErrorKind::invalid_argument, {op, "'k'", "= 8", "got 0"});
  OwnedTensor logits20(DType::f32, {3, 20}, Device::cpu());
  OwnedTensor w17(DType::f32, {3, 17}, Device::cpu()), ids17(DType::i32, {3, 17}, Device::cpu());
  expect_error([&] { run(logits20, 17, w17, ids17); }, ErrorKind::invalid_argument,
               {op, "'k'", "min(16, experts) = 16", "17"});
  expect_error([&] { run(logits, 9, w, ids); }, ErrorKind::invalid_argument, {op, "'k'", "= 8", "9"});
  expect_error([&] { run(logits, 2, w_bf16, ids); }, ErrorKind::dtype, {op, "'topk_weights'", "f32", "bf16"});
  expect_error([&] { run(logits, 2, w_bad, ids); }, ErrorKind::shape, {op, "'topk_weights'", "[3, 2]", "[3, 3]"});
  expect_error([&] { run(logits, 2, w, ids_i64); }, ErrorKind::dtype, {op, "'topk_ids'", "i32", "i64"});
  expect_error([&] { run(logits, 2, w, ids_bad); }, ErrorKind::shape, {op, "'topk_ids'", "[3, 2]", "[2, 2]"});
  Tensor ids_cuda = fake_cuda(DType::i32, {3, 2});
  expect_error([&] { run(logits, 2, w, ids_cuda); }, ErrorKind::device, {op, "'topk_ids'", "cpu", "cuda:0"});
}

// ---------------------------------------------------------------------------------------------
// Experts.

struct ExpertProblem {
  OwnedTensor x, weights, ids, gate_up, down;
};

// Random activations and weights scaled like a trained model's (unit-variance dot products);
// k distinct experts per token with random positive routing weights, as a router gives.
ExpertProblem make_experts(DType dtype, int64_t tokens, int64_t experts, int64_t k, int64_t hidden,
                           int64_t inter, uint64_t seed) {
  const float gate_scale = 2.0f / std::sqrt(static_cast<float>(hidden));
  const float down_scale = 2.0f / std::sqrt(static_cast<float>(inter));
  ExpertProblem p{random_host(dtype, {tokens, hidden}, seed),
                  random_host(DType::f32, {tokens, k}, seed + 1, 0.05f, 1.0f),
                  OwnedTensor(DType::i32, {tokens, k}, Device::cpu()),
                  moe::expert_weights(dtype, {experts, 2 * inter, hidden}, seed + 2, gate_scale),
                  moe::expert_weights(dtype, {experts, hidden, inter}, seed + 3, down_scale)};
  moe::distinct_routing(p.ids.view(), experts, seed + 4);
  return p;
}

struct ExpertCase {
  DType dtype;
  int64_t tokens, experts, k, hidden, inter;
};

std::string case_name(const ExpertCase& c) {
  return std::string(dtype_name(c.dtype)) + "_T" + std::to_string(c.tokens) + "_E" +
         std::to_string(c.experts) + "_k" + std::to_string(c.k) + "_H" + std::to_string(c.hidden) +
         "_I" + std::to_string(c.inter);
}
void PrintTo(const ExpertCase& c, std::ostream* os) { *os << case_name(c); }

// Runs moe_experts on `device` with copies of p's tensors; returns out as floats.
std::vector<float> run_experts(const ExpertProblem& p, const Tensor& ids, Device device) {
  const int64_t tokens = p.x.view().shape[0], hidden = p.x.view().shape[1];
  const int64_t k = ids.shape[1], inter = p.down.view().shape[2];
  auto x = to_device(p.x, device), w = to_device(p.weights, device), i = to_device(ids, device);
  auto gu = to_device(p.gate_up, device), dn = to_device(p.down, device);
  auto ws = poisoned(DType::f32, {tokens * k, inter}, device);
  auto out = poisoned(p.x.view().dtype, {tokens, hidden}, device);
  ops::moe_experts(x, w, i, gu, dn, ws, out);
  return to_floats(out);
}

class MoeExpertsDiff : public ::testing::TestWithParam<ExpertCase> {};

TEST_P(MoeExpertsDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ExpertProblem p = make_experts(c.dtype, c.tokens, c.experts, c.k, c.hidden, c.inter, seed);
  const auto ref = run_experts(p, p.ids, Device::cpu());
  const auto got = run_experts(p, p.ids, Device::cuda());
  EXPECT_LE(rel_error(got, ref), tolerance(c.dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeExpertsDiff,
    ::testing::Values(ExpertCase{DType::f32, 1, 8, 1, 64, 96},
                      ExpertCase{DType::bf16, 5, 8, 2, 64, 96},
                      ExpertCase{DType::bf16, 33, 60, 8, 64, 96},
                      ExpertCase{DType::f32, 33, 60, 2, 64, 96},
                      ExpertCase{DType::f16, 5, 128, 8, 64, 96},
                      ExpertCase{DType::bf16, 33, 8, 2, 100, 37},     // odd sizes: scalar loads
                      ExpertCase{DType::f32, 5, 60, 8, 100, 37},
                      ExpertCase{DType::bf16, 1, 128, 8, 2048, 768},  // Qwen3-30B-A3B decode
                      ExpertCase{DType::bf16, 5, 128, 8, 2048, 768},
                      ExpertCase{DType::f32, 1, 128, 8, 2048, 768}),
    [](const auto& info) { return case_name(info.param); });

TEST(MoeExpertsCuda, OutOfRangeIdsContributeNothing) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t tokens = 5, experts = 8, k = 2;
  const ExpertProblem p = make_experts(DType::bf16, tokens, experts, k, 64, 96, seed);
  // Token 1's second expert is -1 and token 3's first is 8: on CUDA they add nothing, which is
  // the reference with those pairs' weights set to zero (and any valid id in their place).
  OwnedTensor bad_ids = to_device(p.ids, Device::cpu());
  bad_ids.view().ptr<int32_t>()[1 * k + 1] = -1;
  bad_ids.view().ptr<int32_t>()[3 * k + 0] = static_cast<int32_t>(experts);
  const auto got = run_experts(p, bad_ids, Device::cuda());

  ExpertProblem zeroed{to_device(p.x, Device::cpu()), to_device(p.weights, Device::cpu()),
                       to_device(p.ids, Device::cpu()), to_device(p.gate_up, Device::cpu()),
                       to_device(p.down, Device::cpu())};
  zeroed.weights.view().ptr<float>()[1 * k + 1] = 0.0f;
  zeroed.weights.view().ptr<float>()[3 * k + 0] = 0.0f;
  const auto ref = run_experts(zeroed, zeroed.ids, Device::cpu());
  EXPECT_LE(rel_error(got, ref), tolerance(DType::bf16));
}

TEST(MoeExpertsCuda, OutMayBeX) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ExpertProblem p = make_experts(DType::bf16, 9, 60, 8, 64, 96, seed);
  const auto ref = run_experts(p, p.ids, Device::cpu());
  const Device d = Device::cuda();
  auto x = to_device(p.x, d), w = to_device(p.weights, d), ids = to_device(p.ids, d);
  auto gu = to_device(p.gate_up, d), dn = to_device(p.down, d);
  auto ws = poisoned(DType::f32, {9 * 8, 96}, d);
  ops::moe_experts(x, w, ids, gu, dn, ws, x);
  EXPECT_LE(rel_error(to_floats(x), ref), tolerance(DType::bf16));
}

// The contract written out directly, in double: with round_intermediate, g and u rounded to the
// dtype and h = dtype(silu(g) * u); always out = dtype(sum_j w_j * (down[e] @ h)).
std::vector<float> experts_by_formula(const ExpertProblem& p, bool round_intermediate = true) {
  const Tensor& xt = p.x.view();
  const DType dt = xt.dtype;
  auto r = [&](double v) { return round_intermediate ? quantize(dt, static_cast<float>(v)) : static_cast<float>(v); };
  const int64_t tokens = xt.shape[0], hidden = xt.shape[1];
  const int64_t k = p.ids.view().shape[1], inter = p.down.view().shape[2];
  const auto x = to_floats(p.x), gu = to_floats(p.gate_up), dn = to_floats(p.down);
  const auto w = to_floats(p.weights);
  std::vector<float> out(static_cast<size_t>(tokens * hidden));
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> acc(static_cast<size_t>(hidden), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = p.ids.view().ptr<int32_t>()[t * k + j];
      std::vector<float> h(static_cast<size_t>(inter));
      for (int64_t i = 0; i < inter; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < hidden; ++c) {
          g += static_cast<double>(gu[(e * 2 * inter + i) * hidden + c]) * x[t * hidden + c];
          u += static_cast<double>(gu[(e * 2 * inter + inter + i) * hidden + c]) * x[t * hidden + c];
        }
        const float gq = r(g), uq = r(u);
        h[i] = r(gq / (1.0f + std::exp(-gq)) * uq);
      }
      for (int64_t n = 0; n < hidden; ++n) {
        double y = 0;
        for (int64_t i = 0; i < inter; ++i) y += static_cast<double>(dn[(e * hidden + n) * inter + i]) * h[i];
        acc[n] += w[t * k + j] * y;
      }
    }
    for (int64_t n = 0; n < hidden; ++n) out[t * hidden + n] = quantize(dt, static_cast<float>(acc[n]));
  }
  return out;
}

TEST(MoeExpertsReference, MatchesFormula) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(dtype_name(dt)));
    const ExpertProblem p = make_experts(dt, 3, 6, 2, 24, 10, seed);
    EXPECT_LE(rel_error(run_experts(p, p.ids, Device::cpu()), experts_by_formula(p)), 1e-6);
  }
}

TEST(MoeExpertsReference, RoundsTheIntermediateToTheDtype) {
  // Without the intermediate roundings the bf16 result differs measurably (by a bf16-sized
  // amount): the roundings are part of the contract, and the reference applies them.
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ExpertProblem p = make_experts(DType::bf16, 4, 6, 2, 64, 96, seed);
  const auto got = run_experts(p, p.ids, Device::cpu());
  const auto unrounded = experts_by_formula(p, false);
  EXPECT_LE(rel_error(got, experts_by_formula(p)), 1e-6);
  EXPECT_GT(rel_error(got, unrounded), 1e-4);
  EXPECT_LE(rel_error(got, unrounded), tolerance(DType::bf16));
}

TEST(MoeExpertsReference, OutMayBeX) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ExpertProblem p = make_experts(DType::f32, 5, 8, 2, 16, 12, seed);
  const auto ref = run_experts(p, p.ids, Device::cpu());
  auto x = to_device(p.x, Device::cpu());
  auto ws = poisoned(DType::f32, {10, 12}, Device::cpu());
  ops::moe_experts(x, p.weights, p.ids, p.gate_up, p.down, ws, x);
  EXPECT_EQ(to_floats(x), ref);
}

class MoeExpertsErrors : public ::testing::Test {
 protected:
  // A valid problem: T = 3, E = 4, k = 2, H = 8, I = 6, bf16.
  OwnedTensor x{DType::bf16, {3, 8}, Device::cpu()}, w{DType::f32, {3, 2}, Device::cpu()};
  OwnedTensor ids{DType::i32, {3, 2}, Device::cpu()};
  OwnedTensor gate_up{DType::bf16, {4, 12, 8}, Device::cpu()}, down{DType::bf16, {4, 8, 6}, Device::cpu()};
  OwnedTensor ws{DType::f32, {6, 6}, Device::cpu()}, out{DType::bf16, {3, 8}, Device::cpu()};

  void SetUp() override {
    fill_bytes(x, 0);
    fill_bytes(w, 0);
    fill_bytes(ids, 0);
    fill_bytes(gate_up, 0);
    fill_bytes(down, 0);
  }
  struct Args {
    Tensor x, w, ids, gate_up, down, ws, out;
  };
  Args valid() const { return {x, w, ids, gate_up, down, ws, out}; }
  static void run(const Args& a) { ops::moe_experts(a.x, a.w, a.ids, a.gate_up, a.down, a.ws, a.out); }
  template <typename F>
  void expect(F&& mutate, ErrorKind kind, std::vector<std::string> fragments) {
    Args a = valid();
    mutate(a);
    fragments.insert(fragments.begin(), "moe_experts");
    expect_error([&] { run(a); }, kind, fragments);
  }
};

TEST_F(MoeExpertsErrors, ValidProblemRuns) { EXPECT_NO_THROW(run(valid())); }

TEST_F(MoeExpertsErrors, Shapes) {
  OwnedTensor x_i32(DType::i32, {3, 8}, Device::cpu()), x_3d(DType::bf16, {3, 1, 8}, Device::cpu());
  OwnedTensor ids_t(DType::i32, {2, 2}, Device::cpu()), ids_k0(DType::i32, {3, 0}, Device::cpu());
  OwnedTensor ids_i64(DType::i64, {3, 2}, Device::cpu()), w_k3(DType::f32, {3, 3}, Device::cpu());
  OwnedTensor w_bf16(DType::bf16, {3, 2}, Device::cpu());
  OwnedTensor gu_f32(DType::f32, {4, 12, 8}, Device::cpu()), gu_h(DType::bf16, {4, 12, 9}, Device::cpu());
  OwnedTensor gu_odd(DType::bf16, {4, 11, 8}, Device::cpu()), gu_2d(DType::bf16, {12, 8}, Device::cpu());
  OwnedTensor down_e(DType::bf16, {5, 8, 6}, Device::cpu()), down_t(DType::bf16, {4, 6, 8}, Device::cpu());
  OwnedTensor ws_bf16(DType::bf16, {6, 6}, Device::cpu()), ws_small(DType::f32, {3, 6}, Device::cpu());
  OwnedTensor out_f32(DType::f32, {3, 8}, Device::cpu()), out_bad(DType::bf16, {3, 9}, Device::cpu());

  expect([&](Args& a) { a.x = x_i32; }, ErrorKind::dtype, {"'x'", "i32"});
  expect([&](Args& a) { a.x = x_3d; }, ErrorKind::shape, {"'x'", "2 dimensions"});
  expect([&](Args& a) { a.ids = ids_t; }, ErrorKind::shape, {"'topk_ids'", "size 3 in dimension 0"});
  expect([&](Args& a) { a.ids = ids_k0; }, ErrorKind::shape, {"'topk_ids'", "at least one expert"});
  expect([&](Args& a) { a.ids = ids_i64; }, ErrorKind::dtype, {"'topk_ids'", "i32", "i64"});
  expect([&](Args& a) { a.w = w_k3; }, ErrorKind::shape, {"'topk_weights'", "[3, 2]", "[3, 3]"});
  expect([&](Args& a) { a.w = w_bf16; }, ErrorKind::dtype, {"'topk_weights'", "f32", "bf16"});
  expect([&](Args& a) { a.gate_up = gu_f32; }, ErrorKind::dtype, {"'gate_up'", "bf16", "f32"});
  expect([&](Args& a) { a.gate_up = gu_h; }, ErrorKind::shape, {"'gate_up'", "size 8 in dimension 2"});
  expect([&](Args& a) { a.gate_up = gu_odd; }, ErrorKind::shape, {"'gate_up'", "2 * intermediate", "[4, 11, 8]"});
  expect([&](Args& a) { a.gate_up = gu_2d; }, ErrorKind::shape, {"'gate_up'", "3 dimensions"});
  expect([&](Args& a) { a.down = down_e; }, ErrorKind::shape, {"'down'", "[4, 8, 6]", "[5, 8, 6]"});
  expect([&](Args& a) { a.down = down_t; }, ErrorKind::shape, {"'down'", "[4, 8, 6]", "[4, 6, 8]"});
  expect([&](Args& a) { a.ws = ws_bf16; }, ErrorKind::dtype, {"'workspace'", "f32", "bf16"});
  expect([&](Args& a) { a.ws = ws_small; }, ErrorKind::shape, {"'workspace'", "[6, 6]", "[3, 6]"});
  expect([&](Args& a) { a.out = out_f32; }, ErrorKind::dtype, {"'out'", "bf16", "f32"});
  expect([&](Args& a) { a.out = out_bad; }, ErrorKind::shape, {"'out'", "[3, 8]", "[3, 9]"});
  expect([&](Args& a) { a.down.strides[0] *= 2; }, ErrorKind::shape, {"'down'", "contiguous"});
}

TEST_F(MoeExpertsErrors, ExpertIdsOnTheCpu) {
  ids.view().ptr<int32_t>()[3] = 4;
  expect([](Args&) {}, ErrorKind::invalid_argument, {"'topk_ids'", "[0, 4)", "topk_ids[1, 1] = 4"});
  ids.view().ptr<int32_t>()[3] = -2;
  expect([](Args&) {}, ErrorKind::invalid_argument, {"'topk_ids'", "topk_ids[1, 1] = -2"});
}

TEST_F(MoeExpertsErrors, Devices) {
  Tensor down_cuda = fake_cuda(DType::bf16, {4, 8, 6});
  expect([&](Args& a) { a.down = down_cuda; }, ErrorKind::device, {"'down'", "cpu", "cuda:0"});
  // All on the GPU: the shapes are still checked there.
  Args a{fake_cuda(DType::bf16, {3, 8}),    fake_cuda(DType::f32, {3, 2}),
         fake_cuda(DType::i32, {3, 2}),     fake_cuda(DType::bf16, {4, 12, 8}),
         fake_cuda(DType::bf16, {4, 8, 6}), fake_cuda(DType::f32, {6, 5}),
         fake_cuda(DType::bf16, {3, 8})};
  expect_error([&] { run(a); }, ErrorKind::shape, {"moe_experts", "'workspace'", "[6, 6]"});
}

}  // namespace
}  // namespace braid::test
