#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "braid/error.h"

namespace braid::engine {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GenerationResult generate(Engine& engine, const std::vector<int32_t>& prompt, int max_new_tokens,
                          const SamplingParams& sampling, const std::vector<int32_t>& eos_ids,
                          const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) throw Error(ErrorKind::invalid_argument, "generate: the prompt is empty");
  if (max_new_tokens < 0)
    throw Error(ErrorKind::invalid_argument, "generate: the number of new tokens must be >= 0");
  if (static_cast<int>(prompt.size()) >= engine.context())
    throw Error(ErrorKind::invalid_argument,
                "generate: the prompt has " + std::to_string(prompt.size()) +
                    " tokens but the context holds " + std::to_string(engine.context()) +
                    " (room is needed for at least one new token)");
  Sampler sampler(sampling);
  GenerationResult r;
  r.prompt_tokens = static_cast<int>(prompt.size());
  engine.reset();
  // The context bounds how many tokens can follow the prompt.
  const int budget = std::min(max_new_tokens, engine.context() - r.prompt_tokens);
  if (budget == 0) return r;

  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits = engine.step(prompt);
  r.prefill_ms = ms_since(t0);
  // Greedy decoding keeps the logits on the device (one graph per step on CUDA); sampling brings
  // them to the host sampler.
  const bool greedy = sampling.temperature == 0.0f;
  int32_t next = sampler.next(logits);
  for (int i = 0; i < budget; ++i) {
    r.tokens.push_back(next);
    if (on_token) on_token(next);
    if (std::find(eos_ids.begin(), eos_ids.end(), next) != eos_ids.end()) {
      r.stopped_at_eos = true;
      break;
    }
    if (i + 1 == budget) break;
    t0 = std::chrono::steady_clock::now();
    if (greedy) {
      next = engine.decode_greedy(next);
    } else {
      logits = engine.step({next});
      next = sampler.next(logits);
    }
    r.decode_ms += ms_since(t0);
    ++r.decode_steps;
  }
  r.stopped_at_context = !r.stopped_at_eos && budget < max_new_tokens;
  return r;
}

std::string context_stop_note(const GenerationResult& r, int max_new_tokens, int context) {
  if (!r.stopped_at_context) return "";
  return "generate: stopped after " + std::to_string(r.tokens.size()) + " of " +
         std::to_string(max_new_tokens) + " new tokens: the " + std::to_string(r.prompt_tokens) +
         " prompt tokens and " + std::to_string(max_new_tokens) +
         " new ones do not fit the context of " + std::to_string(context) +
         " tokens (raise --max-context, up to the model's max_position_embeddings)";
}

}  // namespace braid::engine
