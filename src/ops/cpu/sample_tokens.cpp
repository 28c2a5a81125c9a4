// Reference sample_tokens: the contract of ops.h written out row by row, with the arithmetic of
// sample_tokens_math.h (the CUDA kernel's own bits: the same probabilities, integer weights whose
// sums are exact, the same 128-bit products), so the two agree token for token.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/sample_tokens_math.h"

namespace braid::cpu {

namespace {

using sampling::RowParams;

int32_t sample_row(const float* l, int32_t vocab, const RowParams& p) {
  // The lowest index of the maximum, NaN read as -inf.
  int32_t greedy = 0;
  float m = sampling::canonical(l[0]);
  for (int32_t i = 1; i < vocab; ++i)
    if (sampling::canonical(l[i]) > m) {
      m = sampling::canonical(l[i]);
      greedy = i;
    }
  if (!p.sample || !(m > -INFINITY && m < INFINITY)) return greedy;

  // top-k: the top_k-th largest logit; everything equal to it stays.
  float kth = -INFINITY;
  if (p.top_k > 0) {
    std::vector<float> sorted(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i) sorted[static_cast<size_t>(i)] = sampling::canonical(l[i]);
    std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(),
                     std::greater<float>());
    kth = sorted[static_cast<size_t>(p.top_k - 1)];
  }

  // Weights of the kept tokens (0 for the others), and their probabilities.
  std::vector<uint64_t> w(static_cast<size_t>(vocab), 0);
  std::vector<float> prob(static_cast<size_t>(vocab), 0.0f);
  uint64_t total = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    const float li = sampling::canonical(l[i]);
    if (li < kth) continue;
    const float pi = sampling::relative_prob(li, m, p.c);
    if (!(pi >= p.min_p)) continue;
    prob[static_cast<size_t>(i)] = pi;
    w[static_cast<size_t>(i)] = sampling::weight_of(pi);
    total += w[static_cast<size_t>(i)];
  }

  // top-p: walk the kept probabilities from the largest, a group of equal values at a time, until
  // the mass reaches the target; that group's value is the threshold t.
  if (p.top_p < 1.0f) {
    const uint64_t target = sampling::top_p_target(p.top_p, total);
    std::vector<std::pair<float, uint64_t>> kept;
    for (int32_t i = 0; i < vocab; ++i)
      if (w[static_cast<size_t>(i)] > 0)
        kept.emplace_back(prob[static_cast<size_t>(i)], w[static_cast<size_t>(i)]);
    std::sort(kept.begin(), kept.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    float t = 0.0f;
    uint64_t mass = 0;
    for (size_t j = 0; j < kept.size();) {
      const float value = kept[j].first;
      for (; j < kept.size() && kept[j].first == value; ++j) mass += kept[j].second;
      if (mass >= target) {
        t = value;
        break;
      }
    }
    for (int32_t i = 0; i < vocab; ++i)
      if (prob[static_cast<size_t>(i)] < t) w[static_cast<size_t>(i)] = 0;
    total = mass;
  }

  // The draw: the first index whose running weight passes u.
  const uint64_t u = sampling::draw_point(p.seed, p.step, total);
  uint64_t run = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    run += w[static_cast<size_t>(i)];
    if (run > u) return i;
  }
  return greedy;  // not reached: u < total
}

}  // namespace

void sample_tokens(const Tensor& logits, const Tensor& temperature, const Tensor& top_k,
                   const Tensor& top_p, const Tensor& min_p, const Tensor& seeds,
                   const Tensor& steps, const Tensor& tokens) {
  const int64_t rows = logits.size(0);
  const auto vocab = static_cast<int32_t>(logits.size(1));
  for (int64_t r = 0; r < rows; ++r) {
    const RowParams p = sampling::row_params(
        temperature.ptr<float>()[r], top_k.ptr<int32_t>()[r], top_p.ptr<float>()[r],
        min_p.ptr<float>()[r], seeds.ptr<int64_t>()[r], steps.ptr<int64_t>()[r], vocab);
    const float* l = logits.ptr<float>() + r * logits.row_stride();
    tokens.ptr<int32_t>()[r] = sample_row(l, vocab, p);
  }
}

}  // namespace braid::cpu
