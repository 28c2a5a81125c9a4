#include "capi/llm_requests.h"

#include <algorithm>
#include <climits>

#include "braid/error.h"
#include "capi/llm_json.h"

namespace braid::capi::llm {

namespace {

constexpr const char* kCall = "braid_llm_generate";
constexpr int kDefaultMaxTokens = 16;  // vLLM's SamplingParams default

std::vector<int32_t> prompt_of(const Where& w, const json& r, const tokenizer::Tokenizer* tok,
                               std::optional<std::string>& text) {
  const json* p = field(r, "prompt");
  const json* ids = field(r, "prompt_token_ids");
  if (p && ids) bad(w, w.object + " has both 'prompt' and 'prompt_token_ids'; give one");
  if (ids) return token_ids(w, *ids, "prompt_token_ids");
  if (!p) bad(w, w.object + " needs 'prompt' (text) or 'prompt_token_ids' (a list of token ids)");
  if (!p->is_string())
    bad(w, w.key("prompt") + " must be a string (token ids go in 'prompt_token_ids'), got " +
               shown(*p));
  if (!tok)
    bad(w, w.key("prompt") + ": the model folder has no tokenizer.json; pass prompt_token_ids");
  text = p->get<std::string>();
  try {
    return tok->encode(*text, boolean(w, r, "add_special_tokens", true));
  } catch (const Error& e) {
    bad(w, w.key("prompt") + ": " + e.what());
  }
}

std::vector<std::string> stop_strings(const Where& w, const json& r) {
  const json* v = field(r, "stop");
  if (!v) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const json& s : *v) {
      if (!s.is_string()) bad(w, w.key("stop") + " must be a string or a list of strings, got " + shown(*v));
      out.push_back(s.get<std::string>());
    }
  } else {
    bad(w, w.key("stop") + " must be a string or a list of strings, got " + shown(*v));
  }
  // An empty stop string would end every sequence before its first token.
  out.erase(std::remove(out.begin(), out.end(), std::string()), out.end());
  return out;
}

ParsedRequest parse_one(const Where& w, const json& r, const tokenizer::Tokenizer* tok,
                        int max_model_len) {
  if (!r.is_object()) bad(w, w.object + " must be a JSON object, got " + shown(r));
  reject_unknown_keys(
      w, r,
      {"prompt", "prompt_token_ids", "add_special_tokens", "n", "temperature", "top_p", "top_k",
       "min_p", "seed", "presence_penalty", "frequency_penalty", "repetition_penalty",
       "max_tokens", "min_tokens", "stop", "stop_token_ids", "ignore_eos", "logprobs",
       "skip_special_tokens", "include_stop_str_in_output"});
  ParsedRequest out;
  engine::Request& q = out.request;
  q.prompt = prompt_of(w, r, tok, out.prompt_text);

  engine::SamplingParams& s = q.sampling;
  s.temperature = static_cast<float>(number(w, r, "temperature", 1.0));
  s.top_p = static_cast<float>(number(w, r, "top_p", 1.0));
  s.top_k = static_cast<int>(integer(w, r, "top_k", 0, -1, INT_MAX));
  s.min_p = static_cast<float>(number(w, r, "min_p", 0.0));
  s.presence_penalty = static_cast<float>(number(w, r, "presence_penalty", 0.0));
  s.frequency_penalty = static_cast<float>(number(w, r, "frequency_penalty", 0.0));
  s.repetition_penalty = static_cast<float>(number(w, r, "repetition_penalty", 1.0));
  s.logprobs = static_cast<int>(integer(w, r, "logprobs", -1, 0, 20));
  if (const json* seed = field(r, "seed")) {
    if (!seed->is_number_integer()) bad(w, w.key("seed") + " must be an integer, got " + shown(*seed));
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
    q.seeded = true;
  }
  q.n = static_cast<int>(integer(w, r, "n", 1, 1, 64));

  const int prompt_len = static_cast<int>(q.prompt.size());
  if (prompt_len == 0) bad(w, w.object + ": the prompt is empty");
  if (prompt_len >= max_model_len)
    bad(w, w.object + ": the prompt has " + std::to_string(prompt_len) +
               " tokens, but the context (max_model_len) holds " + std::to_string(max_model_len) +
               ", with room needed for at least one new token");
  engine::StopCriteria& c = q.stop;
  const auto max_tokens = r.find("max_tokens");
  if (max_tokens != r.end() && max_tokens->is_null())
    c.max_tokens = max_model_len - prompt_len;  // vLLM's None: until the context is full
  else
    c.max_tokens = static_cast<int>(integer(w, r, "max_tokens", kDefaultMaxTokens, 1, INT_MAX));
  c.min_tokens = static_cast<int>(integer(w, r, "min_tokens", 0, 0, INT_MAX));
  c.stop = stop_strings(w, r);
  if (!c.stop.empty() && !tok)
    bad(w, w.key("stop") + ": stop strings need a tokenizer, and the model folder has no "
                           "tokenizer.json");
  if (const json* ids = field(r, "stop_token_ids")) c.stop_token_ids = token_ids(w, *ids, "stop_token_ids");
  c.ignore_eos = boolean(w, r, "ignore_eos", false);
  c.include_stop_str_in_output = boolean(w, r, "include_stop_str_in_output", false);
  q.skip_special_tokens = boolean(w, r, "skip_special_tokens", true);
  return out;
}

}  // namespace

std::vector<ParsedRequest> parse_requests(const char* requests_json,
                                          const tokenizer::Tokenizer* tokenizer,
                                          int max_model_len) {
  if (requests_json == nullptr)
    throw Error(ErrorKind::invalid_argument, std::string(kCall) + ": requests_json is NULL");
  const json all = parse(kCall, "requests_json", requests_json, json());
  if (!all.is_array())
    throw Error(ErrorKind::invalid_argument,
                std::string(kCall) + ": requests_json must be a JSON list of request objects, got " +
                    shown(all));
  std::vector<ParsedRequest> out;
  out.reserve(all.size());
  for (size_t i = 0; i < all.size(); ++i)
    out.push_back(parse_one(Where{kCall, "requests[" + std::to_string(i) + "]"}, all[i], tokenizer,
                            max_model_len));
  return out;
}

}  // namespace braid::capi::llm
