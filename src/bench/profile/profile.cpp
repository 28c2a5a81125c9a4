// The analysis half of profile/profile.h: host ranges from probe marks, kernel names, attribution of
// activities to ranges, and the per-phase tables. The output forms are in profile_output.cpp.
#include "bench/profile/profile.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/core.h>

#include "braid/error.h"

namespace braid::bench {

const char* activity_kind_name(ActivityKind kind) {
  switch (kind) {
    case ActivityKind::kernel: return "kernel";
    case ActivityKind::memcpy: return "memcpy";
    case ActivityKind::memset: return "memset";
  }
  return "?";
}

// ---- ranges ----

void add_step_ranges(std::vector<HostRange>& out, const std::string& phase, int step,
                     uint64_t phase_start_ns, uint64_t forward_start_ns,
                     const std::vector<ComponentMark>& marks, uint64_t phase_end_ns) {
  uint64_t previous = forward_start_ns;
  bool ordered = phase_start_ns <= forward_start_ns;
  for (const auto& m : marks) {
    ordered = ordered && previous <= m.at_ns;
    previous = m.at_ns;
  }
  if (!ordered || previous > phase_end_ns)
    throw Error(ErrorKind::invalid_argument,
                fmt::format("profile: the host times of {} step {} are out of order", phase, step));
  const std::string phase_name = phase == "decode" ? fmt::format("decode step {}", step) : phase;
  out.push_back({RangeLevel::phase, phase, step, -1, phase_name, phase_start_ns, phase_end_ns});
  // Layers first (they enclose their components), each from its first component's start to its
  // last component's end.
  std::map<int, std::pair<uint64_t, uint64_t>> layers;
  uint64_t start = forward_start_ns;
  for (const auto& m : marks) {
    if (m.layer >= 0) {
      auto [it, fresh] = layers.try_emplace(m.layer, start, m.at_ns);
      if (!fresh) it->second.second = m.at_ns;
    }
    start = m.at_ns;
  }
  for (const auto& [layer, span] : layers)
    out.push_back({RangeLevel::layer, phase, step, layer, fmt::format("layer {}", layer),
                   span.first, span.second});
  start = forward_start_ns;
  for (const auto& m : marks) {
    out.push_back({RangeLevel::component, phase, step, m.layer, m.component, start, m.at_ns});
    start = m.at_ns;
  }
}

std::unordered_map<uint32_t, const ApiCall*> launching_calls(const ProfileTrace& trace) {
  std::unordered_map<uint32_t, const ApiCall*> api;
  for (const auto& c : trace.api_calls) {
    auto [it, fresh] = api.try_emplace(c.correlation, &c);
    if (!fresh && c.runtime && !it->second->runtime) it->second = &c;
  }
  return api;
}

void drop_records_before(ProfileTrace& trace, uint64_t t0_ns) {
  std::erase_if(trace.api_calls, [t0_ns](const ApiCall& c) { return c.start_ns < t0_ns; });
  std::erase_if(trace.activities, [t0_ns](const GpuActivity& a) { return a.start_ns < t0_ns; });
}

// ---- kernel names ----

std::string demangle_symbol(const std::string& symbol) {
  if (symbol.rfind("_Z", 0) != 0) return symbol;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : symbol;
}

namespace {

void erase_all(std::string& s, const std::string& what) {
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at)) s.erase(at, what.size());
}

// Depth of brackets ((), <>, []) before each character of s.
std::vector<int> bracket_depths(const std::string& s) {
  std::vector<int> depth(s.size());
  int d = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == ')' || c == '>' || c == ']') d = std::max(0, d - 1);
    depth[i] = d;
    if (c == '(' || c == '<' || c == '[') ++d;
  }
  return depth;
}

}  // namespace

