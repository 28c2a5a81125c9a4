// Generation: prefill the prompt, then sample and decode until n tokens or an end token.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"

namespace braid::engine {

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (the end token included if one was produced)
  int prompt_tokens = 0;
  double prefill_ms = 0;        // prompt in, first logits back
  double decode_ms = 0;         // every later step, summed
  int decode_steps = 0;
  bool stopped_at_eos = false;
  // Fewer than max_new_tokens were made because the prompt and they outgrow the context.
  bool stopped_at_context = false;
};

// Resets the engine, then generates up to max_new_tokens after `prompt`, calling on_token for
// each new id as soon as it is chosen. Stops early at any of eos_ids. A prompt that does not fit
// the context (with room for one new token) is an error naming both lengths.
GenerationResult generate(Engine& engine, const std::vector<int32_t>& prompt, int max_new_tokens,
                          const SamplingParams& sampling, const std::vector<int32_t>& eos_ids,
                          const std::function<void(int32_t)>& on_token = {});

// What `generate` prints on stderr when r.stopped_at_context (how many tokens were made of how
// many asked, and why); "" otherwise. An early stop must not pass for a finished one.
std::string context_stop_note(const GenerationResult& r, int max_new_tokens, int context);

}  // namespace braid::engine
