// bench moe's load statistics: tokens per expert, the Switch Transformer auxiliary loss
// (E * sum f_i P_i) and the coefficient of variation of the load. CPU only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "bench/suites/moe_stats.h"
#include "braid/error.h"

namespace braid::bench {
namespace {

TEST(MoeStats, PerfectlyBalancedGivesAuxOneAndNoSpread) {
  // 8 tokens, 4 experts, top-2: every expert gets 4 pairs; flat logits give P_i = 1/4.
  const int64_t T = 8;
  const int E = 4, k = 2;
  std::vector<float> logits(T * E, 0.5f);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < T; ++t) ids.insert(ids.end(), {int32_t(t % E), int32_t((t + 1) % E)});
  const MoeLoadStats s = moe_load_stats(logits.data(), ids.data(), T, E, k);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{4, 4, 4, 4}));
  for (int e = 0; e < E; ++e) {
    EXPECT_DOUBLE_EQ(s.fraction[e], 0.25);
    EXPECT_NEAR(s.mean_prob[e], 0.25, 1e-15);
  }
  EXPECT_NEAR(s.aux_loss, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(s.load_cv, 0.0);
  EXPECT_EQ(s.min_load, 4);
  EXPECT_EQ(s.max_load, 4);
  EXPECT_DOUBLE_EQ(s.max_over_mean, 1.0);
  EXPECT_EQ(s.active_experts, 4);
  EXPECT_EQ(s.invalid_ids, 0);
}

TEST(MoeStats, FullySkewedGivesAuxEAndCvSqrtEMinusOne) {
  // Every token sends its one slot to expert 0 and the router is certain of it.
  const int64_t T = 6;
  const int E = 5, k = 1;
  std::vector<float> logits(T * E, 0.0f);
  for (int64_t t = 0; t < T; ++t) logits[t * E] = 1000.0f;
  const std::vector<int32_t> ids(T, 0);
  const MoeLoadStats s = moe_load_stats(logits.data(), ids.data(), T, E, k);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{6, 0, 0, 0, 0}));
  EXPECT_NEAR(s.aux_loss, double(E), 1e-9);
  // counts {T, 0, ...}: mean T/E, population stddev (T/E) sqrt(E - 1).
  EXPECT_NEAR(s.load_cv, std::sqrt(double(E - 1)), 1e-12);
  EXPECT_EQ(s.min_load, 0);
  EXPECT_EQ(s.max_load, 6);
  EXPECT_DOUBLE_EQ(s.max_over_mean, double(E));
  EXPECT_EQ(s.active_experts, 1);
}

TEST(MoeStats, SmallCaseByHand) {
  // Token 0: logits {0, 0} -> p {1/2, 1/2}; token 1: {ln 3, 0} -> p {3/4, 1/4}. Both pick expert 0.
  // f = {1, 0}, P = {5/8, 3/8}: aux = 2 * (1 * 5/8) = 1.25. counts {2, 0}: mean 1, stddev 1.
  const std::vector<float> logits = {0.0f, 0.0f, std::log(3.0f), 0.0f};
  const std::vector<int32_t> ids = {0, 0};
  const MoeLoadStats s = moe_load_stats(logits.data(), ids.data(), 2, 2, 1);
  EXPECT_NEAR(s.mean_prob[0], 0.625, 1e-6);
  EXPECT_NEAR(s.mean_prob[1], 0.375, 1e-6);
  EXPECT_NEAR(s.aux_loss, 1.25, 1e-6);
  EXPECT_DOUBLE_EQ(s.load_cv, 1.0);
  EXPECT_DOUBLE_EQ(s.max_over_mean, 2.0);
}

TEST(MoeStats, TopTwoByHand) {
  // 3 tokens, 3 experts, top-2: pairs to experts {0, 1}, {0, 2}, {0, 1} -> counts {3, 2, 1},
  // f = {1/2, 1/3, 1/6}. Logits flat for token 0 and 2, {ln 4, 0, 0} for token 1 (p {2/3, 1/6,
  // 1/6}): P = {(1/3 + 2/3 + 1/3) / 3, (1/3 + 1/6 + 1/3) / 3, same} = {4/9, 5/18, 5/18}.
  // aux = 3 * (1/2 * 4/9 + 1/3 * 5/18 + 1/6 * 5/18) = 3 * (2/9 + 5/54 + 5/108) = 39/36.
  // counts mean 2, population variance (1 + 0 + 1) / 3: cv = sqrt(2/3) / 2.
  const std::vector<float> logits = {0, 0, 0, std::log(4.0f), 0, 0, 0, 0, 0};
  const std::vector<int32_t> ids = {0, 1, 0, 2, 0, 1};
  const MoeLoadStats s = moe_load_stats(logits.data(), ids.data(), 3, 3, 2);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{3, 2, 1}));
  EXPECT_NEAR(s.mean_prob[0], 4.0 / 9, 1e-6);
  EXPECT_NEAR(s.mean_prob[1], 5.0 / 18, 1e-6);
  EXPECT_NEAR(s.aux_loss, 39.0 / 36, 1e-6);
  EXPECT_NEAR(s.load_cv, std::sqrt(2.0 / 3) / 2, 1e-12);
  EXPECT_EQ(s.min_load, 1);
  EXPECT_EQ(s.max_load, 3);
}

TEST(MoeStats, InvalidIdsAreCountedApart) {
  const std::vector<float> logits = {0, 0, 0, 0};
  const std::vector<int32_t> ids = {0, -1, 1, 7};
  const MoeLoadStats s = moe_load_stats(logits.data(), ids.data(), 2, 2, 2);
  EXPECT_EQ(s.invalid_ids, 2);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{1, 1}));
  EXPECT_DOUBLE_EQ(s.fraction[0], 0.25);  // of all T * k slots
  EXPECT_DOUBLE_EQ(s.load_cv, 0.0);
}

TEST(MoeStats, EmptyShapesAreRejected) {
  const float logit = 0;
  const int32_t id = 0;
  EXPECT_THROW(moe_load_stats(&logit, &id, 0, 1, 1), Error);
  EXPECT_THROW(moe_load_stats(&logit, &id, 1, 0, 1), Error);
  EXPECT_THROW(moe_load_stats(&logit, &id, 1, 1, 0), Error);
}

}  // namespace
}  // namespace braid::bench
