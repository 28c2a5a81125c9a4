// moe_route_softmax_grouped (DeepSeek-V2's router): the reference against a naive
// re-implementation (transformers' DeepseekV2 gate, in fp64) and hand-worked cases (groups, ties,
// NaN); its p against moe_route_topk_softmax's on each backend (the same bits); CUDA against the
// reference on random inputs; argument errors.
//
// What agrees exactly, and what does not:
// - on each backend, p is moe_route_topk_softmax's p to the bit (the CPU's cpu::router_softmax,
//   the CUDA kernels' router_softmax.cuh), so with one group and the same choices the weights
//   are that op's weights times routed_scaling_factor, to the bit (SameBitsAsTopkSoftmax);
// - between the backends p is NOT the same bits: the CPU takes expf from the C library and the
//   sum in fp64, CUDA its own expf (2 ulp) and an fp32 sum in another order (and the chosen p's
//   sum for renormalize in another order too). The weights agree to a few ulp (checked as the
//   routing tests do, rel_error <= 1e-5); the NaN pattern agrees exactly;
// - the ids agree exactly when distinct logits give p more than a few ulp apart, which holds for
//   every input here: f32 logits on a grid of 1/64, bf16 and f16 logits as they come (|x| < 4:
//   neighbours differ by far more than an fp32 ulp of p, except next to 0 where no choice is
//   made), and exact ties, which both backends break by index. Logits a few fp32 ulp apart could
//   be ranked differently by the two backends (as the two ops themselves could differ there).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct Routed {
  std::vector<float> weights;
  std::vector<int32_t> ids;
};

struct Config {
  int n_group, topk_group, k;
  bool renormalize;
  float scale;
};

std::string config_name(const Config& c) {
  return "g" + std::to_string(c.n_group) + "_top" + std::to_string(c.topk_group) + "_k" +
         std::to_string(c.k) + (c.renormalize ? "_renorm" : "") + "_scale" +
         std::to_string(static_cast<int>(c.scale));
}

std::vector<int32_t> as_ids(const Tensor& ids) {
  std::vector<int32_t> out;
  for (float v : to_floats(ids)) out.push_back(static_cast<int32_t>(v));
  return out;
}

// Runs the router on `device` with a copy of the host logits.
Routed route(const Tensor& logits, const Config& c, Device device) {
  const int64_t tokens = logits.shape[0];
  auto l = to_device(logits, device);
  auto w = poisoned(DType::f32, {tokens, c.k}, device);
  auto ids = poisoned(DType::i32, {tokens, c.k}, device);
  ops::moe_route_softmax_grouped(l, c.n_group, c.topk_group, c.k, c.renormalize, c.scale, w, ids);
  return {to_floats(w), as_ids(ids)};
}

Routed route_topk_softmax(const Tensor& logits, int k, bool renormalize, Device device) {
  const int64_t tokens = logits.shape[0];
  auto l = to_device(logits, device);
  auto w = poisoned(DType::f32, {tokens, k}, device);
  auto ids = poisoned(DType::i32, {tokens, k}, device);
  ops::moe_route_topk_softmax(l, k, renormalize, w, ids);
  return {to_floats(w), as_ids(ids)};
}

OwnedTensor host_tensor(DType dtype, std::vector<int64_t> shape, const std::vector<float>& values) {
  OwnedTensor t(dtype, shape, Device::cpu());
  for (size_t i = 0; i < values.size(); ++i)
    store_from_float(t.data(), dtype, static_cast<int64_t>(i), values[i]);
  return t;
}

// Logits in [-4, 4) on a grid of 1/64 (exact in every float dtype): distinct logits give p at
// least 1.5% apart on either backend, and exact ties are frequent.
OwnedTensor grid_logits(DType dtype, int64_t tokens, int64_t experts, uint64_t seed) {
  auto n = random_host(DType::i32, {tokens, experts}, seed, -256, 256);
  std::vector<float> v = to_floats(n);
  for (float& x : v) x /= 64;
  return host_tensor(dtype, {tokens, experts}, v);
}