std::string short_kernel_name(const std::string& demangled, size_t max_chars) {
  std::string s = demangled;
  erase_all(s, "(anonymous namespace)::");
  // The parameter list: the last '(' at depth 0 when the name ends with its ')'.
  if (!s.empty() && s.back() == ')') {
    const auto depth = bracket_depths(s);
    for (size_t i = s.size(); i-- > 0;) {
      if (s[i] == '(' && depth[i] == 0) {
        if (i > 0) s.erase(i);
        break;
      }
    }
  }
  // The return type ("void ", "unsigned int "): whatever precedes the last space at depth 0.
  auto depth = bracket_depths(s);
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == ' ' && depth[i] == 0) {
      s.erase(0, i + 1);
      break;
    }
  }
  // Namespaces and enclosing classes, everywhere: "braid::cuda::Prologue" -> "Prologue".
  for (size_t at = s.find("::"); at != std::string::npos; at = s.find("::")) {
    size_t begin = at;
    while (begin > 0 && (std::isalnum(static_cast<unsigned char>(s[begin - 1])) || s[begin - 1] == '_'))
      --begin;
    s.erase(begin, at + 2 - begin);
  }
  if (s.size() <= max_chars) return s;
  const size_t open = s.find('<');
  const std::string dots = "...";
  if (open != std::string::npos && open + 1 + dots.size() + 1 <= max_chars) {
    // name<first template arguments...>
    return s.substr(0, max_chars - dots.size() - 1) + dots + ">";
  }
  return s.substr(0, max_chars > dots.size() ? max_chars - dots.size() : 0) + dots;
}

// ---- analysis ----

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(values.size()))) - 1;
  return values[i];
}

