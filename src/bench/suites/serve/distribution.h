// Summaries of latency samples as `vllm bench serve` reports them: mean, median, standard
// deviation and percentiles with NumPy's defaults (np.percentile's linear interpolation, np.std's
// population deviation), so the figures can be set beside vLLM's. CPU-only, unit-tested in CI.
#pragma once

#include <vector>

namespace braid::bench::serve {

struct Distribution {
  int count = 0;  // 0: no samples (all requests failed, or one-token outputs have no TPOT)
  double mean = 0, median = 0, std = 0, min = 0, max = 0;
  std::vector<double> percentiles;  // the values at describe()'s `percentiles`, in that order
};

// The p-th percentile (0 <= p <= 100) of ascending `sorted`, interpolated linearly between the
// two nearest ranks (NumPy's method="linear": rank p/100 * (n-1)). Throws braid::Error
// (invalid_argument) for an empty list or p outside [0, 100].
double percentile_of_sorted(const std::vector<double>& sorted, double p);

// Summary of `samples` with the values at each of `percentiles`. Empty samples give count 0 and
// zeros. Throws braid::Error (invalid_argument) for a NaN sample or a percentile outside
// [0, 100].
Distribution describe(std::vector<double> samples, const std::vector<double>& percentiles);

}  // namespace braid::bench::serve
