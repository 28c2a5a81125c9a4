#include "server/openai_response.h"

namespace braid::server {

using json = nlohmann::json;

ResponseBuilder::ResponseBuilder(const ApiJob& job, std::string id, std::string model,
                                 const tokenizer::Tokenizer* tokenizer, int64_t created)
    : job_(job),
      id_(std::move(id)),
      model_(std::move(model)),
      tokenizer_(tokenizer),
      created_(created),
      choices_(job.requests.size() * static_cast<size_t>(job.n)),
      prompt_tokens_(job.requests.size(), 0),
      cached_tokens_(job.requests.size(), 0),
      output_tokens_(choices_.size(), 0) {
  for (size_t p = 0; p < job.requests.size(); ++p)
    prompt_tokens_[p] = static_cast<int>(job.requests[p].prompt.size());
}

std::string ResponseBuilder::token_text(int32_t id) const {
  if (job_.tokens_as_ids || !tokenizer_) return "token_id:" + std::to_string(id);
  return tokenizer_->decode({id}, false);
}

json ResponseBuilder::chunk(json choice) const {
  return {{"id", id_},
          {"object", job_.kind == ApiKind::chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", json::array({std::move(choice)})}};
}

json ResponseBuilder::logprobs_json(Choice& c, const std::vector<engine::TokenLogprob>& lps) const {
  if (job_.kind == ApiKind::chat) {
    auto entry = [&](int32_t id, float lp) {
      const std::string bytes = tokenizer_ ? tokenizer_->token_bytes(id) : std::string();
      json b = json::array();
      for (unsigned char ch : bytes) b.push_back(static_cast<int>(ch));
      return json{{"token", token_text(id)}, {"logprob", lp}, {"bytes", b}};
    };
    json content = json::array();
    for (const engine::TokenLogprob& lp : lps) {
      json e = entry(lp.token, lp.logprob);
      json top = json::array();
      for (const auto& [id, v] : lp.top) top.push_back(entry(id, v));
      e["top_logprobs"] = top;
      content.push_back(std::move(e));
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const engine::TokenLogprob& lp : lps) {
    const std::string t = token_text(lp.token);
    tokens.push_back(t);
    token_logprobs.push_back(lp.logprob);
    json alternatives = json::object();
    for (const auto& [id, v] : lp.top) alternatives[token_text(id)] = v;
    top.push_back(alternatives);
    offsets.push_back(c.text_offset);
    c.text_offset += static_cast<int>(t.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top},
          {"text_offset", offsets}};
}

std::vector<json> ResponseBuilder::add(size_t prompt_index, const engine::SequenceOutput& o) {
  const size_t index = prompt_index * static_cast<size_t>(job_.n) + static_cast<size_t>(o.index);
  Choice& c = choices_.at(index);
  cached_tokens_[prompt_index] = std::max(cached_tokens_[prompt_index], o.cached_prompt_tokens);
  output_tokens_[index] = o.output_tokens;
  std::vector<json> out;
  // A chat stream opens each choice with its role, once it has its first token (so that a
  // client timing the first chunk times the first token).
  if (!c.started && job_.stream && job_.kind == ApiKind::chat)
    out.push_back(chunk({{"index", index},
                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                         {"logprobs", nullptr},
                         {"finish_reason", nullptr}}));
  std::string delta;
  if (!c.started && job_.echo) {
    delta = job_.prompt_texts.at(prompt_index);
    c.text_offset = static_cast<int>(delta.size());
  }
  c.started = true;
  delta += o.text;
  c.text += delta;
  c.token_ids.insert(c.token_ids.end(), o.tokens.begin(), o.tokens.end());
  const bool with_logprobs = job_.logprobs >= 0 && !o.logprobs.empty();
  json lp = with_logprobs ? logprobs_json(c, o.logprobs) : json(nullptr);
  if (with_logprobs && !job_.stream) {
    // The whole response merges each output's logprobs into one per choice.
    c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
  }
  json finish = nullptr, stop_reason = nullptr;
  if (o.finished()) {
    c.finish = engine::finish_reason_name(o.finish);
    c.stop_reason = o.stop_reason;
    finish = c.finish;
    if (!o.stop_reason.empty()) stop_reason = o.stop_reason;
  }
  if (!job_.stream) return {};
  // A token whose text is still held back (part of a UTF-8 character or of a possible stop string)
  // still gets its chunk: clients time tokens by chunks.
  if (delta.empty() && o.tokens.empty() && !o.finished()) return out;
  json choice;
  if (job_.kind == ApiKind::chat) {
    choice = {{"index", index},
              {"delta", delta.empty() && o.finished() ? json::object() : json{{"content", delta}}},
              {"logprobs", lp},
              {"finish_reason", finish}};
  } else {
    choice = {{"index", index}, {"text", delta}, {"logprobs", lp}, {"finish_reason", finish}};
  }
  if (o.finished()) choice["stop_reason"] = stop_reason;
  if (job_.return_token_ids) choice["token_ids"] = o.tokens;
  out.push_back(chunk(std::move(choice)));
  return out;
}

json ResponseBuilder::usage() const {
  int prompt = 0, cached = 0, completion = 0;
  for (int p : prompt_tokens_) prompt += p;
  for (int c : cached_tokens_) cached += c;
  for (int o : output_tokens_) completion += o;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

json ResponseBuilder::usage_chunk() const {
  return {{"id", id_},
          {"object", job_.kind == ApiKind::chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", json::array()},
          {"usage", usage()}};
}

json ResponseBuilder::final_response() const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice c = choices_[i];  // a copy: logprobs_json advances text offsets
    if (job_.echo) c.text_offset = static_cast<int>(job_.prompt_texts.at(i / job_.n).size());
    const json lp = job_.logprobs >= 0 ? logprobs_json(c, c.logprobs) : json(nullptr);
    const json stop_reason = c.stop_reason.empty() ? json(nullptr) : json(c.stop_reason);
    if (job_.kind == ApiKind::chat)
      choices.push_back({{"index", i},
                         {"message", {{"role", "assistant"}, {"content", c.text}}},
                         {"logprobs", lp},
                         {"finish_reason", c.finish},
                         {"stop_reason", stop_reason}});
    else
      choices.push_back({{"index", i},
                         {"text", c.text},
                         {"logprobs", lp},
                         {"finish_reason", c.finish},
                         {"stop_reason", stop_reason}});
    if (job_.return_token_ids) choices.back()["token_ids"] = c.token_ids;
  }
  return {{"id", id_},
          {"object", job_.kind == ApiKind::chat ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", choices},
          {"usage", usage()}};
}

}  // namespace braid::server
