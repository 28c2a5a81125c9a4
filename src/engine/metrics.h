// The serving engine's counters and latency histograms, as /metrics reports them (Prometheus).
// Updated by the engine's step loop, read from any thread: one mutex guards everything.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace braid::engine {

struct Histogram {
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  std::vector<double> bounds;      // upper bounds, ascending (+Inf implied)
  std::vector<uint64_t> counts;    // per bucket, not cumulative; one more than bounds (+Inf)
  double sum = 0;
  uint64_t count = 0;
};

struct MetricsSnapshot {
  int running = 0, waiting = 0;
  int kv_pages_used = 0, kv_pages_total = 0;
  int64_t prefix_queried_tokens = 0, prefix_hit_tokens = 0;
  int64_t prompt_tokens = 0, generation_tokens = 0;
  int64_t requests_stop = 0, requests_length = 0, requests_abort = 0;
  int64_t preemptions = 0, steps = 0, graph_steps = 0;
  Histogram ttft, inter_token, e2e, queue;
  MetricsSnapshot();
};

class Metrics {
 public:
  // The gauges after a step; `ran`: the step ran the model (counted), `graph`: from a CUDA graph.
  void on_step(int running, int waiting, int used_pages, int total_pages, int64_t queried,
               int64_t hit, int64_t preemptions, bool ran, bool graph);
  void on_tokens(int64_t prompt, int64_t generated);
  void on_first_token(double ttft_s, double queue_s);
  void on_token_gap(double seconds);
  void on_finish(const char* reason, double e2e_s);
  MetricsSnapshot snapshot() const;

 private:
  mutable std::mutex mutex_;
  MetricsSnapshot m_;
};

// Prometheus text exposition format (version 0.0.4), names prefixed with `braidinfer:`.
std::string prometheus_text(const MetricsSnapshot& m, const std::string& model_name);

}  // namespace braid::engine
