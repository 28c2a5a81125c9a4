#include "bench/suites/serve/distribution.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include <fmt/core.h>

#include "braid/error.h"

namespace braid::bench::serve {

namespace {

void check_percentile(double p) {
  if (!(p >= 0.0 && p <= 100.0))
    throw Error(ErrorKind::invalid_argument,
                fmt::format("serve stats: percentile: expected a value in [0, 100], got {}", p));
}

}  // namespace

double percentile_of_sorted(const std::vector<double>& sorted, double p) {
  check_percentile(p);
  if (sorted.empty())
    throw Error(ErrorKind::invalid_argument, "serve stats: percentile of no samples");
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  // NumPy's _lerp: from the nearer end, so t = 1 gives b exactly and the result is monotonic.
  const double a = sorted[lo], b = sorted[hi], diff = b - a;
  return frac >= 0.5 ? b - diff * (1.0 - frac) : a + diff * frac;
}

Distribution describe(std::vector<double> samples, const std::vector<double>& percentiles) {
  for (double p : percentiles) check_percentile(p);
  Distribution d;
  d.percentiles.assign(percentiles.size(), 0.0);
  if (samples.empty()) return d;
  for (double s : samples)
    if (std::isnan(s))
      throw Error(ErrorKind::invalid_argument, "serve stats: a latency sample is NaN");
  std::sort(samples.begin(), samples.end());
  const double n = static_cast<double>(samples.size());
  d.count = static_cast<int>(samples.size());
  d.min = samples.front();
  d.max = samples.back();
  d.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / n;
  double sq = 0;
  for (double s : samples) sq += (s - d.mean) * (s - d.mean);
  d.std = std::sqrt(sq / n);  // ddof = 0, as np.std
  d.median = percentile_of_sorted(samples, 50.0);
  for (size_t i = 0; i < percentiles.size(); ++i)
    d.percentiles[i] = percentile_of_sorted(samples, percentiles[i]);
  return d;
}

}  // namespace braid::bench::serve