// Random logits for a differential test: bf16 and f16 as they come, f32 on the grid (see the top).
OwnedTensor diff_logits(DType dtype, int64_t tokens, int64_t experts, uint64_t seed) {
  if (dtype == DType::f32) return grid_logits(dtype, tokens, experts, seed);
  return random_host(dtype, {tokens, experts}, seed, -4, 4);
}

std::vector<int32_t> row(const std::vector<int32_t>& ids, int t, int k) {
  return std::vector<int32_t>(ids.begin() + t * k, ids.begin() + (t + 1) * k);
}

// Every row: k distinct ids in [0, experts), all in kept groups (at most topk_group groups).
void expect_valid_ids(const std::vector<int32_t>& ids, int64_t tokens, int64_t experts,
                      const Config& c) {
  const int64_t group_size = experts / c.n_group;
  for (int64_t t = 0; t < tokens; ++t) {
    std::set<int32_t> seen;
    std::set<int64_t> groups;
    for (int j = 0; j < c.k; ++j) {
      const int32_t e = ids[t * c.k + j];
      ASSERT_TRUE(e >= 0 && e < experts) << "token " << t << " j " << j << ": " << e;
      EXPECT_TRUE(seen.insert(e).second) << "token " << t << ": expert " << e << " twice";
      groups.insert(e / group_size);
    }
    EXPECT_LE(static_cast<int>(groups.size()), c.topk_group) << "token " << t;
  }
}

// ---------------------------------------------------------------------------------------------
// The reference against a naive re-implementation.

// transformers' DeepseekV2MoEGate in fp64, as plainly as it reads: scores = softmax(logits);
// "group_limited_greedy": group score = the group's max, the topk_group best groups (a stable
// sort: ties to the lower group), the other groups' scores set to 0.0; then the top k of all
// scores (stable: ties to the lower index). The weights as the contract has them: p, divided by
// the chosen p's sum when renormalize, times scale. (Filling with 0.0 and excluding agree as
// every p > 0 here.)
Routed naive(const Tensor& logits, const Config& c) {
  const int64_t tokens = logits.shape[0], experts = logits.shape[1];
  const int64_t group_size = experts / c.n_group;
  Routed r;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> p(experts);
    double m = -INFINITY, sum = 0;
    for (int64_t e = 0; e < experts; ++e)
      m = std::max(m, static_cast<double>(load_as_float(logits.data, logits.dtype, t * experts + e)));
    for (int64_t e = 0; e < experts; ++e) {
      p[e] = std::exp(load_as_float(logits.data, logits.dtype, t * experts + e) - m);
      sum += p[e];
    }
    for (double& v : p) v /= sum;

    std::vector<double> group_scores(c.n_group, -INFINITY);
    for (int64_t e = 0; e < experts; ++e)
      group_scores[e / group_size] = std::max(group_scores[e / group_size], p[e]);
    std::vector<int> groups(c.n_group);
    std::iota(groups.begin(), groups.end(), 0);
    std::stable_sort(groups.begin(), groups.end(),
                     [&](int a, int b) { return group_scores[a] > group_scores[b]; });
    std::vector<double> masked(experts, 0.0);
    for (int i = 0; i < c.topk_group; ++i)
      for (int64_t j = 0; j < group_size; ++j)
        masked[groups[i] * group_size + j] = p[groups[i] * group_size + j];

    std::vector<int32_t> order(experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return masked[a] > masked[b]; });
    double chosen = 0;
    for (int j = 0; j < c.k; ++j) chosen += p[order[j]];
    for (int j = 0; j < c.k; ++j) {
      r.ids.push_back(order[j]);
      r.weights.push_back(static_cast<float>(p[order[j]] / (c.renormalize ? chosen : 1.0) * c.scale));
    }
  }
  return r;
}

