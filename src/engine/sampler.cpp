#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>

#include "braid/error.h"
#include "braid/ops.h"

namespace braid::engine {

namespace {

void check(bool ok, const char* field, const std::string& expected, double got) {
  if (!ok)
    throw Error(ErrorKind::invalid_argument, std::string("sampling: ") + field + " must be " +
                                                 expected + ", got " + std::to_string(got));
}

// Lowest index of the largest value; NaN never wins (a row of NaN gives 0).
int32_t argmax(std::span<const float> x) {
  int32_t best = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(x.size()); ++i)
    if (!std::isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
  return best < 0 ? 0 : best;
}

// One row through ops::sample_tokens on the CPU: the same choice the GPU makes for it.
int32_t draw(std::span<const float> l, const SamplingParams& p, uint64_t step) {
  const int64_t V = static_cast<int64_t>(l.size());
  float temperature = p.temperature, top_p = p.top_p, min_p = p.min_p;
  int32_t top_k = p.top_k, token = 0;
  int64_t seed = static_cast<int64_t>(p.seed), steps = static_cast<int64_t>(step);
  const Device cpu = Device::cpu();
  ops::sample_tokens(Tensor(const_cast<float*>(l.data()), DType::f32, cpu, {1, V}),
                     Tensor(&temperature, DType::f32, cpu, {1}), Tensor(&top_k, DType::i32, cpu, {1}),
                     Tensor(&top_p, DType::f32, cpu, {1}), Tensor(&min_p, DType::f32, cpu, {1}),
                     Tensor(&seed, DType::i64, cpu, {1}), Tensor(&steps, DType::i64, cpu, {1}),
                     Tensor{}, Tensor(&token, DType::i32, cpu, {1}));
  return token;
}

void apply_penalties(std::vector<float>& l, const SamplingParams& p, const TokenHistory& h) {
  const int32_t V = static_cast<int32_t>(l.size());
  auto in_vocab = [V](int32_t t) { return t >= 0 && t < V; };
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(l.size(), false);
    for (int32_t t : h.prompt)
      if (in_vocab(t)) seen[t] = true;
    for (int32_t t : h.output)
      if (in_vocab(t)) seen[t] = true;
    for (int32_t t = 0; t < V; ++t)
      if (seen[t]) l[t] = l[t] > 0 ? l[t] / p.repetition_penalty : l[t] * p.repetition_penalty;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : h.output)
      if (in_vocab(t)) ++counts[t];
    for (const auto& [t, c] : counts)
      l[t] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
  }
}

void fill_logprobs(std::span<const float> logits, int k, int32_t chosen, TokenLogprob* out) {
  const int32_t V = static_cast<int32_t>(logits.size());
  float top = -std::numeric_limits<float>::infinity();
  for (float x : logits) top = std::max(top, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - top);
  const double log_z = top + std::log(sum);
  auto lp = [&](int32_t t) { return static_cast<float>(logits[t] - log_z); };
  out->token = chosen;
  out->logprob = lp(chosen);
  out->top.clear();
  const int32_t kk = std::min(k, V);
  if (kk == 0) return;
  std::vector<int32_t> ids(static_cast<size_t>(V));
  for (int32_t i = 0; i < V; ++i) ids[i] = i;
  std::partial_sort(ids.begin(), ids.begin() + kk, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int32_t i = 0; i < kk; ++i) out->top.emplace_back(ids[i], lp(ids[i]));
}

}  // namespace

void validate(const SamplingParams& p) {
  check(p.temperature >= 0.0f && std::isfinite(p.temperature), "temperature", ">= 0", p.temperature);
  check(p.top_k >= -1, "top_k", ">= -1 (0 or -1: no limit)", p.top_k);
  check(p.top_p > 0.0f && p.top_p <= 1.0f, "top_p", "in (0, 1]", p.top_p);
  check(p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p", "in [0, 1]", p.min_p);
  check(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f, "presence_penalty",
        "in [-2, 2]", p.presence_penalty);
  check(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f, "frequency_penalty",
        "in [-2, 2]", p.frequency_penalty);
  check(p.repetition_penalty > 0.0f && p.repetition_penalty <= 2.0f, "repetition_penalty",
        "in (0, 2]", p.repetition_penalty);
  check(p.logprobs >= -1 && p.logprobs <= 20, "logprobs", "in [0, 20] (or -1: none)", p.logprobs);
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, uint64_t step,
                     const TokenHistory& history, std::span<const int32_t> banned,
                     TokenLogprob* logprobs) {
  const int32_t V = static_cast<int32_t>(logits.size());
  if (V == 0) throw Error(ErrorKind::invalid_argument, "sampling: empty logits");
  std::span<const float> l = logits;
  std::vector<float> work;
  if (p.has_penalties() || !banned.empty()) {
    work.assign(logits.begin(), logits.end());
    apply_penalties(work, p, history);
    for (int32_t t : banned)
      if (t >= 0 && t < V) work[t] = -std::numeric_limits<float>::infinity();
    l = work;
  }

  const int32_t chosen = p.greedy() ? argmax(l) : draw(l, p, step);
  if (logprobs && p.logprobs >= 0) fill_logprobs(logits, p.logprobs, chosen, logprobs);
  return chosen;
}

Sampler::Sampler(const SamplingParams& p) : params_(p) { validate(p); }

int32_t Sampler::next(std::span<const float> logits) { return sample_token(logits, params_, step_++); }

}  // namespace braid::engine
