// braid_llm_generate's requests JSON -> the serving engine's requests (vLLM's prompt and
// SamplingParams fields, with vLLM's defaults).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "tokenizer/tokenizer.h"

namespace braid::capi::llm {

struct ParsedRequest {
  engine::Request request;                 // everything but the id
  std::optional<std::string> prompt_text;  // the text, for a text prompt
};

// Parses and checks every request (types, ranges, prompt length against max_model_len), so that
// nothing runs unless all are good. `tokenizer` may be null (then only token-id prompts work).
// Throws braid::Error (invalid_argument) naming "requests[i].key".
std::vector<ParsedRequest> parse_requests(const char* requests_json,
                                          const tokenizer::Tokenizer* tokenizer,
                                          int max_model_len);

}  // namespace braid::capi::llm
