// Choosing the next token from fp32 logits, per request: penalties, greedy or temperature with
// min-p, top-k and top-p, seeded, and the log-probabilities a client asked for.
//
// The choice itself is ops::sample_tokens (its contract says which tokens are kept and how the
// draw picks one); here it runs on the CPU for one row, after the penalties and bans that op does
// not take. Randomness is counter-based (braid/sampling_random.h): the draw for a sequence's i-th
// generated token depends only on (seed, i), so a seeded request gives the same tokens whatever
// else shares its batch, after a preemption, and on any device.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace braid::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0 (below 1e-5): greedy (argmax, ties to the lowest id)
  int top_k = 0;             // 0 or -1: no limit
  float top_p = 1.0f;        // nucleus: the smallest set of most likely tokens with mass >= top_p
  uint64_t seed = 0;
  float min_p = 0.0f;        // drop tokens less likely than min_p times the most likely one
  // OpenAI's penalties over the generated tokens: logit -= frequency * count + presence * (count > 0).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // CTRL's penalty over prompt and generated tokens: a positive logit is divided by it, a
  // negative one multiplied.
  float repetition_penalty = 1.0f;
  // -1: none; k >= 0: the chosen token's log-probability and the k most likely alternatives, from
  // the model's own distribution (log-softmax of the raw logits, before penalties and temperature).
  int logprobs = -1;

  bool greedy() const { return temperature < 1e-5f; }
  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
};

// Checks the parameters (temperature >= 0, top_k >= -1, 0 < top_p <= 1, 0 <= min_p <= 1,
// penalties in [-2, 2] and repetition_penalty in (0, 2], logprobs in [-1, 20]); throws
// braid::Error (invalid_argument) naming the field.
void validate(const SamplingParams& params);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the most likely tokens, most likely first
};

// What a sequence has seen so far, for the penalties.
struct TokenHistory {
  std::span<const int32_t> prompt;
  std::span<const int32_t> output;
};

// The token for output position `step` of a sequence. `banned` tokens are never chosen (stop and
// end-of-text tokens before min_tokens). With params.logprobs >= 0, *logprobs is filled.
int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t step,
                     const TokenHistory& history = {}, std::span<const int32_t> banned = {},
                     TokenLogprob* logprobs = nullptr);

// One sequence's sampler for `generate`: sample_token with the step counted for it.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int32_t next(std::span<const float> logits);

 private:
  SamplingParams params_;
  uint64_t step_ = 0;
};

}  // namespace braid::engine
