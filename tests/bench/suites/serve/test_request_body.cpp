// Request bodies of the serving benchmark (CPU only, runs in CI): the fields vllm bench serve
// sends, prompt ids or text for completions, messages for chat.
#include <gtest/gtest.h>

#include "bench/suites/serve/request_body.h"
#include "braid/error.h"

namespace braid::bench::serve {
namespace {

TEST(ServeRequestBody, CompletionsWithTokenIds) {
  Prompt p;
  p.ids = {101, 202, 303};
  p.input_len = 3;
  p.output_len = 16;
  const auto j = request_body(Api::completions, "m", p, {});
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["prompt"], nlohmann::json({101, 202, 303}));
  EXPECT_EQ(j["max_tokens"], 16);
  EXPECT_EQ(j["temperature"], 0.0);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"], nlohmann::json({{"include_usage", true}}));
  EXPECT_FALSE(j.contains("messages"));
}

TEST(ServeRequestBody, CompletionsWithText) {
  Prompt p;
  p.text = "the of and";
  p.output_len = 4;
  const auto j = request_body(Api::completions, "m", p, {0.7, false});
  EXPECT_EQ(j["prompt"], "the of and");
  EXPECT_EQ(j["temperature"], 0.7);
  EXPECT_FALSE(j.contains("ignore_eos"));  // not asked for: left to the server's default
}

TEST(ServeRequestBody, ChatSendsOneUserMessage) {
  Prompt p;
  p.text = "hello there";
  p.output_len = 8;
  const auto j = request_body(Api::chat, "m", p, {});
  EXPECT_EQ(j["messages"],
            nlohmann::json::array({{{"role", "user"}, {"content", "hello there"}}}));
  EXPECT_FALSE(j.contains("prompt"));
  EXPECT_EQ(j["max_tokens"], 8);
  EXPECT_EQ(j["stream"], true);
}

TEST(ServeRequestBody, ChatRefusesTokenIds) {
  Prompt p;
  p.ids = {1, 2};
  EXPECT_THROW(request_body(Api::chat, "m", p, {}), Error);
}

}  // namespace
}  // namespace braid::bench::serve
