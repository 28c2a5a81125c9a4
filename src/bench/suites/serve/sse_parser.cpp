#include "bench/suites/serve/sse_parser.h"

#include "braid/error.h"

namespace braid::bench::serve {

void SseParser::feed(std::string_view bytes, std::vector<SseEvent>& out) {
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the second half of a "\r\n" already ended the line
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      end_line(out);
      continue;
    }
    line_ += c;
    if (line_.size() > kMaxLineBytes)
      throw Error(ErrorKind::io, "sse: a line of the event stream is longer than " +
                                     std::to_string(kMaxLineBytes) + " bytes without ending");
  }
}

void SseParser::finish(std::vector<SseEvent>& out) {
  if (!line_.empty()) end_line(out);
  dispatch(out);
  after_cr_ = false;
}

void SseParser::end_line(std::vector<SseEvent>& out) {
  const std::string_view line = line_;
  if (line.empty()) {
    dispatch(out);
  } else if (line.front() != ':') {  // ':' starts a comment (keep-alive pings)
    const size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) pending_.data += '\n';
      pending_.data.append(value);
      has_data_ = true;
    } else if (field == "event") {
      pending_.event = value;
    }
    // "id" and "retry" steer reconnection, which a benchmark never does; unknown fields are
    // ignored, as the spec says.
  }
  line_.clear();
}

void SseParser::dispatch(std::vector<SseEvent>& out) {
  // An event without data is not delivered (the spec's rule), so "event: x" alone is dropped.
  if (has_data_) out.push_back(std::move(pending_));
  pending_ = SseEvent{};
  has_data_ = false;
}

}  // namespace braid::bench::serve