TEST(MoeRouteSoftmaxGroupedReference, MatchesNaiveDeepseekV2Gate) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t tokens = 9;
  uint64_t s = seed;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (int64_t experts : {64, 160})
      for (Config c : {Config{1, 1, 6, false, 1.0f},     // greedy (DeepSeek-V2-Lite)
                       Config{1, 1, 8, true, 16.0f},
                       Config{8, 3, 6, false, 16.0f},    // group_limited_greedy (DeepSeek-V2)
                       Config{8, 3, 6, true, 1.0f},
                       Config{8, 3, 8, true, 16.0f},
                       Config{8, 3, 8, false, 1.0f}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " E" + std::to_string(experts) + " " +
                     config_name(c));
        auto logits = grid_logits(dtype, tokens, experts, ++s);
        const Routed got = route(logits, c, Device::cpu());
        const Routed want = naive(logits, c);
        expect_valid_ids(got.ids, tokens, experts, c);
        EXPECT_EQ(got.ids, want.ids);
        for (size_t i = 0; i < got.weights.size(); ++i)
          EXPECT_NEAR(got.weights[i], want.weights[i], 2e-6 * std::fabs(want.weights[i]))
              << "weight " << i;
      }
}

// E = 8 in 4 groups of 2, keep 2, k = 3. Group scores are the groups' largest p:
//   group 0: x = 3, -3      max 3    kept
//   group 1: x = 2.5, 2.4   max 2.5  dropped, although its two p sum to the most
//   group 2: x = 1, 0.9     max 1    dropped
//   group 3: x = 2.8, -4    max 2.8  kept
// The choice is {0, 6, 1}: expert 1 (x = -3) is taken over the dropped groups' far better
// experts. A global top 3 would be {0, 6, 2}; DeepSeek-V3's top-two sums would keep group 1.
TEST(MoeRouteSoftmaxGroupedReference, KeepsTheGroupsWithTheLargestP) {
  const std::vector<float> x = {3, -3, 2.5f, 2.4f, 1, 0.9f, 2.8f, -4};
  auto logits = host_tensor(DType::f32, {1, 8}, x);
  double total = 0;
  for (float v : x) total += std::exp(static_cast<double>(v) - 3);
  auto p = [&](int e) { return std::exp(static_cast<double>(x[e]) - 3) / total; };
  const double chosen = p(0) + p(6) + p(1);
  for (bool renormalize : {false, true})
    for (float scale : {1.0f, 16.0f}) {
      SCOPED_TRACE(std::string("renormalize ") + (renormalize ? "on" : "off") + ", scale " +
                   std::to_string(scale));
      const Routed r = route(logits, {4, 2, 3, renormalize, scale}, Device::cpu());
      EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 6, 1}));
      for (int j = 0; j < 3; ++j) {
        const double want = p(r.ids[j]) / (renormalize ? chosen : 1.0) * scale;
        EXPECT_NEAR(r.weights[j], want, 1e-6 * want) << "j " << j;
      }
    }
  // One group (greedy): the global top 3.
  EXPECT_EQ(route(logits, {1, 1, 3, false, 1.0f}, Device::cpu()).ids,
            (std::vector<int32_t>{0, 6, 2}));
}

// E = 16 in 4 groups of 4, keep 2, k = 5: ties between groups and between experts.
std::vector<float> tie_logits() {
  std::vector<float> x(3 * 16, 0.0f);             // row 0: all equal
  for (int e = 8; e < 16; ++e) x[16 + e] = 1;     // row 1: groups 2, 3 tie
  for (int e = 3; e < 16; e += 4) x[32 + e] = 2;  // row 2: every group ties
  return x;
}
const std::vector<std::vector<int32_t>> kTieIds = {
    {0, 1, 2, 3, 4},     // groups 0, 1 kept; experts in index order
    {8, 9, 10, 11, 12},  // groups 2, 3 kept
    {3, 7, 0, 1, 2},     // groups 0, 1 kept; their two 2s, then the others in index order
};
const Config kTieConfig{4, 2, 5, true, 1.0f};

