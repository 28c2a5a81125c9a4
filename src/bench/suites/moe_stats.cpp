#include "bench/suites/moe_stats.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "braid/error.h"

namespace braid::bench {

MoeLoadStats moe_load_stats(const float* logits, const int32_t* topk_ids, int64_t tokens,
                            int experts, int k) {
  if (tokens < 1 || experts < 1 || k < 1)
    throw Error(ErrorKind::invalid_argument,
                "moe_load_stats: expected tokens, experts and k >= 1, got " +
                    std::to_string(tokens) + ", " + std::to_string(experts) + ", " +
                    std::to_string(k));
  MoeLoadStats s;
  s.tokens = tokens;
  s.experts = experts;
  s.k = k;
  s.counts.assign(static_cast<size_t>(experts), 0);
  s.mean_prob.assign(static_cast<size_t>(experts), 0.0);

  for (int64_t i = 0; i < tokens * k; ++i) {
    const int32_t e = topk_ids[i];
    if (e < 0 || e >= experts)
      ++s.invalid_ids;
    else
      ++s.counts[static_cast<size_t>(e)];
  }

  std::vector<double> p(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits + t * experts;
    const double m = *std::max_element(row, row + experts);
    double sum = 0;
    for (int e = 0; e < experts; ++e) sum += p[e] = std::exp(double(row[e]) - m);
    for (int e = 0; e < experts; ++e) s.mean_prob[e] += p[e] / sum;
  }
  for (double& v : s.mean_prob) v /= double(tokens);

  // f_i over all T * k slots (an invalid id lowers every f_i, as a dropped token would).
  const double slots = double(tokens) * k;
  s.fraction.resize(static_cast<size_t>(experts));
  for (int e = 0; e < experts; ++e) {
    s.fraction[e] = double(s.counts[e]) / slots;
    s.aux_loss += s.fraction[e] * s.mean_prob[e];
  }
  s.aux_loss *= experts;

  const double mean = double(tokens * k - s.invalid_ids) / experts;
  double var = 0;
  for (int64_t c : s.counts) var += (double(c) - mean) * (double(c) - mean);
  var /= experts;
  s.load_cv = mean > 0 ? std::sqrt(var) / mean : 0.0;
  s.min_load = *std::min_element(s.counts.begin(), s.counts.end());
  s.max_load = *std::max_element(s.counts.begin(), s.counts.end());
  s.max_over_mean = mean > 0 ? double(s.max_load) / mean : 0.0;
  s.active_experts = static_cast<int>(
      std::count_if(s.counts.begin(), s.counts.end(), [](int64_t c) { return c > 0; }));
  return s;
}

}  // namespace braid::bench
