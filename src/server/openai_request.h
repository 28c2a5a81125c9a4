// OpenAI request bodies (/v1/completions, /v1/chat/completions) into engine requests. Every field
// is type- and range-checked; a bad one is an ApiError (400) that names it.
//
// Request bodies are ordered_json: a chat template's tojson must print tools and arguments in the
// client's key order, as transformers does.
//
// Besides OpenAI's fields these take vLLM's extensions that users of such servers rely on:
// top_k, min_p, repetition_penalty, min_tokens, ignore_eos, stop_token_ids, skip_special_tokens,
// include_stop_str_in_output, add_special_tokens, chat_template_kwargs, add_generation_prompt.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "tokenizer/tokenizer.h"

namespace braid::server {

// What parsing needs from the server.
struct ApiContext {
  // Renders a chat (messages, tools or null, the template's extra variables) into the prompt
  // text. Throws braid::Error for a template error (a raise_exception, say).
  using Renderer = std::function<std::string(const nlohmann::ordered_json& messages,
                                             const nlohmann::ordered_json& tools,
                                             const nlohmann::ordered_json& kwargs,
                                             bool add_generation_prompt)>;
  const tokenizer::Tokenizer* tokenizer = nullptr;  // null: prompts must be token ids
  Renderer render_chat;                             // empty: the model has no chat template
  int max_model_len = 0;
  int vocab_size = 0;
  std::vector<std::string> model_names;  // accepted "model" values; the first is reported
};

enum class ApiKind { completion, chat };

// One client request: one engine request per prompt (a completions request may batch several).
struct ApiJob {
  ApiKind kind = ApiKind::completion;
  std::vector<engine::Request> requests;  // ids are left for the server to fill
  std::vector<std::string> prompt_texts;  // the prompts as text, for echo
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt before the text
  // vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:<id>" (exact, where the
  // text of a token can be ambiguous or a partial character).
  bool tokens_as_ids = false;
  // vLLM's return_token_ids: each choice (and stream chunk) carries its generated token ids.
  bool return_token_ids = false;
  // Completions: alternatives per token (-1: no logprobs). Chat: top_logprobs when chat_logprobs.
  int logprobs = -1;
  bool chat_logprobs = false;
};

ApiJob parse_completion_request(const nlohmann::ordered_json& body, const ApiContext& context);
ApiJob parse_chat_request(const nlohmann::ordered_json& body, const ApiContext& context);

// Checks "model" (absent is fine) against the served names: 404 for another model.
void check_model(const nlohmann::ordered_json& body, const ApiContext& context);

}  // namespace braid::server
