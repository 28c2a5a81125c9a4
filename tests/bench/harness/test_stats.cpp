// Summary statistics of timing samples (CPU only, runs in CI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "bench/harness/stats.h"
#include "test_util.h"

namespace braid::bench {
namespace {

TEST(BenchStats, OddCountMedianIsTheMiddleValue) {
  Stats s = summarize({5.0, 1.0, 3.0});
  EXPECT_EQ(s.count, 3);
  EXPECT_DOUBLE_EQ(s.median_us, 3.0);
  EXPECT_DOUBLE_EQ(s.min_us, 1.0);
  EXPECT_DOUBLE_EQ(s.max_us, 5.0);
  EXPECT_DOUBLE_EQ(s.mean_us, 3.0);
}

TEST(BenchStats, EvenCountMedianIsTheMeanOfTheTwoMiddleValues) {
  Stats s = summarize({10.0, 2.0, 4.0, 1.0});
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.median_us, 3.0);
  EXPECT_DOUBLE_EQ(s.min_us, 1.0);
  EXPECT_DOUBLE_EQ(s.max_us, 10.0);
  EXPECT_DOUBLE_EQ(s.mean_us, 4.25);
}

TEST(BenchStats, SingleSample) {
  Stats s = summarize({7.5});
  EXPECT_EQ(s.count, 1);
  EXPECT_DOUBLE_EQ(s.median_us, 7.5);
  EXPECT_DOUBLE_EQ(s.min_us, 7.5);
  EXPECT_DOUBLE_EQ(s.max_us, 7.5);
  EXPECT_DOUBLE_EQ(s.mean_us, 7.5);
}

TEST(BenchStats, MedianIgnoresOutliersUnlikeTheMean) {
  std::vector<double> v(99, 2.0);
  v.push_back(1e6);  // one launch that hit a context switch
  Stats s = summarize(v);
  EXPECT_DOUBLE_EQ(s.median_us, 2.0);
  EXPECT_GT(s.mean_us, 100.0);
  EXPECT_DOUBLE_EQ(s.max_us, 1e6);
}

TEST(BenchStats, AgreesWithSortingOnRandomSamples) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int n : {1, 2, 3, 10, 101, 1000}) {
    std::uniform_real_distribution<double> dist(0.5, 100.0);
    std::vector<double> v(n);
    for (auto& x : v) x = dist(rng);
    std::vector<double> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    double sum = 0;
    for (double x : v) sum += x;
    Stats s = summarize(v);
    EXPECT_EQ(s.count, n);
    EXPECT_DOUBLE_EQ(s.median_us, median) << "n=" << n;
    EXPECT_DOUBLE_EQ(s.min_us, sorted.front());
    EXPECT_DOUBLE_EQ(s.max_us, sorted.back());
    EXPECT_NEAR(s.mean_us, sum / n, 1e-9 * sum);
    EXPECT_LE(s.min_us, s.median_us);
    EXPECT_LE(s.median_us, s.max_us);
  }
}

TEST(BenchStats, RejectsEmptyAndInvalidSamples) {
  test::expect_error([] { summarize({}); }, ErrorKind::invalid_argument, {"no samples"});
  test::expect_error([] { summarize({1.0, NAN}); }, ErrorKind::invalid_argument,
                     {"not a finite non-negative time"});
  test::expect_error([] { summarize({-1.0}); }, ErrorKind::invalid_argument,
                     {"not a finite non-negative time"});
  test::expect_error([] { summarize({INFINITY}); }, ErrorKind::invalid_argument,
                     {"not a finite non-negative time"});
}

}  // namespace
}  // namespace braid::bench
