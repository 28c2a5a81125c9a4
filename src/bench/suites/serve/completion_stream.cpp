#include "bench/suites/serve/completion_stream.h"

#include <nlohmann/json.hpp>

#include "braid/error.h"

namespace braid::bench::serve {

namespace {

using json = nlohmann::json;

double ms_between(CompletionStream::Clock::time_point a, CompletionStream::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

bool nonempty_string(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

bool carries_tokens(const json& choice) {
  const auto ids = choice.find("token_ids");
  if (ids != choice.end() && ids->is_array() && !ids->empty()) return true;
  const auto lp = choice.find("logprobs");
  return lp != choice.end() && lp->is_object() && !lp->empty();
}

// Whether the chunk's first choice carries generated text or tokens (see the header).
bool is_content(const json& chunk) {
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return false;
  const json& c = choices->front();
  if (!c.is_object()) return false;
  // Completions: a chunk's text may be empty and still stand for a token (one that ends inside a
  // UTF-8 character, a special token): vLLM's benchmark counts it too.
  if (const auto text = c.find("text"); text != c.end() && text->is_string()) return true;
  const auto delta = c.find("delta");
  if (delta != c.end() && delta->is_object()) {
    if (nonempty_string(*delta, "content") || nonempty_string(*delta, "reasoning_content") ||
        nonempty_string(*delta, "reasoning"))
      return true;
    // Chat: an empty content is a token too, unless the chunk only opens the message (role).
    const auto content = delta->find("content");
    if (content != delta->end() && content->is_string() && !delta->contains("role")) return true;
  }
  return carries_tokens(c);
}

std::optional<int> int_field(const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int>();
}

std::string clip(std::string_view s, size_t n = 300) {
  return s.size() <= n ? std::string(s) : std::string(s.substr(0, n)) + "...";
}

// The message of an OpenAI error payload ({"error": {"message": ...}} or {"error": "..."}).
std::string error_message(const json& err) {
  if (err.is_string()) return err.get<std::string>();
  if (err.is_object()) {
    const auto m = err.find("message");
    if (m != err.end() && m->is_string()) return m->get<std::string>();
  }
  return clip(err.dump());
}

}  // namespace

bool CompletionStream::feed(std::string_view bytes, Clock::time_point now) {
  if (!error_.empty()) return false;
  events_.clear();
  try {
    parser_.feed(bytes, events_);
  } catch (const Error& e) {
    fail(e.what());
  }
  for (const SseEvent& e : events_) {
    if (!error_.empty()) break;
    on_event(e, now);
  }
  return error_.empty();
}

void CompletionStream::finish(Clock::time_point now) {
  if (!error_.empty()) return;
  events_.clear();
  parser_.finish(events_);
  for (const SseEvent& e : events_) {
    if (!error_.empty()) break;
    on_event(e, now);
  }
  if (error_.empty() && !done_) fail("the stream ended without \"data: [DONE]\"");
}

void CompletionStream::fail(std::string why) {
  if (error_.empty()) error_ = std::move(why);
}

void CompletionStream::on_event(const SseEvent& e, Clock::time_point now) {
  if (done_) return;  // nothing after [DONE] belongs to the response
  if (e.data == "[DONE]") {
    done_ = true;
    done_at_ = now;
    return;
  }
  if (e.event == "error") {
    fail("error event: " + clip(e.data));
    return;
  }
  const json chunk = json::parse(e.data, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    fail("an event is not a JSON object: " + clip(e.data));
    return;
  }
  if (const auto err = chunk.find("error"); err != chunk.end() && !err->is_null()) {
    fail("error event: " + error_message(*err));
    return;
  }
  if (is_content(chunk)) {
    ++content_events_;
    if (!first_content_) first_content_ = now;
    else itl_ms_.push_back(ms_between(*last_content_, now));
    last_content_ = now;
  }
  if (const auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
    if (auto n = int_field(*usage, "completion_tokens")) completion_tokens_ = n;
    if (auto n = int_field(*usage, "prompt_tokens")) prompt_tokens_ = n;
  }
}

RequestResult CompletionStream::result(int prompt_len) const {
  RequestResult r;
  r.error = error_;
  if (r.error.empty() && !done_) r.error = "the stream has not ended";
  if (r.error.empty() && content_events_ == 0)
    r.error = "the stream carried no generated text (no content event before [DONE])";
  r.ok = r.error.empty();
  r.itl_ms = itl_ms_;
  if (first_content_) r.ttft_ms = ms_between(sent_, *first_content_);
  if (done_at_) r.e2e_ms = ms_between(sent_, *done_at_);
  r.usage_reported = completion_tokens_.has_value();
  r.output_tokens = completion_tokens_.value_or(content_events_);
  r.input_tokens = prompt_tokens_.value_or(prompt_len);
  return r;
}

}  // namespace braid::bench::serve
