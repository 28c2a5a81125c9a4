// The serving benchmark end to end through real HTTP on loopback (CPU only, runs in CI): a
// scripted fake OpenAI server streams with known delays, and the client must measure them,
// respect --max-concurrency, and report failures (an error status, a dropped connection, an error
// event, a stall past the timeout, no server at all) instead of hanging or crashing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/suites/serve/fake_openai_server.h"
#include "bench/suites/serve/load_generator.h"
#include "bench/suites/serve/request_body.h"
#include "bench/suites/serve/serve_client.h"
#include "bench/suites/serve/serve_metrics.h"
#include "braid/error.h"

namespace braid::bench::serve {
namespace {

using test::FakeOpenAiServer;
using test::FakeScript;

struct Load {
  LoadRun run;
  ServeMetrics metrics;
};

Load run_against(const std::string& base_url, int n, int max_concurrency,
                 const std::string& path = "/v1/completions", double timeout_s = 5.0) {
  const Api api = path == "/v1/chat/completions" ? Api::chat : Api::completions;
  Prompt p;
  if (api == Api::chat) p.text = "the of and";
  else p.ids = {11, 12, 13};
  p.input_len = 3;
  p.output_len = 5;
  std::vector<LoadRequest> requests(static_cast<size_t>(n),
                                    {request_body(api, "fake-model", p, {}).dump(), 3});
  LoadOptions o;
  o.client.base_url = base_url;
  o.client.timeout_s = timeout_s;
  o.path = path;
  o.max_concurrency = max_concurrency;
  Load l;
  l.run = run_load(o, requests);
  l.metrics = compute_metrics(l.run.results, l.run.duration_s, {50, 90, 99});
  return l;
}

bool has_error(const ServeMetrics& m, const std::string& message, int count) {
  for (const auto& e : m.errors)
    if (e.message == message) return e.count == count;
  return false;
}

std::string errors_of(const ServeMetrics& m) {
  std::string s;
  for (const auto& e : m.errors) s += std::to_string(e.count) + " x " + e.message + "\n";
  return s;
}

TEST(ServeClient, MeasuresTheScriptedDelays) {
  // First chunk 50 ms after the request, then one every 10 ms: 5 tokens, usage, [DONE].
  FakeOpenAiServer server([](int) { return FakeScript{}; });
  const Load l = run_against(server.base_url(), 4, 2);
  const ServeMetrics& m = l.metrics;
  ASSERT_EQ(m.completed, 4) << errors_of(m);
  EXPECT_EQ(m.failed, 0);
  EXPECT_EQ(m.total_output_tokens, 20);
  EXPECT_EQ(m.total_input_tokens, 12);  // the fake server's usage: 3 prompt ids each
  EXPECT_EQ(m.requests_without_usage, 0);
  // Sleeps only ever run long, and a loaded CI machine adds its own delays: tight below, loose
  // above.
  EXPECT_GE(m.ttft_ms.min, 49.0);
  EXPECT_LE(m.ttft_ms.median, 130.0);
  EXPECT_EQ(m.itl_ms.count, 16);  // 4 gaps per request
  EXPECT_GE(m.itl_ms.median, 8.0);
  EXPECT_LE(m.itl_ms.median, 40.0);
  EXPECT_EQ(m.tpot_ms.count, 4);
  EXPECT_GE(m.tpot_ms.mean, 9.0);  // the four gaps of a request together last at least 40 ms
  EXPECT_LE(m.tpot_ms.mean, 40.0);
  EXPECT_GE(m.e2e_ms.min, 89.0);
  EXPECT_LE(m.e2e_ms.median, 250.0);
  EXPECT_GT(m.request_throughput, 0.0);
  EXPECT_EQ(server.peak_in_flight(), 2);
  EXPECT_EQ(server.requests(), 4);
  // What the server was sent.
  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 4u);
  EXPECT_EQ(bodies[0]["model"], "fake-model");
  EXPECT_EQ(bodies[0]["max_tokens"], 5);
  EXPECT_EQ(bodies[0]["stream"], true);
  EXPECT_EQ(bodies[0]["stream_options"]["include_usage"], true);
  EXPECT_EQ(bodies[0]["ignore_eos"], true);
}

TEST(ServeClient, MaxConcurrencyBoundsTheRequestsInFlight) {
  FakeOpenAiServer server([](int) { return FakeScript{.first_ms = 20, .gap_ms = 5, .tokens = 3}; });
  const Load bounded = run_against(server.base_url(), 12, 3);
  EXPECT_EQ(bounded.metrics.completed, 12) << errors_of(bounded.metrics);
  EXPECT_EQ(bounded.run.workers, 3);
  EXPECT_EQ(server.peak_in_flight(), 3);
  EXPECT_LE(bounded.metrics.peak_in_flight, 3);

  // Without a bound all of them are sent at once.
  FakeOpenAiServer unbounded_server(
      [](int) { return FakeScript{.first_ms = 50, .gap_ms = 5, .tokens = 2}; });
  const Load unbounded = run_against(unbounded_server.base_url(), 6, 0);
  EXPECT_EQ(unbounded.metrics.completed, 6) << errors_of(unbounded.metrics);
  EXPECT_EQ(unbounded_server.peak_in_flight(), 6);
}

TEST(ServeClient, FailedRequestsAreReportedWithTheirReasons) {
  FakeOpenAiServer server([](int i) {
    FakeScript s{.first_ms = 10, .gap_ms = 2, .tokens = 4};
    const FakeScript::Kind kinds[] = {FakeScript::Kind::stream, FakeScript::Kind::status_500,
                                      FakeScript::Kind::drop, FakeScript::Kind::error_event};
    s.kind = kinds[i % 4];
    return s;
  });
  const Load l = run_against(server.base_url(), 8, 4);
  const ServeMetrics& m = l.metrics;
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 6);
  EXPECT_TRUE(has_error(m, "HTTP 500: fake overload", 2)) << errors_of(m);
  EXPECT_TRUE(has_error(m, "the connection broke while reading the response", 2)) << errors_of(m);
  EXPECT_TRUE(has_error(m, "error event: fake engine failure", 2)) << errors_of(m);
  EXPECT_EQ(m.total_output_tokens, 8);  // the completed ones only
  EXPECT_EQ(m.ttft_ms.count, 2);
}

