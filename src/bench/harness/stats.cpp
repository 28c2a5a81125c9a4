#include "bench/harness/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "braid/error.h"

namespace braid::bench {

Stats summarize(std::vector<double> samples) {
  if (samples.empty())
    throw Error(ErrorKind::invalid_argument, "bench: summarize: no samples to summarize");
  for (double s : samples)
    if (!(s >= 0.0) || std::isinf(s))
      throw Error(ErrorKind::invalid_argument,
                  "bench: summarize: a sample is not a finite non-negative time: " +
                      std::to_string(s));
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  Stats s;
  s.count = static_cast<int>(n);
  s.min_us = samples.front();
  s.max_us = samples.back();
  s.median_us = n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  s.mean_us = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(n);
  return s;
}

}  // namespace braid::bench