namespace {

// The range among `sorted` (by start, not overlapping) that holds t: start <= t < end.
const HostRange* containing(const std::vector<const HostRange*>& sorted, uint64_t t) {
  auto it = std::upper_bound(sorted.begin(), sorted.end(), t,
                             [](uint64_t v, const HostRange* r) { return v < r->start_ns; });
  if (it == sorted.begin()) return nullptr;
  const HostRange* r = *(it - 1);
  return t < r->end_ns ? r : nullptr;
}

std::vector<const HostRange*> ranges_of(const ProfileTrace& trace, RangeLevel level) {
  std::vector<const HostRange*> out;
  for (const auto& r : trace.ranges)
    if (r.level == level) out.push_back(&r);
  std::stable_sort(out.begin(), out.end(),
                   [](const HostRange* a, const HostRange* b) { return a->start_ns < b->start_ns; });
  return out;
}

std::vector<Attribution> attribute(const ProfileTrace& trace, int& unattributed) {
  const auto api = launching_calls(trace);
  const auto phases = ranges_of(trace, RangeLevel::phase);
  const auto components = ranges_of(trace, RangeLevel::component);
  std::vector<Attribution> out;
  out.reserve(trace.activities.size());
  unattributed = 0;
  for (const auto& a : trace.activities) {
    Attribution at;
    const auto call = api.find(a.correlation);
    const HostRange* phase = call == api.end() ? nullptr : containing(phases, call->second->start_ns);
    if (!phase) {
      ++unattributed;
      out.push_back(at);
      continue;
    }
    at.phase = phase->phase;
    at.step = phase->step;
    const HostRange* c = containing(components, call->second->start_ns);
    if (c && c->phase == at.phase && c->step == at.step) {
      at.component = c->name;
      at.layer = c->layer;
    } else {
      at.component = a.graph_id != 0 ? kGraphComponent : kOutsideComponent;
    }
    out.push_back(at);
  }
  return out;
}

// Busy time (union of intervals), wall time and the idle gaps per stream of one step's kernels.
// Copies and memsets stay out: a graph replay's input copy would otherwise stretch the step by
// the graph launch's latency (which CUPTI's tracing lengthens).
struct StepFigures {
  double busy_us = 0, wall_us = 0;
  std::vector<double> gaps_us;
};

StepFigures step_figures(std::vector<const GpuActivity*> acts) {
  StepFigures f;
  if (acts.empty()) return f;
  std::sort(acts.begin(), acts.end(), [](const GpuActivity* a, const GpuActivity* b) {
    return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns < b->end_ns;
  });
  uint64_t first = acts.front()->start_ns, last = 0;
  uint64_t busy = 0, cover_start = acts.front()->start_ns, cover_end = acts.front()->start_ns;
  std::map<uint32_t, uint64_t> stream_end;  // latest end seen per stream
  for (const GpuActivity* a : acts) {
    last = std::max(last, a->end_ns);
    if (a->start_ns > cover_end) {
      busy += cover_end - cover_start;
      cover_start = a->start_ns;
    }
    cover_end = std::max(cover_end, a->end_ns);
    auto [it, fresh] = stream_end.try_emplace(a->stream, a->end_ns);
    if (!fresh) {
      if (a->start_ns > it->second) f.gaps_us.push_back((a->start_ns - it->second) / 1e3);
      it->second = std::max(it->second, a->end_ns);
    }
  }
  busy += cover_end - cover_start;
  f.busy_us = busy / 1e3;
  f.wall_us = (last - first) / 1e3;
  return f;
}

PhaseSummary summarize_phase(const std::string& phase, const ProfileTrace& trace,
                             const std::vector<Attribution>& attribution) {
  PhaseSummary s;
  s.phase = phase;
  for (const auto& r : trace.ranges)
    if (r.level == RangeLevel::phase && r.phase == phase) ++s.steps;
  // Component order: as forward() marks them in the phase's first step, then the rest.
  std::vector<std::string> component_order;
  std::set<std::string> seen;
  for (const auto& r : trace.ranges)
    if (r.level == RangeLevel::component && r.phase == phase && seen.insert(r.name).second)
      component_order.push_back(r.name);

  const auto api = launching_calls(trace);
  std::vector<double> launch_calls;
  std::map<std::pair<int, std::string>, size_t> row_of;  // (kind, symbol) -> kernels_table index
  std::map<std::string, ComponentRow> components;
  std::map<int, std::vector<const GpuActivity*>> steps;
  // (step, layer, component) -> first start, last end of its activities
  std::map<std::tuple<int, int, std::string>, std::pair<uint64_t, uint64_t>> spans;
  for (size_t i = 0; i < trace.activities.size(); ++i) {
    if (attribution[i].phase != phase) continue;
    const GpuActivity& a = trace.activities[i];
    const double us = a.duration_us();
    ++s.activities;
    if (a.kind == ActivityKind::kernel) ++s.kernels;
    s.gpu_us += us;
    auto [it, fresh] = row_of.try_emplace({static_cast<int>(a.kind), a.name}, s.kernels_table.size());
    if (fresh) {
      KernelRow row;
      row.symbol = a.name;
      row.demangled = a.kind == ActivityKind::kernel ? demangle_symbol(a.name) : a.name;
      row.short_name = a.kind == ActivityKind::kernel ? short_kernel_name(row.demangled) : a.name;
      row.kind = a.kind;
      s.kernels_table.push_back(std::move(row));
    }
    KernelRow& row = s.kernels_table[it->second];
    ++row.calls;
    row.total_us += us;
    const std::string& comp = attribution[i].component;
    if (seen.insert(comp).second) component_order.push_back(comp);
    ComponentRow& c = components[comp];
    c.us_per_step += us;
    c.kernels_per_step += 1;
    const auto key = std::make_tuple(attribution[i].step, attribution[i].layer, comp);
    auto [span, first] = spans.try_emplace(key, a.start_ns, a.end_ns);
    if (!first) {
      span->second.first = std::min(span->second.first, a.start_ns);
      span->second.second = std::max(span->second.second, a.end_ns);
    }
    if (a.kind == ActivityKind::kernel) steps[attribution[i].step].push_back(&a);
    const auto call = api.find(a.correlation);
    if (call != api.end() && a.graph_id == 0)
      launch_calls.push_back((call->second->end_ns - call->second->start_ns) / 1e3);
  }
  s.launch_call_us_median = percentile(launch_calls, 50);
  const double n_steps = std::max(1, s.steps);
  // Each kernel's elapsed time: its step's kernels (as the step's wall time counts them) in the
  // order they ended, each from the end of the one before.
  for (auto& [step, acts] : steps) {
    std::vector<const GpuActivity*> by_end = acts;
    std::sort(by_end.begin(), by_end.end(),
              [](const GpuActivity* a, const GpuActivity* b) { return a->end_ns < b->end_ns; });
    uint64_t previous_end = by_end.front()->start_ns;
    for (const GpuActivity* a : by_end) {
      s.kernels_table[row_of.at({static_cast<int>(a->kind), a->name})].elapsed_us_per_step +=
          (a->end_ns - previous_end) / 1e3;
      previous_end = a->end_ns;
    }
  }
  for (auto& row : s.kernels_table) {
    row.elapsed_us_per_step /= n_steps;
    row.avg_us = row.total_us / row.calls;
    row.share = s.gpu_us > 0 ? row.total_us / s.gpu_us : 0;
  }
  std::stable_sort(s.kernels_table.begin(), s.kernels_table.end(),
                   [](const KernelRow& a, const KernelRow& b) { return a.total_us > b.total_us; });
  for (const auto& [key, span] : spans)
    components[std::get<2>(key)].span_us_per_step += (span.second - span.first) / 1e3;
  {
    // Per step, the component instances in the order they finished.
    std::map<int, std::vector<std::pair<uint64_t, const std::tuple<int, int, std::string>*>>> ends;
    for (const auto& [key, span] : spans) ends[std::get<0>(key)].push_back({span.second, &key});
    for (auto& [step, list] : ends) {
      std::sort(list.begin(), list.end());
      uint64_t previous_end = spans.at(*list.front().second).first;
      for (const auto& [end, key] : list) {
        components[std::get<2>(*key)].elapsed_us_per_step += (end - previous_end) / 1e3;
        previous_end = end;
      }
    }
  }
  for (const auto& name : component_order) {
    ComponentRow c = components[name];  // zero for a component that launched nothing
    c.component = name;
    c.share = s.gpu_us > 0 ? c.us_per_step / s.gpu_us : 0;
    c.us_per_step /= n_steps;
    c.span_us_per_step /= n_steps;
    c.elapsed_us_per_step /= n_steps;
    c.kernels_per_step /= n_steps;
    s.components.push_back(std::move(c));
  }
  std::vector<double> gaps;
  double busy = 0, wall = 0;
  for (auto& [step, acts] : steps) {
    StepFigures f = step_figures(acts);
    busy += f.busy_us;
    wall += f.wall_us;
    s.wall_us.push_back(f.wall_us);
    gaps.insert(gaps.end(), f.gaps_us.begin(), f.gaps_us.end());
  }
  s.kernels_per_step = s.kernels / n_steps;
  s.busy_us_per_step = busy / n_steps;
  s.wall_us_per_step = s.wall_us.empty() ? 0 : wall / static_cast<double>(s.wall_us.size());
  s.gaps.count = static_cast<int>(gaps.size());
  s.gaps.median_us = percentile(gaps, 50);
  s.gaps.p90_us = percentile(gaps, 90);
  s.gaps.max_us = gaps.empty() ? 0 : *std::max_element(gaps.begin(), gaps.end());
  for (double g : gaps) s.gaps.total_us += g;
  s.gaps.share_of_wall = wall > 0 ? s.gaps.total_us / wall : 0;
  return s;
}

}  // namespace

