// Choosing the next token from fp32 logits: greedy, or temperature with top-k and top-p, seeded.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace braid::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, ties to the lowest id)
  int top_k = 0;             // 0: no limit
  float top_p = 1.0f;        // nucleus: the smallest set of most likely tokens with mass >= top_p
  uint64_t seed = 0;
};

// Checks the parameters (temperature >= 0, top_k >= 0, 0 < top_p <= 1); throws braid::Error.
void validate(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int32_t next(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace braid::engine
