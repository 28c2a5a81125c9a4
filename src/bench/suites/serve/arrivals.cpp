#include "bench/suites/serve/arrivals.h"

#include <cmath>
#include <random>

#include <fmt/core.h>

#include "braid/error.h"

namespace braid::bench::serve {

namespace {

// Uniform in [0, 1) from the top 53 bits: the same on every standard library, unlike
// std::uniform_real_distribution, so a seed names the same schedule everywhere.
double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace

std::vector<double> arrival_times(int n, double rate, double burstiness, uint64_t seed) {
  if (n < 0)
    throw Error(ErrorKind::invalid_argument,
                fmt::format("serve arrivals: expected a request count >= 0, got {}", n));
  if (!(rate > 0))
    throw Error(ErrorKind::invalid_argument,
                fmt::format("serve arrivals: expected a request rate > 0 (or inf), got {}", rate));
  if (!(burstiness > 0) || std::isinf(burstiness))
    throw Error(ErrorKind::invalid_argument,
                fmt::format("serve arrivals: expected a burstiness > 0, got {}", burstiness));
  std::vector<double> t(static_cast<size_t>(n), 0.0);
  if (std::isinf(rate)) return t;
  std::mt19937_64 rng(seed);
  // Gamma(shape k, scale 1 / (rate k)) has mean 1 / rate for every k.
  std::gamma_distribution<double> gamma(burstiness, 1.0 / (rate * burstiness));
  for (int i = 1; i < n; ++i) {
    const double gap = burstiness == 1.0 ? -std::log1p(-uniform01(rng)) / rate : gamma(rng);
    t[static_cast<size_t>(i)] = t[static_cast<size_t>(i - 1)] + gap;
  }
  return t;
}

}  // namespace braid::bench::serve
