#include "engine/metrics.h"

#include <fmt/format.h>

#include <cstring>

namespace braid::engine {

namespace {

// Latency buckets in seconds, close to vLLM's so dashboards read alike.
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
          10.0, 20.0, 40.0, 80.0};
}
std::vector<double> itl_buckets() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
          0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5};
}
std::vector<double> e2e_buckets() {
  return {0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
          120.0, 240.0, 480.0};
}

void counter(std::string& out, const char* name, const char* help, double v, const std::string& lbl) {
  fmt::format_to(std::back_inserter(out), "# HELP braidinfer:{} {}\n# TYPE braidinfer:{} counter\n"
                 "braidinfer:{}{{{}}} {}\n", name, help, name, name, lbl, v);
}

void gauge(std::string& out, const char* name, const char* help, double v, const std::string& lbl) {
  fmt::format_to(std::back_inserter(out), "# HELP braidinfer:{} {}\n# TYPE braidinfer:{} gauge\n"
                 "braidinfer:{}{{{}}} {}\n", name, help, name, name, lbl, v);
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h,
               const std::string& lbl) {
  fmt::format_to(std::back_inserter(out), "# HELP braidinfer:{} {}\n# TYPE braidinfer:{} histogram\n",
                 name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    fmt::format_to(std::back_inserter(out), "braidinfer:{}_bucket{{{},le=\"{}\"}} {}\n", name, lbl,
                   h.bounds[i], cumulative);
  }
  fmt::format_to(std::back_inserter(out),
                 "braidinfer:{}_bucket{{{},le=\"+Inf\"}} {}\nbraidinfer:{}_sum{{{}}} {}\n"
                 "braidinfer:{}_count{{{}}} {}\n",
                 name, lbl, h.count, name, lbl, h.sum, name, lbl, h.count);
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

MetricsSnapshot::MetricsSnapshot()
    : ttft(ttft_buckets()), inter_token(itl_buckets()), e2e(e2e_buckets()), queue(e2e_buckets()) {}

void Metrics::on_step(int running, int waiting, int used, int total, int64_t queried, int64_t hit,
                      int64_t preemptions, bool ran, bool graph) {
  std::lock_guard lock(mutex_);
  m_.running = running, m_.waiting = waiting;
  m_.kv_pages_used = used, m_.kv_pages_total = total;
  m_.prefix_queried_tokens = queried, m_.prefix_hit_tokens = hit;
  m_.preemptions = preemptions;
  if (ran) ++m_.steps;
  if (ran && graph) ++m_.graph_steps;
}

void Metrics::on_tokens(int64_t prompt, int64_t generated) {
  std::lock_guard lock(mutex_);
  m_.prompt_tokens += prompt;
  m_.generation_tokens += generated;
}

void Metrics::on_first_token(double ttft_s, double queue_s) {
  std::lock_guard lock(mutex_);
  m_.ttft.observe(ttft_s);
  m_.queue.observe(queue_s);
}

void Metrics::on_token_gap(double seconds) {
  std::lock_guard lock(mutex_);
  m_.inter_token.observe(seconds);
}

void Metrics::on_finish(const char* reason, double e2e_s) {
  std::lock_guard lock(mutex_);
  if (std::strcmp(reason, "stop") == 0) ++m_.requests_stop;
  else if (std::strcmp(reason, "length") == 0) ++m_.requests_length;
  else ++m_.requests_abort;
  m_.e2e.observe(e2e_s);
}

MetricsSnapshot Metrics::snapshot() const {
  std::lock_guard lock(mutex_);
  return m_;
}

std::string prometheus_text(const MetricsSnapshot& m, const std::string& model_name) {
  std::string out;
  std::string lbl = "model_name=\"";
  for (char c : model_name) {  // label values escape backslash, quote and newline
    if (c == '\\' || c == '"') lbl += '\\';
    lbl += c == '\n' ? 'n' : c;
  }
  lbl += '"';
  gauge(out, "num_requests_running", "Sequences in the running batch.", m.running, lbl);
  gauge(out, "num_requests_waiting", "Sequences waiting to be scheduled.", m.waiting, lbl);
  gauge(out, "kv_cache_usage_perc", "Fraction of KV-cache pages held by sequences (0..1).",
        m.kv_pages_total ? double(m.kv_pages_used) / m.kv_pages_total : 0.0, lbl);
  gauge(out, "kv_cache_pages_used", "KV-cache pages held by sequences.", m.kv_pages_used, lbl);
  gauge(out, "kv_cache_pages_total", "KV-cache pages in the pool.", m.kv_pages_total, lbl);
  counter(out, "prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          double(m.prefix_queried_tokens), lbl);
  counter(out, "prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          double(m.prefix_hit_tokens), lbl);
  gauge(out, "prefix_cache_hit_rate", "Prefix-cache hits over queries, in tokens (0..1).",
        m.prefix_queried_tokens ? double(m.prefix_hit_tokens) / m.prefix_queried_tokens : 0.0, lbl);
  counter(out, "prompt_tokens_total", "Prompt tokens of admitted requests.", double(m.prompt_tokens), lbl);
  counter(out, "generation_tokens_total", "Generated tokens.", double(m.generation_tokens), lbl);
  out += "# HELP braidinfer:request_success_total Finished requests by finish reason.\n"
         "# TYPE braidinfer:request_success_total counter\n";
  fmt::format_to(std::back_inserter(out),
                 "braidinfer:request_success_total{{{},finished_reason=\"stop\"}} {}\n"
                 "braidinfer:request_success_total{{{},finished_reason=\"length\"}} {}\n"
                 "braidinfer:request_success_total{{{},finished_reason=\"abort\"}} {}\n",
                 lbl, m.requests_stop, lbl, m.requests_length, lbl, m.requests_abort);
  counter(out, "num_preemptions_total", "Sequences preempted (pages given back, recomputed later).",
          double(m.preemptions), lbl);
  counter(out, "engine_steps_total", "Engine steps run.", double(m.steps), lbl);
  counter(out, "engine_graph_steps_total", "Engine steps replayed from a CUDA graph.",
          double(m.graph_steps), lbl);
  histogram(out, "time_to_first_token_seconds", "Time to first token.", m.ttft, lbl);
  histogram(out, "inter_token_latency_seconds", "Time between consecutive tokens of a sequence.",
            m.inter_token, lbl);
  histogram(out, "e2e_request_latency_seconds", "Arrival to finish.", m.e2e, lbl);
  histogram(out, "request_queue_time_seconds", "Arrival to first scheduling.", m.queue, lbl);
  return out;
}

}  // namespace braid::engine
