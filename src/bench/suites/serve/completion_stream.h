// The streamed body of one /v1/completions or /v1/chat/completions response, read as it arrives:
// Server-Sent Events of JSON chunks ending with "data: [DONE]". Records when generated text
// arrives and the token counts of the final usage chunk. Transport-free (bytes and arrival times
// in, timings out), so the rules are tested without a socket.
//
// A content event is a chunk whose first choice carries generated text or a token: completions
// "text" (even empty, as vLLM counts it: a token may decode to nothing yet); chat delta "content",
// "reasoning_content" or "reasoning" (an empty content counts unless the chunk opens the message
// with its role); or "token_ids" / "logprobs".
// A chat stream's opening role-only delta and a finish_reason-only chunk carry nothing generated,
// so they neither start TTFT nor add an ITL gap. (vLLM's client counts any chunk with choices;
// the difference only shows with servers that send the role chunk before the first token.)
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/suites/serve/request_result.h"
#include "bench/suites/serve/sse_parser.h"

namespace braid::bench::serve {

class CompletionStream {
 public:
  using Clock = std::chrono::steady_clock;

  explicit CompletionStream(Clock::time_point sent) : sent_(sent) {}

  // Body bytes that arrived at `now`. Returns false when reading should stop: an error event,
  // a chunk that is not JSON, or a malformed stream (the reason is in error()).
  bool feed(std::string_view bytes, Clock::time_point now);
  // The body ended at `now` (cleanly: a broken transfer is the caller's error to report).
  void finish(Clock::time_point now);

  bool done() const { return done_; }  // "data: [DONE]" arrived
  const std::string& error() const { return error_; }
  int content_events() const { return content_events_; }
  std::optional<int> completion_tokens() const { return completion_tokens_; }
  std::optional<int> prompt_tokens() const { return prompt_tokens_; }

  // The request's outcome: ok when the stream reached [DONE] with at least one content event and
  // no error. `prompt_len` stands in for the input tokens when the server sent no usage.
  // start_s / end_s are left to the caller (they are on the benchmark's clock).
  RequestResult result(int prompt_len) const;

 private:
  void on_event(const SseEvent& e, Clock::time_point now);
  void fail(std::string why);

  Clock::time_point sent_;
  SseParser parser_;
  std::vector<SseEvent> events_;  // reused between feed() calls
  bool done_ = false;
  std::string error_;
  int content_events_ = 0;
  std::optional<Clock::time_point> first_content_, last_content_, done_at_;
  std::vector<double> itl_ms_;
  std::optional<int> completion_tokens_, prompt_tokens_;
};

}  // namespace braid::bench::serve
