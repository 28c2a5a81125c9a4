// Serving results from request outcomes (CPU only, runs in CI): vLLM's rules for what counts
// (completed requests only; TPOT for outputs longer than one token), the failure reasons kept,
// and the peak of requests in flight.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/suites/serve/serve_metrics.h"
#include "braid/error.h"

namespace braid::bench::serve {
namespace {

RequestResult done(double start_s, double end_s, double ttft, double e2e, int out, int in,
                   std::vector<double> itl = {}) {
  RequestResult r;
  r.ok = true;
  r.start_s = start_s;
  r.end_s = end_s;
  r.ttft_ms = ttft;
  r.e2e_ms = e2e;
  r.output_tokens = out;
  r.input_tokens = in;
  r.usage_reported = true;
  r.itl_ms = std::move(itl);
  return r;
}

RequestResult failed(const std::string& why, double start_s = 0, double end_s = 0.1) {
  RequestResult r;
  r.error = why;
  r.start_s = start_s;
  r.end_s = end_s;
  return r;
}

TEST(ServeMetrics, ThroughputAndLatenciesCountCompletedRequestsOnly) {
  const std::vector<RequestResult> results = {
      done(0.0, 1.0, 100, 1000, 10, 50, {100, 100}),
      done(0.5, 1.5, 200, 560, 5, 30, {90}),
      done(1.0, 1.2, 150, 150, 1, 20),  // one token: no TPOT
      failed("HTTP 500: overload", 1.0, 1.1),
  };
  const ServeMetrics m = compute_metrics(results, 2.0, {50});
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input_tokens, 100);
  EXPECT_EQ(m.total_output_tokens, 16);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 8.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 58.0);
  EXPECT_EQ(m.ttft_ms.count, 3);
  EXPECT_DOUBLE_EQ(m.ttft_ms.mean, 150.0);
  // TPOT: (1000 - 100) / 9 = 100 and (560 - 200) / 4 = 90.
  ASSERT_EQ(m.tpot_ms.count, 2);
  EXPECT_DOUBLE_EQ(m.tpot_ms.min, 90.0);
  EXPECT_DOUBLE_EQ(m.tpot_ms.max, 100.0);
  EXPECT_EQ(m.itl_ms.count, 3);
  EXPECT_DOUBLE_EQ(m.e2e_ms.median, 560.0);
  EXPECT_EQ(m.peak_in_flight, 3);  // at t = 1.0..1.1: the second, third and failed ones
  ASSERT_EQ(m.errors.size(), 1u);
  EXPECT_EQ(m.errors[0].message, "HTTP 500: overload");
}

TEST(ServeMetrics, FailureReasonsAreCountedAndCapped) {
  std::vector<RequestResult> results;
  for (int i = 0; i < 3; ++i) results.push_back(failed("same reason"));
  for (int i = 0; i < kMaxErrorKinds + 2; ++i)
    results.push_back(failed("reason " + std::to_string(i)));
  const ServeMetrics m = compute_metrics(results, 1.0, {});
  EXPECT_EQ(m.failed, 3 + kMaxErrorKinds + 2);
  EXPECT_EQ(m.completed, 0);
  ASSERT_EQ(static_cast<int>(m.errors.size()), kMaxErrorKinds);
  EXPECT_EQ(m.errors[0].message, "same reason");
  EXPECT_EQ(m.errors[0].count, 3);
  EXPECT_EQ(m.other_errors, 3);
  EXPECT_EQ(m.ttft_ms.count, 0);
  EXPECT_DOUBLE_EQ(m.request_throughput, 0.0);
}

TEST(ServeMetrics, PeakInFlightCountsOverlapsNotTouchingEnds) {
  EXPECT_EQ(peak_in_flight({done(0, 1, 1, 1, 1, 1), done(1, 2, 1, 1, 1, 1)}), 1);
  EXPECT_EQ(peak_in_flight({done(0, 3, 1, 1, 1, 1), done(1, 2, 1, 1, 1, 1),
                            done(1.5, 4, 1, 1, 1, 1), done(3.5, 5, 1, 1, 1, 1)}),
            3);
  EXPECT_EQ(peak_in_flight({}), 0);
}

TEST(ServeMetrics, CompletedRequestsNeedADuration) {
  EXPECT_THROW(compute_metrics({done(0, 1, 1, 1, 1, 1)}, 0.0, {}), Error);
}

}  // namespace
}  // namespace braid::bench::serve
