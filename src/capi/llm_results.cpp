#include "capi/llm_results.h"

#include <algorithm>

#include "braid/error.h"
#include "capi/llm_json.h"

namespace braid::capi::llm {

namespace {

// vLLM's stop_reason: null for end-of-text or length, the stop string, or the stop token's id.
// The engine reports a stop token as its id in decimal; it checks stop tokens before stop
// strings, so a finish on a token listed in stop_token_ids was that token's doing.
json stop_reason(const engine::Request& r, engine::FinishReason finish, const std::string& reason,
                 const std::vector<int32_t>& tokens) {
  if (finish != engine::FinishReason::stop || reason.empty()) return nullptr;
  const auto& ids = r.stop.stop_token_ids;
  if (!tokens.empty() && reason == std::to_string(tokens.back()) &&
      std::find(ids.begin(), ids.end(), tokens.back()) != ids.end())
    return tokens.back();
  return reason;
}

// One token alone, as vLLM's Logprob.decoded_token (special tokens spelled out); null without a
// tokenizer.
json decoded(const tokenizer::Tokenizer* tok, int32_t id) {
  return tok ? json(tok->decode({id}, false)) : json(nullptr);
}

json logprobs_json(const std::vector<engine::TokenLogprob>& lps, const tokenizer::Tokenizer* tok) {
  json out = json::array();
  for (const engine::TokenLogprob& lp : lps) {
    json top = json::array();
    for (const auto& [id, logprob] : lp.top)
      top.push_back({{"token_id", id}, {"logprob", logprob}, {"decoded_token", decoded(tok, id)}});
    out.push_back({{"token_id", lp.token},
                   {"logprob", lp.logprob},
                   {"decoded_token", decoded(tok, lp.token)},
                   {"top", std::move(top)}});
  }
  return out;
}

}  // namespace

Results::Results(const std::vector<ParsedRequest>& requests) {
  entries_.reserve(requests.size());
  for (const ParsedRequest& r : requests)
    entries_.push_back({&r, std::vector<Choice>(static_cast<size_t>(r.request.n)), 0});
}

void Results::add(size_t request, const engine::SequenceOutput& o) {
  Entry& e = entries_.at(request);
  if (o.index < 0 || o.index >= static_cast<int>(e.choices.size()))
    throw Error(ErrorKind::internal, "braid_llm_generate: the engine reported choice " +
                                         std::to_string(o.index) + " of a request with " +
                                         std::to_string(e.choices.size()));
  Choice& c = e.choices[static_cast<size_t>(o.index)];
  c.text += o.text;
  c.tokens.insert(c.tokens.end(), o.tokens.begin(), o.tokens.end());
  c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
  if (o.finished()) {
    c.finish = o.finish;
    c.stop_reason = o.stop_reason;
  }
  e.cached_prompt_tokens = std::max(e.cached_prompt_tokens, o.cached_prompt_tokens);
}

bool Results::complete() const {
  for (const Entry& e : entries_)
    for (const Choice& c : e.choices)
      if (c.finish == engine::FinishReason::none) return false;
  return true;
}

std::string Results::to_json(const tokenizer::Tokenizer* tok) const {
  json out = json::array();
  for (const Entry& e : entries_) {
    const engine::Request& r = e.request->request;
    const bool with_logprobs = r.sampling.logprobs >= 0;
    json outputs = json::array();
    for (size_t i = 0; i < e.choices.size(); ++i) {
      const Choice& c = e.choices[i];
      json o = {{"index", i}, {"text", c.text}, {"token_ids", c.tokens}};
      if (with_logprobs) {
        double sum = 0;
        for (const engine::TokenLogprob& lp : c.logprobs) sum += lp.logprob;
        o["cumulative_logprob"] = sum;
        o["logprobs"] = logprobs_json(c.logprobs, tok);
      } else {
        o["cumulative_logprob"] = nullptr;
        o["logprobs"] = nullptr;
      }
      o["finish_reason"] = engine::finish_reason_name(c.finish);
      o["stop_reason"] = stop_reason(r, c.finish, c.stop_reason, c.tokens);
      outputs.push_back(std::move(o));
    }
    json entry = {{"prompt", e.request->prompt_text ? json(*e.request->prompt_text) : json(nullptr)},
                  {"prompt_token_ids", r.prompt},
                  {"num_cached_tokens", e.cached_prompt_tokens},
                  {"outputs", std::move(outputs)}};
    out.push_back(std::move(entry));
  }
  return dump(out);
}

}  // namespace braid::capi::llm
