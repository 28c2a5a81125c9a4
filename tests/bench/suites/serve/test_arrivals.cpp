// Arrival times of a serving benchmark (CPU only, runs in CI): Poisson gaps with the asked mean,
// gamma gaps for other burstiness values, the same schedule for the same seed.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "bench/suites/serve/arrivals.h"
#include "braid/error.h"

namespace braid::bench::serve {
namespace {

struct GapStats {
  double mean, cv;  // coefficient of variation: 1 for exponential gaps, 1/sqrt(k) for gamma(k)
};

GapStats gap_stats(const std::vector<double>& t) {
  std::vector<double> gaps;
  for (size_t i = 1; i < t.size(); ++i) gaps.push_back(t[i] - t[i - 1]);
  const double n = static_cast<double>(gaps.size());
  const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / n;
  double sq = 0;
  for (double g : gaps) sq += (g - mean) * (g - mean);
  return {mean, std::sqrt(sq / n) / mean};
}

TEST(ServeArrivals, InfiniteRateSendsEverythingAtOnce) {
  const auto t = arrival_times(5, std::numeric_limits<double>::infinity(), 1.0, 1);
  EXPECT_EQ(t, std::vector<double>(5, 0.0));
}

TEST(ServeArrivals, PoissonGapsHaveMeanOneOverRate) {
  // 20000 exponential gaps: the mean's relative standard error is 0.7%, so 3% is over 4 sigma.
  const auto t = arrival_times(20001, 50.0, 1.0, 1234);
  EXPECT_EQ(t.front(), 0.0);
  for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
  const GapStats s = gap_stats(t);
  EXPECT_NEAR(s.mean, 1.0 / 50.0, 0.03 / 50.0);
  EXPECT_NEAR(s.cv, 1.0, 0.05);
}

TEST(ServeArrivals, BurstinessKeepsTheMeanAndChangesTheSpread) {
  const GapStats bursty = gap_stats(arrival_times(20001, 10.0, 0.5, 7));
  EXPECT_NEAR(bursty.mean, 0.1, 0.005);
  EXPECT_NEAR(bursty.cv, std::sqrt(2.0), 0.08);
  const GapStats even = gap_stats(arrival_times(20001, 10.0, 4.0, 7));
  EXPECT_NEAR(even.mean, 0.1, 0.003);
  EXPECT_NEAR(even.cv, 0.5, 0.03);
}

TEST(ServeArrivals, TheSameSeedGivesTheSameSchedule) {
  EXPECT_EQ(arrival_times(100, 5.0, 1.0, 42), arrival_times(100, 5.0, 1.0, 42));
  EXPECT_NE(arrival_times(100, 5.0, 1.0, 42), arrival_times(100, 5.0, 1.0, 43));
}

TEST(ServeArrivals, BadOptionsAreRefused) {
  EXPECT_THROW(arrival_times(3, 0.0, 1.0, 0), Error);
  EXPECT_THROW(arrival_times(3, -1.0, 1.0, 0), Error);
  EXPECT_THROW(arrival_times(3, std::nan(""), 1.0, 0), Error);
  EXPECT_THROW(arrival_times(3, 1.0, 0.0, 0), Error);
  EXPECT_THROW(arrival_times(-1, 1.0, 1.0, 0), Error);
  EXPECT_TRUE(arrival_times(0, 1.0, 1.0, 0).empty());
}

}  // namespace
}  // namespace braid::bench::serve
