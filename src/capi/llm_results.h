// Gathers the serving engine's step-by-step outputs into whole completions, one per choice of
// each request, and writes them as braid_llm_generate's results JSON (vLLM's RequestOutput and
// CompletionOutput fields).
#pragma once

#include <string>
#include <vector>

#include "capi/llm_requests.h"
#include "engine/request.h"
#include "tokenizer/tokenizer.h"

namespace braid::capi::llm {

class Results {
 public:
  explicit Results(const std::vector<ParsedRequest>& requests);
  // Appends what choice o.index of request `request` produced since its last output.
  void add(size_t request, const engine::SequenceOutput& o);
  // Every choice of every request has reported its finish.
  bool complete() const;
  // The results list; `tokenizer` (may be null) decodes the logprobs' alternatives.
  std::string to_json(const tokenizer::Tokenizer* tokenizer) const;

 private:
  struct Choice {
    std::string text;
    std::vector<int32_t> tokens;
    std::vector<engine::TokenLogprob> logprobs;
    engine::FinishReason finish = engine::FinishReason::none;
    std::string stop_reason;
  };
  struct Entry {
    const ParsedRequest* request;
    std::vector<Choice> choices;  // by index
    int cached_prompt_tokens = 0;
  };
  std::vector<Entry> entries_;
};

}  // namespace braid::capi::llm
