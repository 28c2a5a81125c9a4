// When each request of a serving benchmark is sent, as `vllm bench serve` schedules them: the
// first at once, then gaps drawn from a gamma distribution with mean 1 / rate. Burstiness 1 (the
// default) is the exponential distribution, i.e. Poisson arrivals; below 1 the arrivals bunch up,
// above 1 they even out. An infinite rate sends every request at time 0.
#pragma once

#include <cstdint>
#include <vector>

namespace braid::bench::serve {

// Offsets in seconds from the start of the benchmark, one per request, non-decreasing, the first
// 0. The same seed gives the same times. Throws braid::Error (invalid_argument) for n < 0, a rate
// that is not positive (infinity is allowed) or a burstiness that is not positive and finite.
std::vector<double> arrival_times(int n, double rate, double burstiness, uint64_t seed);

}  // namespace braid::bench::serve
