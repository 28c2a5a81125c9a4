// The serving benchmark's report (CPU only, runs in CI): the JSON keeps the bench files' top
// level, empty distributions are null, and the table, CSV and Markdown carry every metric.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>

#include "bench/suites/serve/serve_report.h"

namespace braid::bench::serve {
namespace {

ServeReport sample_report() {
  ServeReport r;
  r.git_commit = "abc123";
  r.date_utc = "2026-11-23T10:00:00Z";
  r.params.base_url = "http://127.0.0.1:8000";
  r.params.endpoint = "/v1/completions";
  r.params.model = "m, with a comma";
  r.params.prompt_form = "token_ids";
  r.params.num_prompts = 3;
  r.params.input_len = 8;
  r.params.output_len = 4;
  r.params.request_rate = std::numeric_limits<double>::infinity();
  r.params.workers = 3;
  std::vector<RequestResult> results(3);
  for (int i = 0; i < 2; ++i) {
    results[i].ok = true;
    results[i].ttft_ms = 10 + i;
    results[i].e2e_ms = 40 + i;
    results[i].output_tokens = 4;
    results[i].input_tokens = 8;
    results[i].itl_ms = {10, 10, 10};
    results[i].end_s = 0.05;
  }
  results[2].error = "HTTP 500: overload";
  r.metrics = compute_metrics(results, 0.1, {90, 99.9});
  return r;
}

TEST(ServeReport, JsonHasTheBenchTopLevelAndEveryMetric) {
  const auto j = serve_json(sample_report());
  EXPECT_EQ(j["schema"], "braidinfer.bench.serve/1");
  EXPECT_EQ(j["suite"], "serve");
  EXPECT_EQ(j["git_commit"], "abc123");
  EXPECT_EQ(j["date_utc"], "2026-11-23T10:00:00Z");
  EXPECT_TRUE(j["device"].is_null());
  EXPECT_TRUE(j["parameters"]["request_rate"].is_null());  // inf
  EXPECT_TRUE(j["parameters"]["max_concurrency"].is_null());
  EXPECT_EQ(j["results"]["completed"], 2);
  EXPECT_EQ(j["results"]["failed"], 1);
  EXPECT_DOUBLE_EQ(j["results"]["request_throughput"].get<double>(), 20.0);
  for (const char* k : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    SCOPED_TRACE(k);
    const auto& d = j["metrics"][k];
    for (const char* f : {"count", "mean", "median", "std", "min", "max", "p90", "p99.9"})
      EXPECT_TRUE(d.contains(f)) << f;
  }
  EXPECT_DOUBLE_EQ(j["metrics"]["ttft_ms"]["mean"].get<double>(), 10.5);
  EXPECT_DOUBLE_EQ(j["metrics"]["tpot_ms"]["median"].get<double>(), 10.0);
  EXPECT_EQ(j["errors"][0]["message"], "HTTP 500: overload");
  EXPECT_EQ(j["errors"][0]["count"], 1);
}

TEST(ServeReport, EmptyDistributionsAreNull) {
  ServeReport r = sample_report();
  r.metrics = compute_metrics({}, 1.0, {99});
  const auto j = serve_json(r);
  EXPECT_EQ(j["metrics"]["ttft_ms"]["count"], 0);
  EXPECT_TRUE(j["metrics"]["ttft_ms"]["mean"].is_null());
  EXPECT_TRUE(j["metrics"]["ttft_ms"]["p99"].is_null());
  EXPECT_NE(serve_table(r).find("TTFT"), std::string::npos);
}

TEST(ServeReport, TableCsvAndMarkdownCarryEveryMetric) {
  const ServeReport r = sample_report();
  const std::string table = serve_table(r);
  for (const char* s : {"request throughput (req/s)", "output token throughput (tok/s)",
                        "total token throughput (tok/s)", "TTFT", "TPOT", "ITL", "E2E latency",
                        "p90", "p99.9", "1 x HTTP 500: overload", "20.00"})
    EXPECT_NE(table.find(s), std::string::npos) << s << "\n" << table;

  const std::string csv = serve_csv(r);
  std::istringstream lines(csv);
  std::string header, line;
  std::getline(lines, header);
  int rows = 0;
  while (std::getline(lines, line)) {
    ++rows;
    // The model's comma is quoted, so counting commas outside quotes gives the header's count.
    int fields = 1;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) ++fields;
    }
    EXPECT_EQ(fields, std::count(header.begin(), header.end(), ',') + 1) << line;
  }
  EXPECT_EQ(rows, 4);

  const std::string md = serve_markdown(r);
  EXPECT_NE(md.find("# braidinfer bench serve"), std::string::npos);
  EXPECT_NE(md.find("| TTFT | 2 |"), std::string::npos) << md;
}

}  // namespace
}  // namespace braid::bench::serve
