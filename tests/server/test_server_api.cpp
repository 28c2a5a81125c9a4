// The OpenAI-compatible server through real HTTP on loopback: response shapes (whole and
// streamed), the side endpoints, every kind of bad request answered with a 4xx error object while
// the server goes on, and 503 when the engine is full.
#include <future>

#include "engine/tiny_model.h"
#include "server_fixture.h"
#include "test_util.h"

namespace braid::test {
namespace {

using json = nlohmann::json;

void expect_error_object(int status, const json& body, int want_status, const std::string& fragment,
                         const std::string& param = {}) {
  EXPECT_EQ(status, want_status) << body.dump();
  ASSERT_TRUE(body.is_object() && body.contains("error")) << body.dump();
  const json& e = body["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_NE(e["message"].get<std::string>().find(fragment), std::string::npos) << e.dump();
  EXPECT_TRUE(e["type"].is_string());
  EXPECT_TRUE(e.contains("param") && e.contains("code"));
  if (!param.empty()) EXPECT_EQ(e["param"], param) << e.dump();
}

TEST(ServerApi, CompletionAndItsStreamAgree) {
  TestServer s;
  const json req = {{"model", "tiny"}, {"prompt", "The meaning of life is"}, {"max_tokens", 20},
                    {"temperature", 0}};
  auto [status, whole] = s.post("/v1/completions", req);
  ASSERT_EQ(status, 200) << whole.dump();
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["model"], "tiny");
  ASSERT_EQ(whole["choices"].size(), 1u);
  const json& c = whole["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_TRUE(c["finish_reason"] == "stop" || c["finish_reason"] == "length");
  EXPECT_EQ(whole["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(whole["usage"]["total_tokens"].get<int>(),
            5 + whole["usage"]["completion_tokens"].get<int>());
  EXPECT_EQ(c["text"], " a capacity.\n\t\t-- Gordon Light") << "the embedded model's golden";

  json sreq = req;
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  auto cl = s.client();
  auto r = cl.Post("/v1/completions", sreq.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  const auto events = sse_data(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  json finish = nullptr;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    EXPECT_EQ(e["id"], json::parse(events[0])["id"]);
    ASSERT_EQ(e["choices"].size(), 1u);
    text += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, c["text"]);
  EXPECT_EQ(finish, c["finish_reason"]);
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], whole["usage"]["completion_tokens"]);
}

TEST(ServerApi, TokenIdPromptsBatchedPromptsNLogprobsAndEcho) {
  TestServer s;
  auto [st, ids] = s.post("/tokenize", json{{"prompt", "A fool"}});
  ASSERT_EQ(st, 200);
  EXPECT_EQ(ids["count"], ids["tokens"].size());
  auto [dst, text] = s.post("/detokenize", json{{"tokens", ids["tokens"]}});
  ASSERT_EQ(dst, 200);
  EXPECT_EQ(text["prompt"], "A fool");

  auto [s1, by_text] = s.post("/v1/completions", json{{"prompt", "A fool"}, {"max_tokens", 6}, {"temperature", 0}});
  auto [s2, by_ids] = s.post("/v1/completions", json{{"prompt", ids["tokens"]}, {"max_tokens", 6}, {"temperature", 0}});
  ASSERT_EQ(s1, 200);
  ASSERT_EQ(s2, 200);
  EXPECT_EQ(by_text["choices"][0]["text"], by_ids["choices"][0]["text"]);

  auto [s3, batch] = s.post("/v1/completions",
                            json{{"prompt", {"A fool", "Love"}}, {"max_tokens", 4}, {"n", 2},
                                 {"temperature", 0.8}, {"seed", 3}, {"logprobs", 2}, {"echo", true}});
  ASSERT_EQ(s3, 200) << batch.dump();
  ASSERT_EQ(batch["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const json& c = batch["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["text"].get<std::string>().rfind(i < 2 ? "A fool" : "Love", 0), 0u) << "echo";
    const json& lp = c["logprobs"];
    EXPECT_EQ(lp["tokens"].size(), lp["token_logprobs"].size());
    EXPECT_EQ(lp["top_logprobs"].size(), lp["tokens"].size());
    for (const json& alt : lp["top_logprobs"]) EXPECT_LE(alt.size(), 2u);
    for (const json& v : lp["token_logprobs"]) EXPECT_LE(v.get<double>(), 0.0);
  }
  EXPECT_EQ(batch["usage"]["prompt_tokens"], 2 + 1);
}

TEST(ServerApi, ChatCompletionWholeAndStreamedThroughTheTemplate) {
  TestServer s;
  // The embedded model's template concatenates the contents: its reply to one user message is
  // the completion of that text.
  const json msgs = {{{"role", "user"}, {"content", "The meaning of life is"}}};
  auto [st, chat] = s.post("/v1/chat/completions", json{{"messages", msgs}, {"max_tokens", 20}, {"temperature", 0}});
  ASSERT_EQ(st, 200) << chat.dump();
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], " a capacity.\n\t\t-- Gordon Light");
  EXPECT_EQ(chat["usage"]["prompt_tokens"], 5);