// p ties where the logits differ: exp underflows to 0 for all but expert 1, so the zeros rank
// by index (moe_route_topk_softmax, which ranks by logit, would give {1, 2, 3, 0}).
const std::vector<float> kUnderflowLogits = {-300, 0, -200, -250};
const std::vector<int32_t> kUnderflowIds = {1, 0, 2, 3};
const Config kUnderflowConfig{1, 1, 4, false, 16.0f};

TEST(MoeRouteSoftmaxGroupedReference, TiesGoToTheLowerIndex) {
  auto logits = host_tensor(DType::f32, {3, 16}, tie_logits());
  const Routed r = route(logits, kTieConfig, Device::cpu());
  for (int t = 0; t < 3; ++t) EXPECT_EQ(row(r.ids, t, 5), kTieIds[t]) << "token " << t;
  for (int j = 0; j < 5; ++j) EXPECT_NEAR(r.weights[j], 0.2, 1e-6);  // five equal p
  EXPECT_EQ(r.ids, naive(logits, kTieConfig).ids);  // its stable sorts break ties the same way

  auto under = host_tensor(DType::f32, {1, 4}, kUnderflowLogits);
  const Routed u = route(under, kUnderflowConfig, Device::cpu());
  EXPECT_EQ(u.ids, kUnderflowIds);
  EXPECT_EQ(u.weights, (std::vector<float>{16, 0, 0, 0}));
}

// A NaN logit (or +inf, or a row of -inf) makes every p of its row NaN: every p ranks as -inf,
// so the groups tie and the lowest ones are kept, the experts tie and go by index; the weights
// are NaN. Row 3 is ordinary and unaffected.
const std::vector<float> kNanLogits = {
    0, 1, 2, NAN, 4, 5, 6, 7,                                                        // NaN
    -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
    0, 1, 2, 3, 4, 5, INFINITY, 7,                                                   // +inf
    0, 1, 2, 3, 4, 5, 6, 7};
const std::vector<std::vector<int32_t>> kNanIds = {{0, 1, 2}, {0, 1, 2}, {0, 1, 2}, {7, 6, 5}};
const Config kNanConfig{4, 2, 3, true, 16.0f};

void expect_nan_rows(const Routed& r) {
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(row(r.ids, t, 3), kNanIds[t]) << "token " << t;
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(std::isnan(r.weights[t * 3 + j]), t < 3) << "token " << t << " j " << j;
  }
}

TEST(MoeRouteSoftmaxGroupedReference, NaNRanksBelowEveryNumber) {
  auto logits = host_tensor(DType::f32, {4, 8}, kNanLogits);
  expect_nan_rows(route(logits, kNanConfig, Device::cpu()));
  expect_nan_rows(route(logits, {4, 2, 3, false, 1.0f}, Device::cpu()));
}

// ---------------------------------------------------------------------------------------------
// p to the bit: moe_route_topk_softmax's, on each backend.

