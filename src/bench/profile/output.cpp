// The output half of profile/profile.h: terminal tables, Markdown, JSON and the Chrome trace.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/core.h>

#include "bench/profile/profile.h"

namespace braid::bench {

namespace {

// A table rendered as aligned text or as Markdown; numeric columns are right-aligned.
struct TextTable {
  std::vector<std::string> titles;
  std::vector<bool> numeric;
  std::vector<std::vector<std::string>> rows;

  std::string text(const std::string& indent) const {
    std::vector<size_t> width(titles.size());
    for (size_t c = 0; c < titles.size(); ++c) {
      width[c] = titles[c].size();
      for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
    }
    auto line = [&](const std::vector<std::string>& v) {
      std::string s = indent;
      for (size_t c = 0; c < v.size(); ++c) {
        if (c > 0) s += "  ";
        s += numeric[c] ? fmt::format("{:>{}}", v[c], width[c]) : fmt::format("{:<{}}", v[c], width[c]);
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      return s + "\n";
    };
    std::string out = line(titles);
    std::vector<std::string> rule;
    for (size_t w : width) rule.push_back(std::string(w, '-'));
    out += line(rule);
    for (const auto& r : rows) out += line(r);
    return out;
  }

  std::string markdown() const {
    auto cell = [](const std::string& s) {
      std::string o;
      for (char ch : s) o += ch == '|' ? std::string("\\|") : std::string(1, ch);
      return o;
    };
    std::string out = "|";
    for (const auto& t : titles) {
      out += ' ';
      out += cell(t);
      out += " |";
    }
    out += "\n|";
    for (bool n : numeric) out += n ? " ---: |" : " --- |";
    out += "\n";
    for (const auto& r : rows) {
      out += "|";
      for (const auto& v : r) {
        out += ' ';
        out += cell(v);
        out += " |";
      }
      out += "\n";
    }
    return out;
  }
};

std::string us(double v) { return format_us(v); }
std::string pct(double share) { return fmt::format("{:.1f}%", 100.0 * share); }
std::string opt_pct(const std::optional<double>& v) { return v ? fmt::format("{:.1f}", *v) : "-"; }

std::string setup_line(const ProfileSetup& s) {
  if (!s.what.empty()) return s.what;
  return fmt::format("{}{}, {} layers: prefill of {} tokens, {} decode steps ({})", s.model,
                     s.random_weights ? " (random weights)" : "", s.layers, s.prompt_tokens, s.steps,
                     s.graph ? "CUDA graph replays" : "eager");
}

std::string records_line(const ProfileAnalysis& a, size_t activities) {
  return fmt::format("{} GPU activities recorded, {} not attributed to a phase, {} records dropped by CUPTI",
                     activities, a.unattributed, a.dropped_records);
}

// The phase's kernel table: the top rows, the rest summed into one.
TextTable kernel_table(const PhaseSummary& p, int top, bool full_names) {
  TextTable t{{"kernel", "calls", "total us", "avg us", "share", "elapsed us/step"},
              {false, true, true, true, true, true},
              {}};
  const size_t shown = std::min(p.kernels_table.size(), static_cast<size_t>(std::max(top, 0)));
  for (size_t i = 0; i < shown; ++i) {
    const KernelRow& r = p.kernels_table[i];
    t.rows.push_back({full_names ? r.demangled : r.short_name, fmt::format("{}", r.calls),
                      us(r.total_us), us(r.avg_us), pct(r.share), us(r.elapsed_us_per_step)});
  }
  if (shown < p.kernels_table.size()) {
    int calls = 0;
    double total = 0, share = 0, elapsed = 0;
    for (size_t i = shown; i < p.kernels_table.size(); ++i) {
      calls += p.kernels_table[i].calls;
      total += p.kernels_table[i].total_us;
      share += p.kernels_table[i].share;
      elapsed += p.kernels_table[i].elapsed_us_per_step;
    }
    t.rows.push_back({fmt::format("({} more)", p.kernels_table.size() - shown),
                      fmt::format("{}", calls), us(total), us(total / calls), pct(share),
                      us(elapsed)});
  }
  return t;
}

TextTable component_table(const PhaseSummary& p) {
  TextTable t{{"component", "us/step", "span us/step", "elapsed us/step", "kernels/step", "share"},
              {false, true, true, true, true, true},
              {}};
  for (const auto& c : p.components)
    t.rows.push_back({c.component, us(c.us_per_step), us(c.span_us_per_step),
                      us(c.elapsed_us_per_step), fmt::format("{:.1f}", c.kernels_per_step),
                      pct(c.share)});
  return t;
}

std::string phase_figures(const PhaseSummary& p) {
  const double min_wall = p.wall_us.empty() ? 0 : *std::min_element(p.wall_us.begin(), p.wall_us.end());
  const double max_wall = p.wall_us.empty() ? 0 : *std::max_element(p.wall_us.begin(), p.wall_us.end());
  std::string s = fmt::format("{} step{}, {:.1f} kernels per step ({} kernels, {} activities)\n",
                              p.steps, p.steps == 1 ? "" : "s", p.kernels_per_step, p.kernels,
                              p.activities);
  s += fmt::format("per step: GPU busy {} us, wall {} us (first kernel start to last end",
                   us(p.busy_us_per_step), us(p.wall_us_per_step));
  // Placed after the wall figures: what eager gaps are made of.
  const std::string launch_calls =
      p.launch_call_us_median > 0
          ? fmt::format("host launch calls: median {} us each, CUPTI's tracing included\n",
                        us(p.launch_call_us_median))
          : std::string();
  s += p.wall_us.size() > 1 ? fmt::format("; min {}, max {})\n", us(min_wall), us(max_wall)) : ")\n";
  const double per_step = std::max(1, p.steps);
  s += fmt::format(
      "launch gaps: {:.1f} per step, median {} us, p90 {} us, max {} us, total {} us per step "
      "({} of step time)\n",
      p.gaps.count / per_step, us(p.gaps.median_us), us(p.gaps.p90_us), us(p.gaps.max_us),
      us(p.gaps.total_us / per_step), pct(p.gaps.share_of_wall));
  return s + launch_calls;
}

// The kernels ncu profiled, from the phase tables (each once).
std::vector<const KernelRow*> ncu_rows(const ProfileAnalysis& a) {
  std::vector<const KernelRow*> out;
  std::map<std::string, bool> seen;
  for (const auto& p : a.phases)
    for (const auto& r : p.kernels_table)
      if (r.ncu && !seen[r.symbol]) {
        seen[r.symbol] = true;
        out.push_back(&r);
      }
  return out;
}

std::string opt_num(const std::optional<double>& v, double scale, int digits) {
  if (!v) return "-";
  if (std::isinf(*v)) return "inf";
  return fmt::format("{:.{}f}", *v / scale, digits);
}

TextTable ncu_table(const ProfileAnalysis& a, bool full_names) {
  TextTable t{{"kernel", "launches", "dur us", "SM %", "DRAM %", "mem %", "occupancy %", "L1 hit %",
               "L2 hit %", "MFLOP", "DRAM MB", "FLOP/B", "ridge", "class"},
              {false, true, true, true, true, true, true, true, true, true, true, true, true, false},
              {}};
  for (const KernelRow* r : ncu_rows(a)) {
    const NcuKernelMetrics& m = *r->ncu;
    t.rows.push_back({full_names ? r->demangled : r->short_name, fmt::format("{}", m.launches),
                      m.duration_us ? us(*m.duration_us) : "-", opt_pct(m.sm_pct),
                      opt_pct(m.dram_pct), opt_pct(m.memory_pct), opt_pct(m.occupancy_pct),
                      opt_pct(m.l1_hit_pct), opt_pct(m.l2_hit_pct), opt_num(m.flops(), 1e6, 2),
                      opt_num(m.dram_bytes, 1e6, 2), opt_num(m.intensity(), 1, 2),
                      m.ridge > 0 ? fmt::format("{:.1f}", m.ridge) : "-", kernel_bound_name(m.bound)});
  }
  return t;
}

std::string ncu_header(const NcuSummary& n, size_t kernels) {
  std::string s = fmt::format(
      "Nsight Compute ({} phase, {} kernel{}); ridge = compute peak / copy ceiling {:.0f} GB/s, "
      "compute peak = bf16 GEMM {:.0f} TFLOP/s for tensor-core kernels{}, ncu's FP32 peak "
      "otherwise; class by seed 004 (\"meaningfully\" = {:.0f} points of peak)\n",
      n.phase, kernels, kernels == 1 ? "" : "s", n.ceilings.copy_gbps, n.ceilings.gemm_tflops,
      n.ceilings.fp8_gemm_tflops > 0
          ? fmt::format(" (fp8 GEMM {:.0f} TFLOP/s for fp8 ones)", n.ceilings.fp8_gemm_tflops)
          : std::string(),
      kMeaningfulPctPoints);
  if (!n.missing_metrics.empty()) {
    s += "metrics ncu did not report (shown as -):";
    for (const auto& m : n.missing_metrics) s += " " + m;
    s += "\n";
  }
  return s;
}

nlohmann::json opt_json(const std::optional<double>& v) {
  if (!v || std::isnan(*v)) return nullptr;
  if (std::isinf(*v)) return "inf";
  return *v;
}

nlohmann::json ncu_json(const NcuKernelMetrics& m) {
  return {{"kernel", m.kernel},
          {"launches", m.launches},
          {"sm_throughput_pct", opt_json(m.sm_pct)},
          {"dram_throughput_pct", opt_json(m.dram_pct)},
          {"memory_throughput_pct", opt_json(m.memory_pct)},
          {"achieved_occupancy_pct", opt_json(m.occupancy_pct)},
          {"l1_hit_rate_pct", opt_json(m.l1_hit_pct)},
          {"l2_hit_rate_pct", opt_json(m.l2_hit_pct)},
          {"duration_us", opt_json(m.duration_us)},
          {"fp32_flops", opt_json(m.fp32_flops)},
          {"tensor_flops", opt_json(m.tensor_flops)},
          {"fp8_tensor_flops", opt_json(m.fp8_tensor_flops)},
          {"flops", opt_json(m.flops())},
          {"dram_bytes", opt_json(m.dram_bytes)},
          {"intensity_flop_per_byte", opt_json(m.intensity())},
          {"fp32_peak_flops_per_s", opt_json(m.fp32_peak_flops_per_s)},
          {"ridge_flop_per_byte", m.ridge > 0 ? nlohmann::json(m.ridge) : nlohmann::json(nullptr)},
          {"roofline", kernel_bound_name(m.bound)}};
}

nlohmann::json device_json(const DeviceInfo& d) {
  return {{"index", d.index},          {"name", d.name},
          {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
          {"sm_count", d.sm_count},    {"memory_bytes", d.memory_bytes},
          {"driver", cuda_version_string(d.driver_version)},
          {"runtime", cuda_version_string(d.runtime_version)}};
}

}  // namespace

std::string format_profile(const ProfileSetup& setup, const ProfileAnalysis& analysis,
                           const NcuSummary& ncu, int top_kernels) {
  std::string out = "profile: " + setup_line(setup) + "\n";
  if (setup.has_device) out += describe_device(setup.device);
  size_t activities = analysis.attribution.size();
  out += records_line(analysis, activities) + "\n";
  for (const auto& p : analysis.phases) {
    out += fmt::format("\n== {}: ", p.phase) + phase_figures(p) + "\n";
    out += kernel_table(p, top_kernels, false).text("  ") + "\n";
    out += component_table(p).text("  ");
    if (setup.graph && p.phase == "decode")
      out += "  (decode steps replayed from a CUDA graph: their kernels have no component; run "
             "without --graph for the per-component split)\n";
  }
  if (ncu.ran) {
    const auto rows = ncu_rows(analysis);
    out += "\n== " + ncu_header(ncu, rows.size()) + "\n";
    out += ncu_table(analysis, false).text("  ");
  }
  return out;
}

std::string profile_to_markdown(const ProfileSetup& setup, const ProfileAnalysis& analysis,
                                const NcuSummary& ncu) {
  std::string out = "# braidinfer profile\n\n";
  out += "- run: " + setup_line(setup) + "\n";
  if (setup.has_device)
    out += fmt::format("- device: {} (compute capability {}.{}, {} SMs), driver CUDA {}\n",
                       setup.device.name, setup.device.cc_major, setup.device.cc_minor,
                       setup.device.sm_count, cuda_version_string(setup.device.driver_version));
  out += fmt::format("- git {}, {}\n", git_commit(), utc_now());
  out += "- " + records_line(analysis, analysis.attribution.size()) + "\n";
  for (const auto& p : analysis.phases) {
    out += "\n## " + p.phase + "\n\n";
    std::string figures = phase_figures(p);
    for (size_t at = 0, next; at < figures.size(); at = next + 1) {
      next = figures.find('\n', at);
      out += "- " + figures.substr(at, next - at) + "\n";
    }
    out += "\n### Kernels\n\n" + kernel_table(p, std::numeric_limits<int>::max(), false).markdown();
    out += "\n### Components per step\n\n" + component_table(p).markdown();
    if (setup.graph && p.phase == "decode")
      out += "\nDecode steps were CUDA graph replays: their kernels have no component (eager "
             "steps give the split).\n";
  }
  if (ncu.ran) {
    const auto rows = ncu_rows(analysis);
    out += "\n## Nsight Compute\n\n" + ncu_header(ncu, rows.size()) + "\n";
    out += "Command: `" + ncu.command + "`\n\n" + ncu_table(analysis, false).markdown();
  }
  return out;
}

nlohmann::json profile_to_json(const ProfileSetup& setup, const ProfileAnalysis& analysis,
                               const NcuSummary& ncu) {
  nlohmann::json j;
  j["suite"] = "profile";
  j["git_commit"] = git_commit();
  j["date_utc"] = utc_now();
  j["setup"] = {{"model", setup.model},           {"random_weights", setup.random_weights},
                {"layers", setup.layers},         {"prompt_tokens", setup.prompt_tokens},
                {"decode_steps", setup.steps},    {"graph", setup.graph}};
  if (setup.has_device) j["device"] = device_json(setup.device);
  j["records"] = {{"activities", analysis.attribution.size()},
                  {"unattributed", analysis.unattributed},
                  {"dropped", analysis.dropped_records}};
  j["phases"] = nlohmann::json::array();
  for (const auto& p : analysis.phases) {
    nlohmann::json kernels = nlohmann::json::array();
    for (const auto& r : p.kernels_table) {
      nlohmann::json k = {{"name", r.demangled}, {"symbol", r.symbol},  {"short_name", r.short_name},
                          {"kind", activity_kind_name(r.kind)},         {"calls", r.calls},
                          {"total_us", r.total_us}, {"avg_us", r.avg_us}, {"share", r.share},
                          {"elapsed_us_per_step", r.elapsed_us_per_step}};
      if (r.ncu) k["ncu"] = ncu_json(*r.ncu);
      kernels.push_back(std::move(k));
    }
    nlohmann::json components = nlohmann::json::array();
    for (const auto& c : p.components)
      components.push_back({{"component", c.component}, {"us_per_step", c.us_per_step},
                            {"span_us_per_step", c.span_us_per_step},
                            {"elapsed_us_per_step", c.elapsed_us_per_step},
                            {"kernels_per_step", c.kernels_per_step}, {"share", c.share}});
    j["phases"].push_back({{"phase", p.phase},
                           {"steps", p.steps},
                           {"kernels", p.kernels},
                           {"activities", p.activities},
                           {"gpu_us", p.gpu_us},
                           {"kernels_per_step", p.kernels_per_step},
                           {"busy_us_per_step", p.busy_us_per_step},
                           {"wall_us_per_step", p.wall_us_per_step},
                           {"wall_us", p.wall_us},
                           {"launch_call_us_median", p.launch_call_us_median},
                           {"launch_gaps",
                            {{"count", p.gaps.count},
                             {"median_us", p.gaps.median_us},
                             {"p90_us", p.gaps.p90_us},
                             {"max_us", p.gaps.max_us},
                             {"total_us", p.gaps.total_us},
                             {"share_of_wall", p.gaps.share_of_wall}}},
                           {"kernels_table", std::move(kernels)},
                           {"components", std::move(components)}});
  }
  if (ncu.ran)
    j["ncu"] = {{"phase", ncu.phase},
                {"command", ncu.command},
                {"missing_metrics", ncu.missing_metrics},
                {"copy_gbps", ncu.ceilings.copy_gbps},
                {"gemm_tflops", ncu.ceilings.gemm_tflops},
                {"fp8_gemm_tflops", ncu.ceilings.fp8_gemm_tflops},
                {"meaningful_pct_points", kMeaningfulPctPoints}};
  return j;
}

// ---- Chrome trace ----

namespace {

constexpr int kGpuPid = 1, kHostPid = 2;
constexpr int kRangeTid = 1, kApiTid = 2;

const char* level_name(RangeLevel l) {
  switch (l) {
    case RangeLevel::phase: return "phase";
    case RangeLevel::layer: return "layer";
    case RangeLevel::component: return "component";
  }
  return "?";
}

nlohmann::json metadata(const char* what, int pid, int tid, const std::string& name) {
  nlohmann::json e = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

}  // namespace

nlohmann::json chrome_trace(const ProfileTrace& trace, const ProfileAnalysis& analysis) {
  uint64_t origin = std::numeric_limits<uint64_t>::max();
  for (const auto& a : trace.activities) origin = std::min(origin, a.start_ns);
  for (const auto& c : trace.api_calls) origin = std::min(origin, c.start_ns);
  for (const auto& r : trace.ranges) origin = std::min(origin, r.start_ns);
  auto ts = [origin](uint64_t t) { return (static_cast<double>(t - origin)) / 1e3; };
  auto dur = [](uint64_t a, uint64_t b) { return (static_cast<double>(b - a)) / 1e3; };

  struct Event {
    int pid, tid;
    uint64_t start, end;
    nlohmann::json json;
  };
  std::vector<Event> events;
  std::map<uint32_t, bool> streams;
  const auto api = launching_calls(trace);
  for (size_t i = 0; i < trace.activities.size(); ++i) {
    const GpuActivity& a = trace.activities[i];
    streams[a.stream] = true;
    const bool kernel = a.kind == ActivityKind::kernel;
    const std::string full = kernel ? demangle_symbol(a.name) : a.name;
    nlohmann::json args = {{"name", full}, {"correlation", a.correlation}, {"device", a.device}};
    if (kernel) {
      args["grid"] = {a.grid[0], a.grid[1], a.grid[2]};
      args["block"] = {a.block[0], a.block[1], a.block[2]};
      args["registers_per_thread"] = a.registers;
      args["shared_memory_bytes"] = a.static_shared + a.dynamic_shared;
      args["static_shared_bytes"] = a.static_shared;
      args["dynamic_shared_bytes"] = a.dynamic_shared;
    } else {
      args["bytes"] = a.bytes;
    }
    if (a.graph_id != 0) args["graph_id"] = a.graph_id;
    if (i < analysis.attribution.size() && !analysis.attribution[i].phase.empty()) {
      const Attribution& at = analysis.attribution[i];
      args["phase"] = at.phase;
      args["step"] = at.step;
      args["component"] = at.component;
      if (at.layer >= 0) args["layer"] = at.layer;
    }
    events.push_back({kGpuPid, static_cast<int>(a.stream), a.start_ns, a.end_ns,
                      {{"name", kernel ? short_kernel_name(full) : a.name},
                       {"cat", activity_kind_name(a.kind)},
                       {"ph", "X"},
                       {"pid", kGpuPid},
                       {"tid", a.stream},
                       {"ts", ts(a.start_ns)},
                       {"dur", dur(a.start_ns, a.end_ns)},
                       {"args", std::move(args)}}});
    // A flow arrow from the launching call to the activity (not for graph replays: one call
    // launches them all).
    const auto call = api.find(a.correlation);
    if (call != api.end() && a.graph_id == 0) {
      events.push_back({kHostPid, kApiTid, call->second->start_ns, call->second->start_ns,
                        {{"name", "launch"}, {"cat", "launch"}, {"ph", "s"}, {"id", a.correlation},
                         {"pid", kHostPid}, {"tid", kApiTid}, {"ts", ts(call->second->start_ns)}}});
      events.push_back({kGpuPid, static_cast<int>(a.stream), a.start_ns, a.start_ns,
                        {{"name", "launch"}, {"cat", "launch"}, {"ph", "f"}, {"bp", "e"},
                         {"id", a.correlation}, {"pid", kGpuPid}, {"tid", a.stream},
                         {"ts", ts(a.start_ns)}}});
    }
  }
  for (const auto& r : trace.ranges) {
    nlohmann::json args = {{"phase", r.phase}, {"step", r.step}};
    if (r.layer >= 0) args["layer"] = r.layer;
    events.push_back({kHostPid, kRangeTid, r.start_ns, r.end_ns,
                      {{"name", r.name}, {"cat", level_name(r.level)}, {"ph", "X"},
                       {"pid", kHostPid}, {"tid", kRangeTid}, {"ts", ts(r.start_ns)},
                       {"dur", dur(r.start_ns, r.end_ns)}, {"args", std::move(args)}}});
  }
  for (const auto& c : trace.api_calls)
    events.push_back({kHostPid, kApiTid, c.start_ns, c.end_ns,
                      {{"name", c.name}, {"cat", c.runtime ? "runtime" : "driver"}, {"ph", "X"},
                       {"pid", kHostPid}, {"tid", kApiTid}, {"ts", ts(c.start_ns)},
                       {"dur", dur(c.start_ns, c.end_ns)},
                       {"args", {{"correlation", c.correlation}, {"thread", c.thread}}}}});
  // Parents before children: by start, then the longer first.
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.start != b.start) return a.start < b.start;
    return a.end > b.end;
  });
  nlohmann::json out = nlohmann::json::array();
  out.push_back(metadata("process_name", kGpuPid, -1, "GPU"));
  out.push_back(metadata("process_name", kHostPid, -1, "host"));
  for (const auto& [stream, _] : streams)
    out.push_back(metadata("thread_name", kGpuPid, static_cast<int>(stream), fmt::format("stream {}", stream)));
  out.push_back(metadata("thread_name", kHostPid, kRangeTid, "ranges (phase / layer / component)"));
  out.push_back(metadata("thread_name", kHostPid, kApiTid, "CUDA API"));
  for (auto& e : events) out.push_back(std::move(e.json));
  return {{"traceEvents", std::move(out)}, {"displayTimeUnit", "ms"}};
}

}  // namespace braid::bench
