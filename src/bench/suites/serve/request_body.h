// The JSON body of one streamed request to an OpenAI-compatible server, as `vllm bench serve`
// sends it: max_tokens fixed per prompt, greedy by default, ignore_eos so every request produces
// exactly its max_tokens (vLLM, SGLang and braidinfer's server honour it; OpenAI's API ignores
// unknown fields), and stream_options.include_usage so the last event carries the token counts.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "bench/suites/serve/random_dataset.h"

namespace braid::bench::serve {

enum class Api { completions, chat };  // /v1/completions, /v1/chat/completions

struct SamplingOptions {
  double temperature = 0.0;
  bool ignore_eos = true;
};

// Chat takes text only: a token_ids prompt sent to chat throws braid::Error (invalid_argument).
nlohmann::json request_body(Api api, const std::string& model, const Prompt& prompt,
                            const SamplingOptions& sampling);

}  // namespace braid::bench::serve
