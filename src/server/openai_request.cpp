#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "braid/error.h"
#include "server/api_error.h"

namespace braid::server {

namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxPrompts = 64;      // prompts in one completions request
constexpr int kMaxStopStrings = 16;
constexpr int kMaxN = 64;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& body, const char* name, double fallback, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number())
    bad(name, std::string("'") + name + "' must be a number, got " + std::string(v->type_name()));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad(name, std::string("'") + name + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() +
                  "], got " + v->dump());
  return x;
}

int64_t integer(const json& body, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer() && !(v->is_number_float() && v->get<double>() == std::floor(v->get<double>())))
    bad(name, std::string("'") + name + "' must be an integer, got " + v->dump());
  const double d = v->get<double>();
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
    bad(name, std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "], got " + v->dump());
  return v->is_number_unsigned() ? static_cast<int64_t>(v->get<uint64_t>()) : v->get<int64_t>();
}

bool boolean(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(name, std::string("'") + name + "' must be true or false, got " + v->dump());
  return v->get<bool>();
}

std::vector<std::string> stop_strings(const json& body) {
  const json* v = field(body, "stop");
  if (!v) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > kMaxStopStrings)
      bad("stop", "'stop' holds at most " + std::to_string(kMaxStopStrings) + " strings");
    for (const json& s : *v) {
      if (!s.is_string()) bad("stop", "'stop' must be a string or a list of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    bad("stop", "'stop' must be a string or a list of strings");
  }
  out.erase(std::remove(out.begin(), out.end(), std::string()), out.end());
  return out;
}

void reject_if_set(const json& body, const char* name, const char* why) {
  const json* v = field(body, name);
  if (!v) return;
  if ((v->is_object() || v->is_array() || v->is_string()) && v->empty()) return;
  bad(name, std::string("'") + name + "' is not supported by this server: " + why);
}

// The fields both endpoints share: sampling, penalties, stops, n, stream.
engine::Request common(const json& body, ApiJob& job, int default_max_tokens) {
  engine::Request r;
  engine::SamplingParams& s = r.sampling;
  s.temperature = static_cast<float>(number(body, "temperature", 1.0, 0.0, 2.0));
  s.top_p = static_cast<float>(number(body, "top_p", 1.0, 0.0, 1.0));
  if (s.top_p <= 0.0f) bad("top_p", "'top_p' must be in (0, 1]");
  s.top_k = static_cast<int>(integer(body, "top_k", 0, -1, 1 << 30));
  s.min_p = static_cast<float>(number(body, "min_p", 0.0, 0.0, 1.0));
  s.presence_penalty = static_cast<float>(number(body, "presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  s.repetition_penalty = static_cast<float>(number(body, "repetition_penalty", 1.0, 1e-3, 2.0));
  if (const json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) bad("seed", "'seed' must be an integer");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
    r.seeded = true;
  }
  job.n = static_cast<int>(integer(body, "n", 1, 1, kMaxN));
  r.n = job.n;
  if (const json* best_of = field(body, "best_of"); best_of && *best_of != json(job.n))
    bad("best_of", "'best_of' other than n is not supported by this server");
  reject_if_set(body, "logit_bias", "no logit biases");
  r.stop.max_tokens = default_max_tokens;
  if (field(body, "max_completion_tokens"))
    r.stop.max_tokens = static_cast<int>(integer(body, "max_completion_tokens", 0, 1, INT32_MAX));
  if (field(body, "max_tokens"))
    r.stop.max_tokens = static_cast<int>(integer(body, "max_tokens", 0, 1, INT32_MAX));
  r.stop.min_tokens = static_cast<int>(integer(body, "min_tokens", 0, 0, INT32_MAX));
  r.stop.stop = stop_strings(body);
  r.stop.ignore_eos = boolean(body, "ignore_eos", false);
  r.stop.include_stop_str_in_output = boolean(body, "include_stop_str_in_output", false);
  if (const json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    for (const json& id : *ids) {
      if (!id.is_number_integer()) bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
      r.stop.stop_token_ids.push_back(static_cast<int32_t>(std::clamp<int64_t>(
          id.get<int64_t>(), INT32_MIN, INT32_MAX)));
    }
  }
  r.skip_special_tokens = boolean(body, "skip_special_tokens", true);
  job.stream = boolean(body, "stream", false);
  job.tokens_as_ids = boolean(body, "return_tokens_as_token_ids", false);
  job.return_token_ids = boolean(body, "return_token_ids", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!job.stream) bad("stream_options", "'stream_options' is only allowed with stream: true");
    job.include_usage = boolean(*so, "include_usage", false);
  }
  return r;
}

