#include "bench/suites/serve/serve_metrics.h"

#include <algorithm>
#include <utility>

#include <fmt/core.h>

#include "braid/error.h"

namespace braid::bench::serve {

int peak_in_flight(const std::vector<RequestResult>& results) {
  // +1 at each start, -1 at each end; at equal times ends go first (a request that ends as
  // another starts did not overlap it).
  std::vector<std::pair<double, int>> edges;
  edges.reserve(results.size() * 2);
  for (const auto& r : results) {
    edges.emplace_back(r.start_s, +1);
    edges.emplace_back(r.end_s, -1);
  }
  std::sort(edges.begin(), edges.end());
  int now = 0, peak = 0;
  for (const auto& e : edges) peak = std::max(peak, now += e.second);
  return peak;
}

ServeMetrics compute_metrics(const std::vector<RequestResult>& results, double duration_s,
                             const std::vector<double>& percentiles) {
  ServeMetrics m;
  m.duration_s = duration_s;
  m.percentiles = percentiles;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestResult& r : results) {
    if (!r.ok) {
      ++m.failed;
      auto it = std::find_if(m.errors.begin(), m.errors.end(),
                             [&](const ErrorCount& e) { return e.message == r.error; });
      if (it != m.errors.end()) ++it->count;
      else if (static_cast<int>(m.errors.size()) < kMaxErrorKinds) m.errors.push_back({r.error, 1});
      else ++m.other_errors;
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.input_tokens;
    m.total_output_tokens += r.output_tokens;
    m.requests_without_usage += !r.usage_reported;
    ttft.push_back(r.ttft_ms);
    e2e.push_back(r.e2e_ms);
    if (r.output_tokens > 1) tpot.push_back((r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1));
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
  }
  if (m.completed > 0 && !(duration_s > 0))
    throw Error(ErrorKind::invalid_argument,
                fmt::format("serve metrics: duration: expected seconds > 0, got {}", duration_s));
  if (duration_s > 0) {
    m.request_throughput = m.completed / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_token_throughput =
        static_cast<double>(m.total_input_tokens + m.total_output_tokens) / duration_s;
  }
  m.peak_in_flight = peak_in_flight(results);
  m.ttft_ms = describe(std::move(ttft), percentiles);
  m.tpot_ms = describe(std::move(tpot), percentiles);
  m.itl_ms = describe(std::move(itl), percentiles);
  m.e2e_ms = describe(std::move(e2e), percentiles);
  return m;
}

}  // namespace braid::bench::serve
