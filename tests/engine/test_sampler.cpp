// Sampler: greedy, seeded reproducibility, top-k / top-p limits, the distribution it draws from.
#include <map>

#include "engine/sampler.h"
#include "test_util.h"

namespace braid::test {
namespace {

TEST(Sampler, GreedyTakesTheFirstMaximum) {
  engine::Sampler s({});
  const std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(s.next(logits), 1);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  const std::vector<float> logits = {0.5f, 0.2f, 2.5f, 2.4f, -3.0f};
  engine::Sampler k1({1.0f, 1, 1.0f, 42});
  engine::Sampler p0({1.0f, 0, 1e-6f, 42});
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(k1.next(logits), 2);
    EXPECT_EQ(p0.next(logits), 2);
  }
}

TEST(Sampler, SameSeedSameTokensAndTheRightFrequencies) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  engine::Sampler a({1.0f, 0, 1.0f, 7}), b({1.0f, 0, 1.0f, 7});
  std::map<int, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const int x = a.next(logits);
    EXPECT_EQ(x, b.next(logits));
    ++counts[x];
  }
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
  // top_p = 0.75 keeps {0, 1} (mass 0.8): renormalised 0.625 / 0.375.
  engine::Sampler p({1.0f, 0, 0.75f, 3});
  std::map<int, int> kept;
  for (int i = 0; i < n; ++i) ++kept[p.next(logits)];
  EXPECT_EQ(kept.count(2), 0u);
  EXPECT_NEAR(kept[0] / double(n), 0.625, 0.02);
}

TEST(Sampler, BadParametersAreErrors) {
  expect_error([] { engine::Sampler({-1.0f, 0, 1.0f, 0}); }, ErrorKind::invalid_argument, {"temperature"});
  expect_error([] { engine::Sampler({1.0f, -2, 1.0f, 0}); }, ErrorKind::invalid_argument, {"top_k"});
  expect_error([] { engine::Sampler({1.0f, 0, 0.0f, 0}); }, ErrorKind::invalid_argument, {"top_p"});
}

}  // namespace
}  // namespace braid::test
