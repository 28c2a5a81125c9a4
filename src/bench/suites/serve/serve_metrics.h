// The results of a serving benchmark from its requests, computed as `vllm bench serve` computes
// them: throughputs over the benchmark's duration counting completed requests only; TTFT and E2E
// per completed request; TPOT = (E2E - TTFT) / (output tokens - 1) for completed requests with
// more than one output token; ITL = every gap between content events of completed requests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/suites/serve/distribution.h"
#include "bench/suites/serve/request_result.h"

namespace braid::bench::serve {

// Distinct failure reasons kept for the report; later ones are only counted.
constexpr int kMaxErrorKinds = 5;

struct ErrorCount {
  std::string message;
  int count = 0;
};

struct ServeMetrics {
  int completed = 0;
  int failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0;   // of completed requests
  int64_t total_output_tokens = 0;  // of completed requests
  double request_throughput = 0;      // completed requests / s
  double output_throughput = 0;       // output tokens / s
  double total_token_throughput = 0;  // (input + output tokens) / s
  int requests_without_usage = 0;     // completed requests whose output tokens were counted
                                      // from content events (the server sent no usage)
  int peak_in_flight = 0;             // requests in flight at once, at most (failed ones too)
  std::vector<double> percentiles;    // which percentiles the distributions hold
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
  std::vector<ErrorCount> errors;  // the first kMaxErrorKinds distinct reasons, in first-seen order
  int other_errors = 0;            // failures with a reason beyond those
};

// The most requests in flight at any moment, from the results' [start_s, end_s] intervals.
int peak_in_flight(const std::vector<RequestResult>& results);

// Throws braid::Error (invalid_argument) for a duration that is not positive while requests
// completed, or a percentile outside [0, 100].
ServeMetrics compute_metrics(const std::vector<RequestResult>& results, double duration_s,
                             const std::vector<double>& percentiles);

}  // namespace braid::bench::serve