// One group: the same choices as moe_route_topk_softmax (no p ties between distinct logits on
// the grid), and weights that are its weights times scale, to the bit. Groups: each chosen
// expert's weight (no renormalisation, scale 1) is its p in moe_route_topk_softmax's top 16.
void expect_same_bits_as_topk_softmax(Device device) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t tokens = 37;
  uint64_t s = seed;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (int64_t experts : {8, 16, 64, 160, 512}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " E" + std::to_string(experts));
      auto logits = grid_logits(dtype, tokens, experts, ++s);
      const int k_all = static_cast<int>(std::min<int64_t>(experts, ops::kMoeMaxTopK));
      for (bool renormalize : {false, true}) {
        const Routed topk = route_topk_softmax(logits, k_all, renormalize, device);
        for (float scale : {1.0f, 16.0f}) {
          const Routed got = route(logits, {1, 1, k_all, renormalize, scale}, device);
          EXPECT_EQ(got.ids, topk.ids) << "renormalize " << renormalize;
          ASSERT_EQ(got.weights.size(), topk.weights.size());
          for (size_t i = 0; i < got.weights.size(); ++i) {
            const float want = topk.weights[i] * scale;  // fp32, as the op rounds it
            EXPECT_EQ(std::memcmp(&got.weights[i], &want, sizeof(float)), 0)
                << "weight " << i << ": " << got.weights[i] << " vs " << want
                << " (renormalize " << renormalize << ", scale " << scale << ")";
          }
        }
      }

      if (experts < 16) continue;
      // Groups: every chosen expert found among moe_route_topk_softmax's 16 (all of them when
      // E = 16) has its p there, to the bit.
      const Routed topk = route_topk_softmax(logits, 16, false, device);
      const Config c = experts == 16 ? Config{4, 2, 5, false, 1.0f} : Config{8, 3, 6, false, 1.0f};
      const Routed got = route(logits, c, device);
      int compared = 0;
      for (int64_t t = 0; t < tokens; ++t)
        for (int j = 0; j < c.k; ++j) {
          const int32_t e = got.ids[t * c.k + j];
          for (int i = 0; i < 16; ++i)
            if (topk.ids[t * 16 + i] == e) {
              ++compared;
              EXPECT_EQ(std::memcmp(&got.weights[t * c.k + j], &topk.weights[t * 16 + i], 4), 0)
                  << "token " << t << " expert " << e;
            }
        }
      EXPECT_GE(compared, tokens);  // the best expert at least is always there
      if (experts == 16) EXPECT_EQ(compared, tokens * c.k);
    }
}

TEST(MoeRouteSoftmaxGroupedReference, SameBitsAsTopkSoftmax) {
  expect_same_bits_as_topk_softmax(Device::cpu());
}

TEST(MoeRouteSoftmaxGroupedCuda, SameBitsAsTopkSoftmax) {
  BRAID_REQUIRE_CUDA();
  expect_same_bits_as_topk_softmax(Device::cuda());
}

// ---------------------------------------------------------------------------------------------
// CUDA against the reference.

struct DiffCase {
  DType dtype;
  int64_t tokens, experts;
  Config config;
};

std::string case_name(const DiffCase& c) {
  return std::string(dtype_name(c.dtype)) + "_T" + std::to_string(c.tokens) + "_E" +
         std::to_string(c.experts) + "_" + config_name(c.config);
}
void PrintTo(const DiffCase& c, std::ostream* os) { *os << case_name(c); }

class MoeRouteSoftmaxGroupedDiff : public ::testing::TestWithParam<DiffCase> {};

