// What a client asks the serving engine for, and what it gets back step by step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/sequence.h"

namespace braid::engine {

struct Request {
  std::string id;  // unique among the engine's live requests
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  bool seeded = false;  // sampling.seed was given; otherwise the engine draws one
  StopCriteria stop;
  int n = 1;            // independent completions of the same prompt (sharing its cached pages)
  bool skip_special_tokens = true;
};

// New output of one sequence (choice `index` of request `request_id`) since its last output.
struct SequenceOutput {
  std::string request_id;
  int index = 0;
  std::vector<int32_t> tokens;           // new token ids (a stop or end-of-text token included)
  std::string text;                      // new text (stop strings and what follows them held back)
  std::vector<TokenLogprob> logprobs;    // per new token, when asked for
  FinishReason finish = FinishReason::none;
  std::string stop_reason;               // the stop string or token id that ended it
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;          // prompt tokens the prefix cache held
  int output_tokens = 0;                 // generated so far, in all
  bool finished() const { return finish != FinishReason::none; }
};

}  // namespace braid::engine
