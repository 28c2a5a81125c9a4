// A serving benchmark's report: what was asked (ServeParameters), what was measured
// (ServeMetrics), as a terminal table, JSON, CSV and Markdown. The JSON keeps the top level of
// the other bench files ("schema", "suite", "git_commit", "date_utc", "device") with its own
// schema name, since latency distributions are not the kernel rows of braidinfer.bench.run/1:
//
//   {"schema": "braidinfer.bench.serve/1", "suite": "serve", "git_commit", "date_utc",
//    "device": null (the server's GPU is not visible to its client),
//    "parameters": {base_url, endpoint, model, dataset, prompt_form, num_prompts, input_len,
//                   output_len, range_ratio, vocab_size, tokenizer, request_rate (null = inf),
//                   burstiness, max_concurrency (null = none), workers, seed, temperature,
//                   ignore_eos, timeout_s},
//    "results": {completed, failed, duration_s, total_input_tokens, total_output_tokens,
//                request_throughput, output_throughput, total_token_throughput,
//                requests_without_usage, peak_in_flight},
//    "metrics": {"ttft_ms" | "tpot_ms" | "itl_ms" | "e2e_ms":
//                {count, mean, median, std, min, max, "p90", "p99", ...} (null values when
//                count is 0)},
//    "errors": [{message, count}], "other_errors": n}
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/suites/serve/serve_metrics.h"

namespace braid::bench::serve {

struct ServeParameters {
  std::string base_url;
  std::string endpoint;
  std::string model;
  std::string dataset = "random";
  std::string prompt_form;  // "token_ids", "tokenizer_text", "random_words"
  int num_prompts = 0;
  int input_len = 0;
  int output_len = 0;
  double range_ratio = 0;
  int vocab_size = 0;
  std::string tokenizer;  // the --tokenizer folder, "" if none
  double request_rate = 0;  // requests/s; infinity: all at once
  double burstiness = 1;
  int max_concurrency = 0;  // 0: none given
  int workers = 0;          // requests that could be in flight at once
  uint64_t seed = 0;
  double temperature = 0;
  bool ignore_eos = true;
  double timeout_s = 0;
};

struct ServeReport {
  std::string git_commit;
  std::string date_utc;
  ServeParameters params;
  ServeMetrics metrics;
};

constexpr const char* kServeSchema = "braidinfer.bench.serve/1";

// "p90", "p99", "p99.9": the key and column title of a percentile.
std::string percentile_name(double p);

nlohmann::json serve_json(const ServeReport& report);
// The parameters in one line, the results as a two-column table, then one row per latency
// metric (count, mean, median, std, min, percentiles, max, in ms), and the failure reasons.
std::string serve_table(const ServeReport& report);
// One line per latency metric, with the run's parameters and results repeated on each, numbers
// unformatted, so a spreadsheet or pandas reads each line on its own.
std::string serve_csv(const ServeReport& report);
std::string serve_markdown(const ServeReport& report);

}  // namespace braid::bench::serve