// A prompt of token ids, checked against the vocabulary.
std::vector<int32_t> token_prompt(const json& ids, const ApiContext& c, const char* param) {
  std::vector<int32_t> out;
  for (const json& id : ids) {
    if (!id.is_number_integer()) bad(param, std::string("'") + param + "' token ids must be integers");
    const int64_t v = id.get<int64_t>();
    if (v < 0 || v >= c.vocab_size)
      bad(param, "token id " + std::to_string(v) + " is outside the vocabulary [0, " +
                     std::to_string(c.vocab_size) + ")");
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

std::vector<int32_t> encode(const std::string& text, bool add_special, const ApiContext& c,
                            const char* param) {
  if (!c.tokenizer)
    bad(param, "the model folder has no tokenizer.json: send the prompt as token ids");
  try {
    return c.tokenizer->encode(text, add_special);
  } catch (const Error& e) {
    bad(param, e.what());
  }
}

void check_length(const engine::Request& r, const ApiContext& c, const char* param) {
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  if (prompt == 0) bad(param, "the prompt is empty");
  if (prompt >= c.max_model_len)
    bad(param, "the prompt has " + std::to_string(prompt) + " tokens, but the context holds " +
                   std::to_string(c.max_model_len) + " (with room for at least one new token)");
  if (prompt + r.stop.max_tokens > c.max_model_len)
    bad("max_tokens", "the prompt has " + std::to_string(prompt) + " tokens and max_tokens is " +
                          std::to_string(r.stop.max_tokens) + ": " +
                          std::to_string(prompt + r.stop.max_tokens) +
                          " in all, but the context holds " + std::to_string(c.max_model_len));
  if (r.stop.min_tokens > r.stop.max_tokens)
    bad("min_tokens", "'min_tokens' must not exceed max_tokens");
  if (!r.stop.stop.empty() && !c.tokenizer)
    bad("stop", "stop strings need a tokenizer, and the model folder has no tokenizer.json");
  for (int32_t t : r.stop.stop_token_ids)
    if (t < 0 || t >= c.vocab_size)
      bad("stop_token_ids", "stop token id " + std::to_string(t) + " is outside the vocabulary");
}

// Chat content: a string, or a list of text parts joined with newlines (images and other parts
// are not supported).
json flatten_content(const json& content, size_t message_index) {
  if (content.is_string() || content.is_null()) return content;
  const std::string where = "messages[" + std::to_string(message_index) + "].content";
  if (!content.is_array()) bad(where, "'" + where + "' must be a string or a list of content parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad(where, "each part of '" + where + "' must be an object with a 'type'");
    if (part["type"] != "text" || !part.contains("text") || !part["text"].is_string())
      bad(where, "content parts of type '" + part["type"].get<std::string>() +
                     "' are not supported by this server (text only)");
    if (i) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

void check_model(const json& body, const ApiContext& c) {
  const json* m = field(body, "model");
  if (!m) return;
  if (!m->is_string()) bad("model", "'model' must be a string");
  const std::string name = m->get<std::string>();
  if (std::find(c.model_names.begin(), c.model_names.end(), name) == c.model_names.end())
    throw ApiError(404, "The model '" + name + "' does not exist; this server serves '" +
                            (c.model_names.empty() ? std::string() : c.model_names[0]) + "'",
                   "model", "not_found_error");
}

ApiJob parse_completion_request(const json& body, const ApiContext& c) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  check_model(body, c);
  ApiJob job;
  job.kind = ApiKind::completion;
  engine::Request base = common(body, job, /*OpenAI's default*/ 16);
  reject_if_set(body, "suffix", "no insertion (suffix)");
  job.echo = boolean(body, "echo", false);
  job.logprobs = static_cast<int>(integer(body, "logprobs", -1, 0, 20));
  base.sampling.logprobs = job.logprobs;
  const bool add_special = boolean(body, "add_special_tokens", true);

  const json* prompt = field(body, "prompt");
  if (!prompt) bad("prompt", "'prompt' is required");
  std::vector<json> prompts;  // each a string or a list of ids
  if (prompt->is_string()) {
    prompts.push_back(*prompt);
  } else if (prompt->is_array()) {
    if (prompt->empty()) bad("prompt", "'prompt' is empty");
    if ((*prompt)[0].is_number()) {
      prompts.push_back(*prompt);
    } else {
      for (const json& p : *prompt) prompts.push_back(p);
    }
  } else {
    bad("prompt", "'prompt' must be a string, a list of strings, a list of token ids or a list of "
                  "lists of token ids");
  }
  if (prompts.size() > kMaxPrompts)
    bad("prompt", "at most " + std::to_string(kMaxPrompts) + " prompts per request");
  for (const json& p : prompts) {
    engine::Request r = base;
    if (p.is_string()) {
      r.prompt = encode(p.get<std::string>(), add_special, c, "prompt");
      job.prompt_texts.push_back(p.get<std::string>());
    } else if (p.is_array()) {
      r.prompt = token_prompt(p, c, "prompt");
      job.prompt_texts.push_back(c.tokenizer ? c.tokenizer->decode(r.prompt, false) : std::string());
    } else {
      bad("prompt", "each prompt must be a string or a list of token ids");
    }
    check_length(r, c, "prompt");
    job.requests.push_back(std::move(r));
  }
  return job;
}

ApiJob parse_chat_request(const json& body, const ApiContext& c) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  check_model(body, c);
  ApiJob job;
  job.kind = ApiKind::chat;
  engine::Request r = common(body, job, /*until the context ends*/ 0);
  const bool max_given = field(body, "max_tokens") || field(body, "max_completion_tokens");
  job.chat_logprobs = boolean(body, "logprobs", false);
  const int top = static_cast<int>(integer(body, "top_logprobs", 0, 0, 20));
  if (field(body, "top_logprobs") && !job.chat_logprobs)
    bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  job.logprobs = job.chat_logprobs ? top : -1;
  r.sampling.logprobs = job.logprobs;
  if (const json* rf = field(body, "response_format")) {
    if (!rf->is_object() || rf->value("type", "") != "text")
      bad("response_format", "'response_format' other than {\"type\": \"text\"} is not supported");
  }
  if (const json* tc = field(body, "tool_choice")) {
    if (!tc->is_string() || (*tc != "auto" && *tc != "none"))
      bad("tool_choice", "'tool_choice' other than \"auto\" or \"none\" is not supported");
  }

  const json* messages = field(body, "messages");
  if (!messages) bad("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty())
    bad("messages", "'messages' must be a non-empty list of messages");
  json flat = json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(where, "'" + where + "' must be an object");
    if (!m.contains("role") || !m["role"].is_string())
      bad(where + ".role", "'" + where + ".role' must be a string");
    json copy = m;
    if (m.contains("content")) copy["content"] = flatten_content(m["content"], i);
    flat.push_back(std::move(copy));
  }
  if (!c.render_chat)
    bad("messages", "the model has no chat template: use /v1/completions");
  json tools = nullptr;
  if (const json* t = field(body, "tools")) {
    if (!t->is_array()) bad("tools", "'tools' must be a list");
    if (!t->empty() && !(field(body, "tool_choice") && (*field(body, "tool_choice")) == "none"))
      tools = *t;
  }
  json kwargs = json::object();
  if (const json* k = field(body, "chat_template_kwargs")) {
    if (!k->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    kwargs = *k;
  }
  const bool add_generation_prompt = boolean(body, "add_generation_prompt", true);
  std::string text;
  try {
    text = c.render_chat(flat, tools, kwargs, add_generation_prompt);
  } catch (const Error& e) {
    bad("messages", std::string("the chat template failed: ") + e.what());
  }
  // The template writes the special tokens itself.
  r.prompt = encode(text, boolean(body, "add_special_tokens", false), c, "messages");
  if (!max_given)
    r.stop.max_tokens = std::max(1, c.max_model_len - static_cast<int>(r.prompt.size()));
  check_length(r, c, "messages");
  job.prompt_texts.push_back(std::move(text));
  job.requests.push_back(std::move(r));
  return job;
}

}  // namespace braid::server
