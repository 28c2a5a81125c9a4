// Server-Sent Events parsing (CPU only, runs in CI): events split anywhere by TCP, CRLF and CR
// line ends, comments, multi-line data, [DONE], and the end of a body without a blank line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/suites/serve/sse_parser.h"
#include "braid/error.h"

namespace braid::bench::serve {
namespace {

std::vector<SseEvent> parse_pieces(const std::vector<std::string>& pieces, bool finish = true) {
  SseParser p;
  std::vector<SseEvent> out;
  for (const auto& piece : pieces) p.feed(piece, out);
  if (finish) p.finish(out);
  return out;
}

std::vector<std::string> datas(const std::vector<SseEvent>& events) {
  std::vector<std::string> d;
  for (const auto& e : events) d.push_back(e.data);
  return d;
}

// An OpenAI-like stream with every feature at once: a comment ping, CRLF, a bare CR, a
// multi-line event, a field without a space, an event type, and [DONE].
const std::string kStream =
    ": keep-alive\n\n"
    "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
    "data: {\"choices\":[{\"text\":\"b\"}]}\r\n\r\n"
    "data: line one\r\ndata: line two\n: a comment inside an event\ndata:line three\n\n"
    "event: error\rdata: {\"error\":\"x\"}\r\r"
    "id: 7\nretry: 100\ndata: [DONE]\n\n";

const std::vector<std::string> kExpected = {
    "{\"choices\":[{\"text\":\"a\"}]}", "{\"choices\":[{\"text\":\"b\"}]}",
    "line one\nline two\nline three", "{\"error\":\"x\"}", "[DONE]"};

TEST(ServeSse, WholeStreamInOnePiece) {
  const auto events = parse_pieces({kStream});
  EXPECT_EQ(datas(events), kExpected);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[3].event, "error");
  EXPECT_EQ(events[0].event, "");
}

TEST(ServeSse, SplitAtEveryByteBoundaryGivesTheSameEvents) {
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    SCOPED_TRACE("cut at byte " + std::to_string(cut));
    EXPECT_EQ(datas(parse_pieces({kStream.substr(0, cut), kStream.substr(cut)})), kExpected);
  }
  // And every piece a single byte (each boundary split at once, "\r" and "\n" of a pair apart).
  std::vector<std::string> bytes;
  for (char c : kStream) bytes.emplace_back(1, c);
  EXPECT_EQ(datas(parse_pieces(bytes)), kExpected);
}

TEST(ServeSse, EventsAreDeliveredOnlyWhenTheirBlankLineArrives) {
  SseParser p;
  std::vector<SseEvent> out;
  p.feed("data: first\n", out);
  EXPECT_TRUE(out.empty());
  p.feed("\r", out);  // a CR ends the blank line already; a following LF must not add one
  ASSERT_EQ(out.size(), 1u);
  p.feed("\ndata: second\n\n", out);
  EXPECT_EQ(datas(out), (std::vector<std::string>{"first", "second"}));
}

TEST(ServeSse, CommentsAndBlankLinesWithoutDataDeliverNothing) {
  EXPECT_TRUE(parse_pieces({": ping\n\n\n\n: another\r\n\r\n"}).empty());
  EXPECT_TRUE(parse_pieces({"event: update\n\n"}).empty());  // an event without data
}

TEST(ServeSse, OneLeadingSpaceOfAValueIsDropped) {
  EXPECT_EQ(datas(parse_pieces({"data:x\n\ndata:  y\n\ndata\n\n"})),
            (std::vector<std::string>{"x", " y", ""}));
}

TEST(ServeSse, FinishDeliversAnEventWhoseBlankLineNeverCame) {
  EXPECT_EQ(datas(parse_pieces({"data: a\n\ndata: [DONE]"})),
            (std::vector<std::string>{"a", "[DONE]"}));
  EXPECT_EQ(datas(parse_pieces({"data: a\n\ndata: [DONE]\n"})),
            (std::vector<std::string>{"a", "[DONE]"}));
  // Without finish() the unterminated event stays pending.
  EXPECT_EQ(datas(parse_pieces({"data: a\n\ndata: [DONE]"}, /*finish=*/false)),
            (std::vector<std::string>{"a"}));
}

TEST(ServeSse, ALineThatNeverEndsFailsInsteadOfGrowingWithoutBound) {
  SseParser p;
  std::vector<SseEvent> out;
  const std::string big(SseParser::kMaxLineBytes, 'a');
  p.feed("data: ", out);
  EXPECT_THROW(p.feed(big, out), Error);
}

}  // namespace
}  // namespace braid::bench::serve
