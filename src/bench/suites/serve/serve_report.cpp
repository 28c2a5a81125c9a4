#include "bench/suites/serve/serve_report.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include <fmt/core.h>

namespace braid::bench::serve {

namespace {

using json = nlohmann::json;

struct NamedMetric {
  const char* key;    // JSON and CSV
  const char* title;  // table
  const Distribution ServeMetrics::*field;
};

constexpr NamedMetric kMetrics[] = {
    {"ttft_ms", "TTFT", &ServeMetrics::ttft_ms},
    {"tpot_ms", "TPOT", &ServeMetrics::tpot_ms},
    {"itl_ms", "ITL", &ServeMetrics::itl_ms},
    {"e2e_ms", "E2E latency", &ServeMetrics::e2e_ms},
};

// A statistic of a distribution, in the column order of the latency table.
struct StatColumn {
  std::string title;
  std::function<double(const Distribution&)> value;
};

std::vector<StatColumn> stat_columns(const std::vector<double>& percentiles) {
  std::vector<StatColumn> cols = {
      {"mean", [](const Distribution& d) { return d.mean; }},
      {"median", [](const Distribution& d) { return d.median; }},
      {"std", [](const Distribution& d) { return d.std; }},
      {"min", [](const Distribution& d) { return d.min; }},
  };
  for (size_t i = 0; i < percentiles.size(); ++i)
    cols.push_back({percentile_name(percentiles[i]),
                    [i](const Distribution& d) { return d.percentiles[i]; }});
  cols.push_back({"max", [](const Distribution& d) { return d.max; }});
  return cols;
}

std::string rate_text(double rate) {
  return std::isinf(rate) ? "inf (all at once)" : fmt::format("{:g} req/s", rate);
}

std::string concurrency_text(const ServeParameters& p) {
  return p.max_concurrency > 0 ? std::to_string(p.max_concurrency) : "none";
}

std::string length_text(int len, double ratio) {
  return ratio > 0 ? fmt::format("{} (±{:g}%)", len, ratio * 100) : std::to_string(len);
}

// The run in one line, for the table's and the Markdown's head.
std::string describe_run(const ServeParameters& p) {
  return fmt::format(
      "{}{}, model '{}'; {} dataset, {} prompts of {} input / {} output tokens ({}); request "
      "rate {}{}, max concurrency {}; seed {}",
      p.base_url, p.endpoint, p.model, p.dataset, p.num_prompts,
      length_text(p.input_len, p.range_ratio), length_text(p.output_len, p.range_ratio),
      p.prompt_form, rate_text(p.request_rate),
      p.burstiness != 1 ? fmt::format(" (burstiness {:g})", p.burstiness) : "",
      concurrency_text(p), p.seed);
}

// (title, value) rows of the results table.
std::vector<std::pair<std::string, std::string>> result_rows(const ServeMetrics& m) {
  return {
      {"completed requests", std::to_string(m.completed)},
      {"failed requests", std::to_string(m.failed)},
      {"benchmark duration (s)", fmt::format("{:.3f}", m.duration_s)},
      {"total input tokens", std::to_string(m.total_input_tokens)},
      {"total output tokens", std::to_string(m.total_output_tokens)},
      {"request throughput (req/s)", fmt::format("{:.2f}", m.request_throughput)},
      {"output token throughput (tok/s)", fmt::format("{:.2f}", m.output_throughput)},
      {"total token throughput (tok/s)", fmt::format("{:.2f}", m.total_token_throughput)},
      {"peak requests in flight", std::to_string(m.peak_in_flight)},
  };
}

std::string ms_cell(const Distribution& d, double v) {
  return d.count > 0 ? fmt::format("{:.2f}", v) : "-";
}

// Rows of text cells with right-aligned numbers after the first column, as bench tables are.
std::string aligned(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& v) {
    std::string s;
    for (size_t c = 0; c < v.size(); ++c) {
      if (c > 0) s += "  ";
      s += c == 0 ? fmt::format("{:<{}}", v[c], width[c]) : fmt::format("{:>{}}", v[c], width[c]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = line(rows.front());
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  out += line(rule);
  for (size_t r = 1; r < rows.size(); ++r) out += line(rows[r]);
  return out;
}

std::vector<std::vector<std::string>> latency_rows(const ServeMetrics& m) {
  const auto cols = stat_columns(m.percentiles);
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"latency (ms)", "count"};
  for (const auto& c : cols) header.push_back(c.title);
  rows.push_back(header);
  for (const NamedMetric& nm : kMetrics) {
    const Distribution& d = m.*nm.field;
    std::vector<std::string> row = {nm.title, std::to_string(d.count)};
    for (const auto& c : cols) row.push_back(ms_cell(d, c.value(d)));
    rows.push_back(row);
  }
  return rows;
}

std::string failures_text(const ServeMetrics& m, const char* bullet) {
  std::string out;
  for (const ErrorCount& e : m.errors)
    out += fmt::format("{}{} x {}\n", bullet, e.count, e.message);
  if (m.other_errors > 0)
    out += fmt::format("{}{} more, with other reasons\n", bullet, m.other_errors);
  return out;
}

json distribution_json(const Distribution& d, const std::vector<double>& percentiles) {
  auto v = [&](double x) { return d.count > 0 ? json(x) : json(nullptr); };
  json j = {{"count", d.count}, {"mean", v(d.mean)}, {"median", v(d.median)},
            {"std", v(d.std)},  {"min", v(d.min)},   {"max", v(d.max)}};
  for (size_t i = 0; i < percentiles.size(); ++i)
    j[percentile_name(percentiles[i])] = v(d.percentiles[i]);
  return j;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

std::string csv_number(double v) { return fmt::format("{}", v); }

std::string md_cell(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '|') o += '\\';
    o += c == '\n' ? ' ' : c;
  }
  return o;
}

}  // namespace

std::string percentile_name(double p) { return fmt::format("p{:g}", p); }

json serve_json(const ServeReport& r) {
  const ServeParameters& p = r.params;
  const ServeMetrics& m = r.metrics;
  json metrics = json::object();
  for (const NamedMetric& nm : kMetrics)
    metrics[nm.key] = distribution_json(m.*nm.field, m.percentiles);
  json errors = json::array();
  for (const ErrorCount& e : m.errors)
    errors.push_back({{"message", e.message}, {"count", e.count}});
  return {
      {"schema", kServeSchema},
      {"suite", "serve"},
      {"git_commit", r.git_commit},
      {"date_utc", r.date_utc},
      {"device", nullptr},
      {"parameters",
       {{"base_url", p.base_url},
        {"endpoint", p.endpoint},
        {"model", p.model},
        {"dataset", p.dataset},
        {"prompt_form", p.prompt_form},
        {"num_prompts", p.num_prompts},
        {"input_len", p.input_len},
        {"output_len", p.output_len},
        {"range_ratio", p.range_ratio},
        {"vocab_size", p.vocab_size},
        {"tokenizer", p.tokenizer.empty() ? json(nullptr) : json(p.tokenizer)},
        {"request_rate", std::isinf(p.request_rate) ? json(nullptr) : json(p.request_rate)},
        {"burstiness", p.burstiness},
        {"max_concurrency", p.max_concurrency > 0 ? json(p.max_concurrency) : json(nullptr)},
        {"workers", p.workers},
        {"seed", p.seed},
        {"temperature", p.temperature},
        {"ignore_eos", p.ignore_eos},
        {"timeout_s", p.timeout_s}}},
      {"results",
       {{"completed", m.completed},
        {"failed", m.failed},
        {"duration_s", m.duration_s},
        {"total_input_tokens", m.total_input_tokens},
        {"total_output_tokens", m.total_output_tokens},
        {"request_throughput", m.request_throughput},
        {"output_throughput", m.output_throughput},
        {"total_token_throughput", m.total_token_throughput},
        {"requests_without_usage", m.requests_without_usage},
        {"peak_in_flight", m.peak_in_flight}}},
      {"metrics", metrics},
      {"errors", errors},
      {"other_errors", m.other_errors},
  };
}

std::string serve_table(const ServeReport& r) {
  const ServeMetrics& m = r.metrics;
  std::string out = fmt::format("serve: {}\ngit {}, {}\n\n", describe_run(r.params), r.git_commit,
                                r.date_utc);
  std::vector<std::vector<std::string>> results = {{"result", "value"}};
  for (const auto& [title, value] : result_rows(m)) results.push_back({title, value});
  out += aligned(results) + "\n" + aligned(latency_rows(m));
  if (m.requests_without_usage > 0)
    out += fmt::format("\n{} completed requests had no usage in their stream: their output tokens "
                       "are the content events counted\n",
                       m.requests_without_usage);
  if (m.failed > 0)
    out += fmt::format("\nfailed requests ({}):\n{}", m.failed, failures_text(m, "  "));
  return out;
}

std::string serve_csv(const ServeReport& r) {
  const ServeParameters& p = r.params;
  const ServeMetrics& m = r.metrics;
  const auto cols = stat_columns(m.percentiles);
  std::string out =
      "suite,git_commit,date_utc,base_url,endpoint,model,num_prompts,input_len,output_len,"
      "request_rate,max_concurrency,seed,completed,failed,duration_s,request_throughput,"
      "output_throughput,total_token_throughput,metric,count";
  for (const auto& c : cols) out += "," + c.title;
  out += "\n";
  for (const NamedMetric& nm : kMetrics) {
    const Distribution& d = m.*nm.field;
    std::vector<std::string> f = {
        "serve", csv_field(r.git_commit), csv_field(r.date_utc), csv_field(p.base_url),
        csv_field(p.endpoint), csv_field(p.model), std::to_string(p.num_prompts),
        std::to_string(p.input_len), std::to_string(p.output_len),
        std::isinf(p.request_rate) ? "inf" : csv_number(p.request_rate),
        p.max_concurrency > 0 ? std::to_string(p.max_concurrency) : "", std::to_string(p.seed),
        std::to_string(m.completed), std::to_string(m.failed), csv_number(m.duration_s),
        csv_number(m.request_throughput), csv_number(m.output_throughput),
        csv_number(m.total_token_throughput), nm.key, std::to_string(d.count)};
    for (const auto& c : cols) f.push_back(d.count > 0 ? csv_number(c.value(d)) : "");
    for (size_t i = 0; i < f.size(); ++i) out += (i > 0 ? "," : "") + f[i];
    out += "\n";
  }
  return out;
}

std::string serve_markdown(const ServeReport& r) {
  const ServeMetrics& m = r.metrics;
  auto table = [](const std::vector<std::vector<std::string>>& rows) {
    std::string out, rule = "|";
    for (size_t i = 0; i < rows.size(); ++i) {
      out += "|";
      for (const auto& cell : rows[i]) out += fmt::format(" {} |", md_cell(cell));
      out += "\n";
      if (i == 0) {
        for (size_t c = 0; c < rows[0].size(); ++c) rule += c == 0 ? "---|" : "---:|";
        out += rule + "\n";
      }
    }
    return out;
  };
  std::string out = "# braidinfer bench serve\n\n";
  out += fmt::format("- {}\n- git {}, {}\n\n", describe_run(r.params), r.git_commit, r.date_utc);
  std::vector<std::vector<std::string>> results = {{"result", "value"}};
  for (const auto& [title, value] : result_rows(m)) results.push_back({title, value});
  out += table(results) + "\n" + table(latency_rows(m));
  if (m.failed > 0)
    out += fmt::format("\nFailed requests ({}):\n\n", m.failed) + failures_text(m, "- ");
  return out;
}

}  // namespace braid::bench::serve
