// Latency summaries with NumPy's definitions (CPU only, runs in CI): np.percentile's linear
// interpolation at rank p/100 (n-1), np.std's population deviation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "bench/suites/serve/distribution.h"
#include "braid/error.h"

namespace braid::bench::serve {
namespace {

TEST(ServeStats, PercentilesInterpolateLinearlyBetweenRanksAsNumPyDoes) {
  // NumPy's documentation example: np.percentile([[10, 7, 4], [3, 2, 1]], 50) == 3.5.
  EXPECT_DOUBLE_EQ(describe({10, 7, 4, 3, 2, 1}, {50}).percentiles[0], 3.5);
  // Sorted: 1, 2.75, 3.25, 5.5, 7, 8.5, 11, 12.5, 14, 19.75, 30 (n = 11, rank = p / 10).
  const std::vector<double> x = {12.5, 3.25, 7.0, 19.75, 1.0, 8.5, 14.0, 2.75, 30.0, 5.5, 11.0};
  const Distribution d = describe(x, {0, 10, 25, 90, 95, 99, 100});
  EXPECT_DOUBLE_EQ(d.percentiles[0], 1.0);
  EXPECT_DOUBLE_EQ(d.percentiles[1], 2.75);    // rank 1
  EXPECT_DOUBLE_EQ(d.percentiles[2], 4.375);   // rank 2.5: 3.25 + 0.5 (5.5 - 3.25)
  EXPECT_DOUBLE_EQ(d.percentiles[3], 19.75);   // rank 9
  EXPECT_DOUBLE_EQ(d.percentiles[4], 24.875);  // rank 9.5
  EXPECT_NEAR(d.percentiles[5], 28.975, 1e-12);  // rank 9.9: 19.75 + 0.9 (30 - 19.75)
  EXPECT_DOUBLE_EQ(d.percentiles[6], 30.0);
  EXPECT_DOUBLE_EQ(d.median, 8.5);
  EXPECT_DOUBLE_EQ(d.min, 1.0);
  EXPECT_DOUBLE_EQ(d.max, 30.0);
  EXPECT_EQ(d.count, 11);
}

TEST(ServeStats, MeanAndPopulationStandardDeviation) {
  const Distribution d = describe({2, 4, 4, 4, 5, 5, 7, 9}, {});
  EXPECT_DOUBLE_EQ(d.mean, 5.0);
  EXPECT_DOUBLE_EQ(d.std, 2.0);  // np.std (ddof=0); the sample deviation would be 2.138
  EXPECT_DOUBLE_EQ(d.median, 4.5);
}

TEST(ServeStats, OneSampleIsEveryStatistic) {
  const Distribution d = describe({42.0}, {1, 50, 99});
  EXPECT_EQ(d.count, 1);
  for (double v : {d.mean, d.median, d.min, d.max, d.percentiles[0], d.percentiles[2]})
    EXPECT_DOUBLE_EQ(v, 42.0);
  EXPECT_DOUBLE_EQ(d.std, 0.0);
}

TEST(ServeStats, NoSamplesGiveCountZero) {
  const Distribution d = describe({}, {90, 99});
  EXPECT_EQ(d.count, 0);
  EXPECT_EQ(d.percentiles.size(), 2u);
}

TEST(ServeStats, BadInputIsRefused) {
  EXPECT_THROW(describe({1, 2}, {101}), Error);
  EXPECT_THROW(describe({1, 2}, {-1}), Error);
  EXPECT_THROW(describe({1, std::numeric_limits<double>::quiet_NaN()}, {}), Error);
  EXPECT_THROW(percentile_of_sorted({}, 50), Error);
}

}  // namespace
}  // namespace braid::bench::serve
