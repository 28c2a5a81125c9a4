#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "braid/error.h"

namespace braid::engine {

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    throw Error(ErrorKind::invalid_argument,
                "sampling: temperature must be >= 0, got " + std::to_string(p.temperature));
  if (p.top_k < 0)
    throw Error(ErrorKind::invalid_argument, "sampling: top_k must be >= 0, got " + std::to_string(p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    throw Error(ErrorKind::invalid_argument,
                "sampling: top_p must be in (0, 1], got " + std::to_string(p.top_p));
}

Sampler::Sampler(const SamplingParams& p) : params_(p), rng_(p.seed) { validate(p); }

int32_t Sampler::next(std::span<const float> logits) {
  const int32_t V = static_cast<int32_t>(logits.size());
  if (params_.temperature == 0.0f) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; ++i)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  // Candidates by descending logit (ties: lower id first), cut to top_k.
  candidates_.clear();
  for (int32_t i = 0; i < V; ++i) candidates_.emplace_back(logits[i], i);
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  const size_t k = params_.top_k > 0 ? std::min<size_t>(params_.top_k, V) : V;
  std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(), by_logit);
  candidates_.resize(k);
  // Softmax at the temperature, in double.
  std::vector<double> p(k);
  const double top = candidates_[0].first;
  double sum = 0;
  for (size_t i = 0; i < k; ++i) {
    p[i] = std::exp((candidates_[i].first - top) / params_.temperature);
    sum += p[i];
  }
  // Nucleus: keep the shortest prefix whose mass reaches top_p.
  size_t keep = k;
  if (params_.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < k; ++i) {
      mass += p[i] / sum;
      if (mass >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += p[i];
  double u = std::uniform_real_distribution<double>(0.0, kept)(rng_);
  for (size_t i = 0; i < keep; ++i) {
    if (u < p[i]) return candidates_[i].second;
    u -= p[i];
  }
  return candidates_[keep - 1].second;
}

}  // namespace braid::engine