TEST_P(MoeRouteSoftmaxGroupedDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto logits = diff_logits(c.dtype, c.tokens, c.experts, seed);
  const Routed ref = route(logits, c.config, Device::cpu());
  const Routed got = route(logits, c.config, Device::cuda());
  expect_valid_ids(ref.ids, c.tokens, c.experts, c.config);
  EXPECT_EQ(got.ids, ref.ids);
  EXPECT_LE(rel_error(got.weights, ref.weights), tolerance(DType::f32));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeRouteSoftmaxGroupedDiff,
    ::testing::Values(
        // DeepSeek-V2: 160 experts, group_limited_greedy 8 groups / 3 kept, k = 6, scale 16.
        DiffCase{DType::bf16, 1, 160, {8, 3, 6, false, 16.0f}},
        DiffCase{DType::bf16, 7, 160, {8, 3, 6, false, 16.0f}},
        DiffCase{DType::f32, 512, 160, {8, 3, 6, true, 16.0f}},   // the last one token a block
        DiffCase{DType::bf16, 513, 160, {8, 3, 6, false, 16.0f}}, // 4 tokens a block, + 1
        DiffCase{DType::f32, 2000, 160, {8, 3, 6, false, 16.0f}},
        DiffCase{DType::f16, 33, 160, {8, 3, 8, true, 1.0f}},
        DiffCase{DType::f32, 33, 160, {1, 1, 8, true, 1.0f}},     // greedy
        // DeepSeek-V2-Lite: 64 experts, greedy, k = 6, scale 1.
        DiffCase{DType::bf16, 1, 64, {1, 1, 6, false, 1.0f}},
        DiffCase{DType::bf16, 2000, 64, {1, 1, 6, false, 1.0f}},
        DiffCase{DType::f16, 33, 64, {1, 1, 6, true, 1.0f}},
        DiffCase{DType::f32, 1, 64, {8, 3, 8, true, 16.0f}},
        DiffCase{DType::bf16, 1027, 64, {8, 3, 8, false, 1.0f}},
        // The limits: 512 experts.
        DiffCase{DType::f32, 7, 512, {8, 3, 8, true, 16.0f}},
        DiffCase{DType::bf16, 2000, 512, {1, 1, 8, false, 16.0f}},
        DiffCase{DType::f16, 513, 512, {8, 3, 6, true, 1.0f}},
        DiffCase{DType::bf16, 1, 512, {8, 3, 6, false, 16.0f}},
        DiffCase{DType::f32, 7, 512, {64, 20, 16, true, 1.0f}},   // > 32 groups, k = 16
        DiffCase{DType::f32, 7, 32, {32, 4, 4, false, 1.0f}},     // groups of one
        DiffCase{DType::bf16, 7, 24, {3, 1, 8, true, 1.0f}}),     // k = the kept experts
    [](const auto& info) { return case_name(info.param); });

TEST(MoeRouteSoftmaxGroupedCuda, Ties) {
  BRAID_REQUIRE_CUDA();
  auto logits = host_tensor(DType::f32, {3, 16}, tie_logits());
  const Routed r = route(logits, kTieConfig, Device::cuda());
  for (int t = 0; t < 3; ++t) EXPECT_EQ(row(r.ids, t, 5), kTieIds[t]) << "token " << t;
  auto under = host_tensor(DType::f32, {1, 4}, kUnderflowLogits);
  const Routed u = route(under, kUnderflowConfig, Device::cuda());
  EXPECT_EQ(u.ids, kUnderflowIds);
  EXPECT_EQ(u.weights, (std::vector<float>{16, 0, 0, 0}));

  // DeepSeek-V2's shape with three logit values: ties everywhere, the same ids as the CPU.
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto coarse = random_host(DType::i32, {64, 160}, seed, -1, 2);
  auto few_values = host_tensor(DType::bf16, {64, 160}, to_floats(coarse));
  for (Config c : {Config{8, 3, 6, false, 16.0f}, Config{1, 1, 6, true, 1.0f}}) {
    const Routed ref = route(few_values, c, Device::cpu());
    const Routed got = route(few_values, c, Device::cuda());
    EXPECT_EQ(got.ids, ref.ids) << config_name(c);
    EXPECT_LE(rel_error(got.weights, ref.weights), tolerance(DType::f32)) << config_name(c);
  }
}

TEST(MoeRouteSoftmaxGroupedCuda, NaN) {
  BRAID_REQUIRE_CUDA();
  auto logits = host_tensor(DType::f32, {4, 8}, kNanLogits);
  expect_nan_rows(route(logits, kNanConfig, Device::cuda()));
  expect_nan_rows(route(logits, {4, 2, 3, false, 1.0f}, Device::cuda()));
}