  auto cl = s.client();
  auto r = cl.Post("/v1/chat/completions",
                   json{{"messages", msgs}, {"max_tokens", 20}, {"temperature", 0}, {"stream", true},
                        {"logprobs", true}, {"top_logprobs", 2}}
                       .dump(),
                   "application/json");
  ASSERT_TRUE(r);
  const auto events = sse_data(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  int logprob_entries = 0;
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    const json& d = e["choices"][0]["delta"];
    if (d.contains("content")) text += d["content"].get<std::string>();
    if (e["choices"][0]["logprobs"].is_object())
      for (const json& c : e["choices"][0]["logprobs"]["content"]) {
        EXPECT_EQ(c["top_logprobs"].size(), 2u);
        EXPECT_TRUE(c["bytes"].is_array());
        ++logprob_entries;
      }
  }
  EXPECT_EQ(text, chat["choices"][0]["message"]["content"]);
  EXPECT_GT(logprob_entries, 0);

  // The template's prompt, through /tokenize.
  auto [ts, tok] = s.post("/tokenize", json{{"messages", msgs}});
  ASSERT_EQ(ts, 200) << tok.dump();
  EXPECT_EQ(tok["count"], 5);
}

TEST(ServerApi, ChatWithoutATemplateIsA400) {
  TinyModelDir dir(TinyModelSpec{});  // no tokenizer, no template
  TestServer s({}, 16, {}, dir.path());
  auto [st, body] = s.post("/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  EXPECT_EQ(st, 400);
  EXPECT_NE(body.dump().find("no chat template"), std::string::npos) << body.dump();
  auto [ok, done] = s.post("/v1/completions", json{{"prompt", {1, 2, 3}}, {"max_tokens", 2}});
  EXPECT_EQ(ok, 200) << done.dump();
}

// The server on a model split over two ranks (CPU threads; issue 21): the same completions,
// greedy and seeded, as on one.
TEST(ServerApi, TensorParallelServerGivesTheSameCompletions) {
  engine::EngineConfig two;
  two.tensor_parallel = 2;
  TestServer whole, split(two);
  for (const json& req :
       {json{{"prompt", "The meaning of life is"}, {"max_tokens", 20}, {"temperature", 0}},
        json{{"prompt", "A fool"}, {"max_tokens", 16}, {"temperature", 0.8}, {"seed", 5}, {"n", 2}}}) {
    auto [s1, a] = whole.post("/v1/completions", req);
    auto [s2, b] = split.post("/v1/completions", req);
    ASSERT_EQ(s1, 200) << a.dump();
    ASSERT_EQ(s2, 200) << b.dump();
    ASSERT_EQ(a["choices"].size(), b["choices"].size());
    for (size_t i = 0; i < a["choices"].size(); ++i)
      EXPECT_EQ(b["choices"][i]["text"], a["choices"][i]["text"]) << req.dump();
  }
  EXPECT_EQ(split.loop().engine().tensor_parallel(), 2);
}

TEST(ServerApi, ModelsHealthVersionMetrics) {
  TestServer s;
  auto c = s.client();
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["max_model_len"], 512);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(c.Get("/version")->status, 200);
  // ignore_eos: the request samples (temperature 1, no seed), and an early end-of-sequence would
  // make fewer than three tokens (it did, in about 2% of runs).
  auto [status, done] =
      s.post("/v1/completions", json{{"prompt", "Love"}, {"max_tokens", 3}, {"ignore_eos", true}});
  ASSERT_EQ(status, 200) << done.dump();
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  for (const char* name : {"num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
                           "prefix_cache_hit_rate", "prompt_tokens_total", "generation_tokens_total",
                           "time_to_first_token_seconds_bucket", "inter_token_latency_seconds_bucket",
                           "e2e_request_latency_seconds_count"})
    EXPECT_NE(metrics->body.find(std::string("braidinfer:") + name), std::string::npos) << name;
  EXPECT_EQ(s.metric("generation_tokens_total"), 3);
}

TEST(ServerApi, BadRequestsGetErrorObjectsAndTheServerGoesOn) {
  engine::EngineConfig cfg;
  server::ServerConfig sc;
  sc.max_request_bytes = 4096;
  TestServer s(cfg, 1024, sc);
  const std::string long_prompt(5000, 'x');
  struct Case {
    std::string body;
    int status;
    std::string fragment, param;
  };
  const std::vector<Case> cases = {
      {"{not json", 400, "not valid JSON", ""},
      {"", 400, "empty", ""},
      {"[1, 2]", 400, "JSON object", ""},
      {json{{"max_tokens", 3}}.dump(), 400, "'prompt' is required", "prompt"},
      {json{{"prompt", 5}}.dump(), 400, "'prompt' must be", "prompt"},
      {json{{"prompt", "x"}, {"max_tokens", 0}}.dump(), 400, "max_tokens", "max_tokens"},
      {json{{"prompt", "x"}, {"max_tokens", -5}}.dump(), 400, "max_tokens", "max_tokens"},
      {json{{"prompt", "x"}, {"max_tokens", "ten"}}.dump(), 400, "integer", "max_tokens"},
      {json{{"prompt", "x"}, {"temperature", -1}}.dump(), 400, "temperature", "temperature"},
      {json{{"prompt", "x"}, {"temperature", "hot"}}.dump(), 400, "number", "temperature"},
      {json{{"prompt", "x"}, {"top_p", 0}}.dump(), 400, "top_p", "top_p"},
      {json{{"prompt", "x"}, {"n", 0}}.dump(), 400, "'n'", "n"},
      {json{{"prompt", "x"}, {"stop", 7}}.dump(), 400, "stop", "stop"},
      {json{{"prompt", "x"}, {"logit_bias", {{"5", 10}}}}.dump(), 400, "not supported", "logit_bias"},
      {json{{"prompt", {1, 2, 99999}}}.dump(), 400, "vocabulary", "prompt"},
      {json{{"prompt", "x"}, {"max_tokens", 600}}.dump(), 400, "context", "max_tokens"},
      {json{{"prompt", std::vector<int>(600, 5)}, {"max_tokens", 1}}.dump(), 400, "context", "prompt"},
      {json{{"prompt", "x"}, {"model", "gpt-4"}}.dump(), 404, "does not exist", "model"},
      {json{{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}.dump(), 400, "stream", "stream_options"},
      {json{{"prompt", long_prompt}}.dump(), 413, "size limit", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 80));
    auto [status, body] = s.post("/v1/completions", c.body);
    expect_error_object(status, body, c.status, c.fragment, c.param);
  }
  const std::vector<Case> chat_cases = {
      {json{{"max_tokens", 3}}.dump(), 400, "'messages' is required", "messages"},
      {json{{"messages", json::array()}}.dump(), 400, "non-empty", "messages"},
      {json{{"messages", {{{"content", "hi"}}}}}.dump(), 400, "role", "messages[0].role"},
      {json{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}.dump(), 400,
       "not supported", "messages[0].content"},
      {json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"top_logprobs", 2}}.dump(), 400,
       "logprobs", "top_logprobs"},
  };
  for (const Case& c : chat_cases) {
    SCOPED_TRACE(c.body.substr(0, 80));
    auto [status, body] = s.post("/v1/chat/completions", c.body);
    expect_error_object(status, body, c.status, c.fragment, c.param);
  }
  auto cl = s.client();
  auto unknown = cl.Get("/v1/engines");
  ASSERT_TRUE(unknown);
  expect_error_object(unknown->status, json::parse(unknown->body), 404, "no such endpoint");
  auto [ds, detok] = s.post("/detokenize", json{{"tokens", {1, -3}}});
  expect_error_object(ds, detok, 400, "not an id", "tokens");

  // And it still serves.
  auto [ok, good] = s.post("/v1/completions", json{{"prompt", "Love"}, {"max_tokens", 2}});
  EXPECT_EQ(ok, 200) << good.dump();
  EXPECT_TRUE(s.drained());
}

TEST(ServerApi, AFullEngineAnswers503) {
  engine::EngineConfig cfg;
  cfg.max_num_seqs = 1;
  TestServer s(cfg, /*max_waiting=*/0);
  // Long enough to still hold the slot when the second request comes (about 1 s here, 10 s under
  // the sanitizers), short of the client's 60 s read timeout: 300 tokens took 60-62 s under ASan.
  auto long_one = std::async(std::launch::async, [&] {
    return s.post("/v1/completions", json{{"prompt", "Love"}, {"max_tokens", 48}, {"ignore_eos", true}});
  });
  // Wait until it holds the engine's only slot.
  for (int i = 0; i < 500 && s.loop().in_flight() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto [status, body] = s.post("/v1/completions", json{{"prompt", "A fool"}, {"max_tokens", 2}});
  expect_error_object(status, body, 503, "retry later");
  EXPECT_EQ(long_one.get().first, 200);
  auto [after, _] = s.post("/v1/completions", json{{"prompt", "A fool"}, {"max_tokens", 2}});
  EXPECT_EQ(after, 200) << "the slot is free again";
}

}  // namespace
}  // namespace braid::test