TEST(ServeClient, AStalledRequestTimesOut) {
  FakeOpenAiServer server([](int) { return FakeScript{.kind = FakeScript::Kind::stall}; });
  const Load l = run_against(server.base_url(), 2, 2, "/v1/completions", /*timeout_s=*/0.3);
  EXPECT_EQ(l.metrics.failed, 2);
  ASSERT_EQ(l.metrics.errors.size(), 1u);
  EXPECT_NE(l.metrics.errors[0].message.find("timed out after 0.3 s"), std::string::npos)
      << errors_of(l.metrics);
  EXPECT_LT(l.run.duration_s, 3.0);
}

TEST(ServeClient, NoServerMeansFailedRequests) {
  std::string url;
  {
    FakeOpenAiServer gone([](int) { return FakeScript{}; });
    url = gone.base_url();
  }  // stopped: its port now refuses connections
  const Load l = run_against(url, 3, 0);
  EXPECT_EQ(l.metrics.failed, 3);
  EXPECT_TRUE(has_error(l.metrics, "could not connect to the server", 3)) << errors_of(l.metrics);
}

TEST(ServeClient, ChatWithoutUsageAndWithCrlfLineEnds) {
  // The fake chat stream opens with a role-only chunk at once; it must not count as the first
  // token. Without usage the output tokens are the content events.
  FakeOpenAiServer server([](int) {
    return FakeScript{.first_ms = 30, .gap_ms = 5, .tokens = 4, .usage = false, .crlf = true};
  });
  const Load l = run_against(server.base_url(), 3, 3, "/v1/chat/completions");
  const ServeMetrics& m = l.metrics;
  ASSERT_EQ(m.completed, 3) << errors_of(m);
  EXPECT_GE(m.ttft_ms.min, 29.0);
  EXPECT_EQ(m.total_output_tokens, 12);
  EXPECT_EQ(m.requests_without_usage, 3);
  EXPECT_EQ(m.total_input_tokens, 9);  // no usage: the sampled prompt lengths
  EXPECT_EQ(server.bodies()[0]["messages"][0]["content"], "the of and");
}

TEST(ServeClient, FirstModelComesFromTheModelList) {
  FakeOpenAiServer server([](int) { return FakeScript{}; });
  ServeClient client({server.base_url(), "", 5.0});
  EXPECT_EQ(client.first_model_id(), "fake-model");
  ServeClient wrong_prefix({server.base_url() + "/nothing-here", "", 5.0});
  EXPECT_THROW(wrong_prefix.first_model_id(), Error);
}

TEST(ServeClient, BaseUrlsSplitIntoOriginAndPrefix) {
  const ServerAddress a = parse_base_url("http://127.0.0.1:8000");
  EXPECT_EQ(a.origin, "http://127.0.0.1:8000");
  EXPECT_EQ(a.prefix, "");
  const ServerAddress b = parse_base_url("https://example.org/api/");
  EXPECT_EQ(b.origin, "https://example.org");
  EXPECT_EQ(b.prefix, "/api");
  EXPECT_THROW(parse_base_url("127.0.0.1:8000"), Error);
  EXPECT_THROW(parse_base_url("ftp://host"), Error);
  EXPECT_THROW(parse_base_url("http://"), Error);
  EXPECT_THROW(parse_base_url("http:///v1"), Error);
}

}  // namespace
}  // namespace braid::bench::serve
