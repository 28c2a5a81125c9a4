// Server-Sent Events read incrementally from the body of a streaming HTTP response, as the
// WHATWG EventSource rules define them: lines end in "\n", "\r\n" or "\r"; "field: value" lines
// build an event ("data" lines are joined by "\n"); a line starting with ':' is a comment; a blank
// line delivers the event. TCP delivers the body in arbitrary pieces, so a line, even a "\r\n"
// pair, may be split across feed() calls.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace braid::bench::serve {

struct SseEvent {
  std::string event;  // the "event:" field; "" is the default type ("message")
  std::string data;   // the "data:" lines joined by "\n"
};

class SseParser {
 public:
  // A line longer than this fails the stream (braid::Error, io): no OpenAI event comes close,
  // and a server that never ends its line must not grow the client without bound.
  static constexpr size_t kMaxLineBytes = 16u << 20;

  // Parses the next bytes of the body; each event they complete is appended to `out`.
  void feed(std::string_view bytes, std::vector<SseEvent>& out);
  // The body ended. An event whose closing blank line never came is delivered anyway: the spec
  // drops it, but a server that ends its last event with a single newline still meant it.
  void finish(std::vector<SseEvent>& out);

 private:
  void end_line(std::vector<SseEvent>& out);
  void dispatch(std::vector<SseEvent>& out);

  std::string line_;        // the current line, without its terminator
  bool after_cr_ = false;   // the last byte was '\r': a '\n' right after it ends no second line
  SseEvent pending_;        // the event being built
  bool has_data_ = false;   // pending_ had a data line ("data:" with no value counts)
};

}  // namespace braid::bench::serve
