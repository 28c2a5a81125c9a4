// Summary statistics of timing samples (microseconds). CPU-only, so it is unit-tested in CI.
#pragma once

#include <vector>

namespace braid::bench {

struct Stats {
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;
  double mean_us = 0;
  int count = 0;
};

// Median (the mean of the two middle values for an even count), min, max and mean of `samples`.
// Throws braid::Error (invalid_argument) for an empty list or a NaN / negative sample: a timer
// that produced one is broken, and a summary would hide it.
Stats summarize(std::vector<double> samples);

}  // namespace braid::bench
