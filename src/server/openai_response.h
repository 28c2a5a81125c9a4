// Engine outputs into OpenAI response bodies: whole (`text_completion`, `chat.completion`) or as
// stream chunks (`text_completion` / `chat.completion.chunk` events), with usage and logprobs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace braid::server {

class ResponseBuilder {
 public:
  ResponseBuilder(const ApiJob& job, std::string id, std::string model,
                  const tokenizer::Tokenizer* tokenizer, int64_t created_unix_s);

  // Records one engine output of prompt `prompt_index`; returns the chunks to stream for it.
  std::vector<nlohmann::json> add(size_t prompt_index, const engine::SequenceOutput& output);
  nlohmann::json final_response() const;  // the whole body, once every choice finished
  nlohmann::json usage_chunk() const;     // the last chunk with include_usage: no choices
  nlohmann::json usage() const;
  const std::string& id() const { return id_; }

 private:
  struct Choice {
    std::string text;
    std::vector<engine::TokenLogprob> logprobs;
    std::vector<int32_t> token_ids;
    std::string finish, stop_reason;
    int text_offset = 0;  // completions logprobs: where the next token's text starts
    bool started = false;
  };
  nlohmann::json chunk(nlohmann::json choice) const;
  nlohmann::json logprobs_json(Choice& c, const std::vector<engine::TokenLogprob>& lps) const;
  std::string token_text(int32_t id) const;

  ApiJob job_;
  std::string id_, model_;
  const tokenizer::Tokenizer* tokenizer_;
  int64_t created_;
  std::vector<Choice> choices_;          // prompt_index * n + index
  std::vector<int> prompt_tokens_;       // per prompt
  std::vector<int> cached_tokens_;
  std::vector<int> output_tokens_;       // per choice
};

}  // namespace braid::server