ProfileAnalysis analyze_profile(const ProfileTrace& trace) {
  for (const auto& a : trace.activities)
    if (a.end_ns < a.start_ns)
      throw Error(ErrorKind::invalid_argument,
                  fmt::format("profile: activity '{}' (correlation {}) ends before it starts",
                              a.name, a.correlation));
  ProfileAnalysis out;
  out.dropped_records = trace.dropped_records;
  out.attribution = attribute(trace, out.unattributed);
  for (const char* phase : {"prefill", "decode"}) {
    PhaseSummary s = summarize_phase(phase, trace, out.attribution);
    if (s.activities > 0) out.phases.push_back(std::move(s));
  }
  return out;
}

void fold_ncu_results(ProfileAnalysis& analysis, const std::vector<NcuKernelMetrics>& ncu) {
  std::map<std::string, const NcuKernelMetrics*> by_name;
  for (const auto& k : ncu) by_name[k.kernel] = &k;
  for (auto& phase : analysis.phases)
    for (auto& row : phase.kernels_table) {
      // ncu prints the mangled name with --print-kernel-base mangled; the demangled one otherwise.
      auto it = by_name.find(row.symbol);
      if (it == by_name.end()) it = by_name.find(row.demangled);
      if (it != by_name.end()) row.ncu = *it->second;
    }
}

}  // namespace braid::bench