TEST(MoeRouteSoftmaxGroupedCuda, StridedLogitRows) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto wide = random_host(DType::bf16, {9, 168}, seed, -4, 4);
  auto dwide = to_device(wide, Device::cuda());
  Tensor logits = dwide.view();
  logits.shape[1] = 160;  // rows of 160 at a row stride of 168
  auto w = poisoned(DType::f32, {9, 6}, Device::cuda());
  auto ids = poisoned(DType::i32, {9, 6}, Device::cuda());
  ops::moe_route_softmax_grouped(logits, 8, 3, 6, false, 16.0f, w, ids);

  Tensor host_rows = wide.view();
  host_rows.shape[1] = 160;
  auto ref_w = poisoned(DType::f32, {9, 6}, Device::cpu());
  OwnedTensor ref_ids(DType::i32, {9, 6}, Device::cpu());
  ops::moe_route_softmax_grouped(host_rows, 8, 3, 6, false, 16.0f, ref_w, ref_ids);
  EXPECT_EQ(to_floats(ids), to_floats(ref_ids));
  EXPECT_LE(rel_error(to_floats(w), to_floats(ref_w)), tolerance(DType::f32));
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST(MoeRouteSoftmaxGroupedErrors, NameTheArgument) {
  const char* op = "moe_route_softmax_grouped";
  auto cpu = Device::cpu();
  OwnedTensor logits(DType::bf16, {3, 8}, cpu), w(DType::f32, {3, 3}, cpu),
      ids(DType::i32, {3, 3}, cpu);
  fill_bytes(logits.view(), 0);
  auto run = [&](const Tensor& l, int n_group, int topk_group, int k, const Tensor& ww,
                 const Tensor& ii, float scale = 1.0f) {
    ops::moe_route_softmax_grouped(l, n_group, topk_group, k, true, scale, ww, ii);
  };
  EXPECT_NO_THROW(run(logits, 4, 2, 3, w, ids));
  EXPECT_NO_THROW(run(logits, 1, 1, 3, w, ids));

  // logits
  expect_error([&] { run(Tensor{}, 4, 2, 3, w, ids); }, ErrorKind::invalid_argument,
               {op, "'logits'", "expected a tensor"});
  OwnedTensor logits_i32(DType::i32, {3, 8}, cpu), logits_1d(DType::bf16, {8}, cpu);
  expect_error([&] { run(logits_i32, 4, 2, 3, w, ids); }, ErrorKind::dtype, {op, "'logits'", "i32"});
  expect_error([&] { run(logits_1d, 4, 2, 3, w, ids); }, ErrorKind::shape, {op, "'logits'", "2 dimensions"});
  OwnedTensor logits_big(DType::f32, {3, 520}, cpu);
  expect_error([&] { run(logits_big, 4, 2, 3, w, ids); }, ErrorKind::shape,
               {op, "'logits'", "between 1 and 512 experts", "[3, 520]"});
  OwnedTensor logits_wide(DType::bf16, {8, 3}, cpu);
  Tensor logits_cols = logits_wide.view();  // [3, 8] with a column stride of 3
  logits_cols.shape[0] = 3;
  logits_cols.shape[1] = 8;
  logits_cols.strides[0] = 1;
  logits_cols.strides[1] = 3;
  expect_error([&] { run(logits_cols, 4, 2, 3, w, ids); }, ErrorKind::shape, {op, "'logits'", "dense last dimension"});

  // n_group, topk_group, k, routed_scaling_factor
  expect_error([&] { run(logits, 3, 2, 3, w, ids); }, ErrorKind::invalid_argument,
               {op, "'n_group'", "divisor of the number of experts (8)", "got 3"});
  expect_error([&] { run(logits, 0, 1, 3, w, ids); }, ErrorKind::invalid_argument, {op, "'n_group'", "got 0"});
  expect_error([&] { run(logits, 4, 0, 3, w, ids); }, ErrorKind::invalid_argument,
               {op, "'topk_group'", "n_group = 4", "got 0"});
  expect_error([&] { run(logits, 4, 5, 3, w, ids); }, ErrorKind::invalid_argument,
               {op, "'topk_group'", "n_group = 4", "got 5"});
  expect_error([&] { run(logits, 4, 2, 0, w, ids); }, ErrorKind::invalid_argument, {op, "'k'", "= 4", "got 0"});
  OwnedTensor w5(DType::f32, {3, 5}, cpu), ids5(DType::i32, {3, 5}, cpu);
  expect_error([&] { run(logits, 4, 2, 5, w5, ids5); }, ErrorKind::invalid_argument,
               {op, "'k'", "topk_group * experts / n_group) = 4", "got 5"});
  OwnedTensor logits64(DType::f32, {3, 64}, cpu);
  OwnedTensor w17(DType::f32, {3, 17}, cpu), ids17(DType::i32, {3, 17}, cpu);
  expect_error([&] { run(logits64, 1, 1, 17, w17, ids17); }, ErrorKind::invalid_argument,
               {op, "'k'", "min(16, topk_group * experts / n_group) = 16", "got 17"});
  expect_error([&] { run(logits, 4, 2, 3, w, ids, NAN); }, ErrorKind::invalid_argument,
               {op, "'routed_scaling_factor'", "finite"});
  expect_error([&] { run(logits, 4, 2, 3, w, ids, -INFINITY); }, ErrorKind::invalid_argument,
               {op, "'routed_scaling_factor'", "finite"});

  // topk_weights, topk_ids
  expect_error([&] { run(logits, 4, 2, 3, Tensor{}, ids); }, ErrorKind::invalid_argument,
               {op, "'topk_weights'", "expected a tensor"});
  expect_error([&] { run(logits, 4, 2, 3, w, Tensor{}); }, ErrorKind::invalid_argument,
               {op, "'topk_ids'", "expected a tensor"});
  OwnedTensor w_bf16(DType::bf16, {3, 3}, cpu), w_bad(DType::f32, {3, 2}, cpu);
  OwnedTensor ids_i64(DType::i64, {3, 3}, cpu), ids_bad(DType::i32, {2, 3}, cpu);
  expect_error([&] { run(logits, 4, 2, 3, w_bf16, ids); }, ErrorKind::dtype, {op, "'topk_weights'", "f32", "bf16"});
  expect_error([&] { run(logits, 4, 2, 3, w_bad, ids); }, ErrorKind::shape, {op, "'topk_weights'", "[3, 3]", "[3, 2]"});
  expect_error([&] { run(logits, 4, 2, 3, w, ids_i64); }, ErrorKind::dtype, {op, "'topk_ids'", "i32", "i64"});
  expect_error([&] { run(logits, 4, 2, 3, w, ids_bad); }, ErrorKind::shape, {op, "'topk_ids'", "[3, 3]", "[2, 3]"});
  OwnedTensor w_wide(DType::f32, {3, 4}, cpu), ids_wide(DType::i32, {3, 4}, cpu);
  Tensor w_strided = w_wide.view(), ids_strided = ids_wide.view();
  w_strided.shape[1] = 3;  // [3, 3] at a row stride of 4
  ids_strided.shape[1] = 3;
  expect_error([&] { run(logits, 4, 2, 3, w_strided, ids); }, ErrorKind::shape, {op, "'topk_weights'", "contiguous"});
  expect_error([&] { run(logits, 4, 2, 3, w, ids_strided); }, ErrorKind::shape, {op, "'topk_ids'", "contiguous"});

  // devices
  Tensor w_cuda = fake_cuda(DType::f32, {3, 3});
  expect_error([&] { run(logits, 4, 2, 3, w_cuda, ids); }, ErrorKind::device, {op, "'topk_weights'", "cpu", "cuda:0"});
  Tensor ids_cuda = fake_cuda(DType::i32, {3, 3});
  expect_error([&] { run(logits, 4, 2, 3, w, ids_cuda); }, ErrorKind::device, {op, "'topk_ids'", "cpu", "cuda:0"});
}

// No tokens: nothing to do, and nothing is read.
TEST(MoeRouteSoftmaxGroupedReference, NoTokens) {
  OwnedTensor logits(DType::f32, {0, 160}, Device::cpu()), w(DType::f32, {0, 6}, Device::cpu()),
      ids(DType::i32, {0, 6}, Device::cpu());
  EXPECT_NO_THROW(ops::moe_route_softmax_grouped(logits, 8, 3, 6, false, 16.0f, w, ids));
}

}  // namespace
}  // namespace braid::test
