// Reading one streamed completion (CPU only, runs in CI, no socket): TTFT, ITL and E2E from
// the arrival times of the events, token counts from usage or from the content events, and the
// ways a stream fails.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "bench/suites/serve/completion_stream.h"

namespace braid::bench::serve {
namespace {

using Clock = CompletionStream::Clock;
using std::chrono::milliseconds;

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);

Clock::time_point at(int ms) { return t0 + milliseconds(ms); }

std::string text_event(const std::string& text) {
  return "data: {\"choices\":[{\"index\":0,\"text\":\"" + text + "\"}]}\n\n";
}

TEST(ServeStream, TimesContentEventsAndReadsUsage) {
  CompletionStream s(t0);
  EXPECT_TRUE(s.feed(text_event("a"), at(50)));
  EXPECT_TRUE(s.feed(text_event("b") + text_event("c"), at(62)));  // two events in one read
  EXPECT_TRUE(s.feed(text_event("d"), at(80)));
  // The final chunk: no choices, the usage; then [DONE].
  EXPECT_TRUE(s.feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,"
                     "\"completion_tokens\":4,\"total_tokens\":11}}\n\ndata: [DONE]\n\n",
                     at(81)));
  s.finish(at(82));
  const RequestResult r = s.result(/*prompt_len=*/99);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_DOUBLE_EQ(r.ttft_ms, 50.0);
  ASSERT_EQ(r.itl_ms.size(), 3u);
  EXPECT_DOUBLE_EQ(r.itl_ms[0], 12.0);
  EXPECT_DOUBLE_EQ(r.itl_ms[1], 0.0);
  EXPECT_DOUBLE_EQ(r.itl_ms[2], 18.0);
  EXPECT_DOUBLE_EQ(r.e2e_ms, 81.0);  // at [DONE]
  EXPECT_EQ(r.output_tokens, 4);
  EXPECT_TRUE(r.usage_reported);
  EXPECT_EQ(r.input_tokens, 7);  // the server's count wins over the sampled length
}

TEST(ServeStream, WithoutUsageTheContentEventsAreTheTokens) {
  CompletionStream s(t0);
  s.feed(text_event("a") + text_event("b") + text_event("c"), at(10));
  s.feed("data: [DONE]\n\n", at(11));
  s.finish(at(11));
  const RequestResult r = s.result(12);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.output_tokens, 3);
  EXPECT_FALSE(r.usage_reported);
  EXPECT_EQ(r.input_tokens, 12);
}

TEST(ServeStream, ChatRoleAndFinishChunksAreNotContent) {
  CompletionStream s(t0);
  s.feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}"
         "\n\n",
         at(1));
  s.feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n", at(40));
  s.feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n",
         at(45));
  s.feed("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n",
         at(46));
  s.feed("data: [DONE]\n\n", at(47));
  s.finish(at(47));
  const RequestResult r = s.result(1);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_DOUBLE_EQ(r.ttft_ms, 40.0);
  EXPECT_EQ(s.content_events(), 2);
  ASSERT_EQ(r.itl_ms.size(), 1u);
  EXPECT_DOUBLE_EQ(r.itl_ms[0], 5.0);
}

TEST(ServeStream, AnEmptyTextIsStillAToken) {
  // Completions: a token whose text is held back (part of a UTF-8 character) comes as "".
  CompletionStream s(t0);
  s.feed("data: {\"choices\":[{\"index\":0,\"text\":\"\"}]}\n\n", at(7));
  s.feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"}}]}\n\n", at(9));
  s.feed("data: [DONE]\n\n", at(10));
  s.finish(at(10));
  const RequestResult r = s.result(1);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_DOUBLE_EQ(r.ttft_ms, 7.0);
  EXPECT_EQ(s.content_events(), 2);
}

TEST(ServeStream, AnEmptyTextWithTokenIdsIsStillAToken) {
  // A token that ends inside a UTF-8 character decodes to "" but was generated.
  CompletionStream s(t0);
  s.feed("data: {\"choices\":[{\"text\":\"\",\"token_ids\":[1234]}]}\n\ndata: [DONE]\n\n", at(5));
  s.finish(at(5));
  EXPECT_TRUE(s.result(1).ok);
  EXPECT_EQ(s.content_events(), 1);
}

TEST(ServeStream, EventsAfterDoneAreIgnored) {
  CompletionStream s(t0);
  s.feed(text_event("a") + "data: [DONE]\n\n" + text_event("late"), at(5));
  s.finish(at(6));
  EXPECT_EQ(s.content_events(), 1);
  EXPECT_TRUE(s.result(1).ok);
}

TEST(ServeStream, FailuresNameTheirReason) {
  {
    CompletionStream s(t0);
    s.feed(text_event("a"), at(5));
    s.finish(at(6));
    const RequestResult r = s.result(1);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("[DONE]"), std::string::npos) << r.error;
  }
  {
    CompletionStream s(t0);
    s.feed(text_event("a"), at(5));
    EXPECT_FALSE(s.feed("data: {\"error\":{\"message\":\"out of KV cache\",\"code\":500}}\n\n",
                        at(6)));
    EXPECT_EQ(s.result(1).error, "error event: out of KV cache");
  }
  {
    CompletionStream s(t0);
    EXPECT_FALSE(s.feed("event: error\ndata: engine died\n\n", at(6)));
    EXPECT_EQ(s.result(1).error, "error event: engine died");
  }
  {
    CompletionStream s(t0);
    EXPECT_FALSE(s.feed("data: {not json\n\n", at(6)));
    EXPECT_NE(s.result(1).error.find("not a JSON object"), std::string::npos);
  }
  {
    CompletionStream s(t0);  // [DONE] without anything generated
    s.feed("data: [DONE]\n\n", at(6));
    s.finish(at(6));
    EXPECT_NE(s.result(1).error.find("no generated text"), std::string::npos);
  }
}

}  // namespace
}  // namespace braid::bench::serve
