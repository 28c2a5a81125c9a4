#include "bench/suites/router.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "bench/harness/report.h"
#include "braid/error.h"

namespace braid::bench {

namespace {

constexpr int kMaxExperts = 512;  // ops.h: kMoeMaxExperts, kMoeMaxTopK (not included: CPU-only
constexpr int kMaxTopK = 16;      // headers here, and the op re-checks them anyway)

std::string pct(double fraction) {
  // Seed 000 prints 0.00% for a 1-token call; keep two decimals so small shares stay visible.
  return fmt::format("{:.2f}%", 100.0 * fraction);
}

std::string error_string(double e) { return std::isnan(e) ? "NaN" : fmt::format("{:.1e}", e); }

}  // namespace

void validate_router_args(int experts, int k, const std::vector<int64_t>& tokens) {
  const char* cmd = "bench router";
  if (experts < 1 || experts > kMaxExperts)
    throw_arg_error(ErrorKind::invalid_argument, cmd, "--experts",
                    fmt::format("between 1 and {}", kMaxExperts), std::to_string(experts));
  const int max_k = std::min(experts, kMaxTopK);
  if (k < 1 || k > max_k)
    throw_arg_error(ErrorKind::invalid_argument, cmd, "--k",
                    fmt::format("between 1 and min({}, experts) = {}", kMaxTopK, max_k),
                    std::to_string(k));
  if (tokens.empty())
    throw_arg_error(ErrorKind::invalid_argument, cmd, "--tokens", "at least one token count",
                    "none");
  for (int64_t t : tokens)
    if (t < 1)
      throw_arg_error(ErrorKind::invalid_argument, cmd, "--tokens", "token counts >= 1",
                      std::to_string(t));
}

const char* router_op_name(const RouterShape& s) {
  return s.grouped() ? "moe_route_grouped" : "moe_route_topk_softmax";
}

double router_bytes(const RouterShape& s) {
  const double t = double(s.tokens);
  return t * double(s.experts) * double(s.logit_bytes) + t * double(s.k) * (4.0 + 4.0) +
         (s.grouped() ? double(s.experts) * double(s.bias_bytes) : 0.0);
}

double transfer_ns(double bytes, double gbps) { return gbps > 0 ? bytes / gbps : 0.0; }

bool RouterCheck::ok() const {
  // The NaN test is spelled out: NaN <= tolerance is false, but say why it fails.
  return id_mismatches == 0 && !std::isnan(max_abs_weight_error) &&
         max_abs_weight_error <= kRouterWeightTolerance;
}

RouterCheck check_router(const float* weights, const int32_t* ids, const float* ref_weights,
                         const int32_t* ref_ids, int64_t entries) {
  RouterCheck c;
  c.entries = entries;
  for (int64_t i = 0; i < entries; ++i) {
    c.id_mismatches += ids[i] != ref_ids[i];
    const double err = std::fabs(double(weights[i]) - double(ref_weights[i]));
    // A NaN sticks: std::max would drop it and hide an unwritten weight.
    if (std::isnan(err) || std::isnan(c.max_abs_weight_error))
      c.max_abs_weight_error = NAN;
    else
      c.max_abs_weight_error = std::max(c.max_abs_weight_error, err);
  }
  return c;
}

RouterFigures router_figures(const RouterLine& line) {
  RouterFigures f;
  f.bytes = router_bytes(line.shape);
  f.transfer_ns = transfer_ns(f.bytes, line.copy_gbps);
  const double us = line.stats.median_us;
  if (us > 0) {
    f.bw_utilisation = f.transfer_ns / (us * 1e3);
    f.overhead_share = line.baseline_us > 0 ? line.baseline_us / us : 0.0;
  }
  f.above_baseline_us = line.baseline_us > 0 ? us - line.baseline_us : 0.0;
  return f;
}

std::optional<TorchAnchor> torch_router_anchor(const RouterShape& s) {
  if (s.grouped() || s.experts != 128 || s.k != 8 || s.logit_bytes != 2) return std::nullopt;
  switch (s.tokens) {  // ANCHORS.md "MoE router: softmax + top-8 over 128 experts"
    case 1: return TorchAnchor{19.6, 17.7};
    case 256: return TorchAnchor{26.7, 24.4};
    case 1024: return TorchAnchor{31.0, 28.4};
    case 16384: return TorchAnchor{138, 135};
    default: return std::nullopt;
  }
}

std::string baseline_table(const std::vector<BaselineLine>& lines) {
  std::string out = fmt::format("{:<18} {:<13} {:<17} {:>10} {:>9} {:>9}\n", "kernel", "mode",
                                "timing", "median us", "min us", "max us");
  for (const BaselineLine& b : lines)
    out += fmt::format("{:<18} {:<13} {:<17} {:>10} {:>9} {:>9}\n", b.kernel, b.mode, b.timing,
                       format_us(b.stats.median_us), format_us(b.stats.min_us),
                       format_us(b.stats.max_us));
  return out;
}

std::string router_table(const std::vector<RouterLine>& lines) {
  std::string out = fmt::format(
      "{:>6} {:>10} {:>12} {:>10} {:>8} {:>8} {:>8} {:>9} {:>10} {:>9} {:>7} {:>8} {:>6}\n",
      "tokens", "data (B)", "transfer ns", "median us", "min us", "max us", "BW util",
      "overhead", "above base", "base us", "ids", "max |dw|", "check");
  for (const RouterLine& l : lines) {
    const RouterFigures f = router_figures(l);
    const bool base = l.baseline_us > 0;
    out += fmt::format(
        "{:>6} {:>10.0f} {:>12.3f} {:>10} {:>8} {:>8} {:>8} {:>9} {:>10} {:>9} {:>7} {:>8} "
        "{:>6}\n",
        l.shape.tokens, f.bytes, f.transfer_ns, format_us(l.stats.median_us),
        format_us(l.stats.min_us), format_us(l.stats.max_us), pct(f.bw_utilisation),
        base ? pct(f.overhead_share) : "-", base ? format_us(f.above_baseline_us) : "-",
        base ? format_us(l.baseline_us) : "-",
        l.check.id_mismatches == 0 ? "equal" : fmt::format("{} off", l.check.id_mismatches),
        error_string(l.check.max_abs_weight_error), l.check.ok() ? "ok" : "FAIL");
  }
  return out;
}

std::string router_ratios(const std::vector<RouterLine>& lines) {
  if (lines.empty() || lines.front().stats.median_us <= 0) return "";
  std::string data = "data ratio:", time = "time ratio:";
  const RouterLine& first = lines.front();
  for (size_t i = 0; i < lines.size(); ++i) {
    const char* sep = i == 0 ? " " : " : ";
    data += fmt::format("{}{:g}", sep, router_bytes(lines[i].shape) / router_bytes(first.shape));
    time += fmt::format("{}{:.2f}", sep, lines[i].stats.median_us / first.stats.median_us);
  }
  return data + "\n" + time + "\n";
}

std::string router_targets(const std::vector<RouterLine>& alone, double baseline_alone_us) {
  std::string out = fmt::format("target: <= {:g} us per call, timed alone (event pair around one call)\n",
                                kRouterTargetAloneUs);
  for (const RouterLine& l : alone) {
    const double us = l.stats.median_us;
    out += fmt::format("  tokens={:<6} {:>8} us  {}\n", l.shape.tokens, format_us(us),
                       us <= kRouterTargetAloneUs
                           ? "met"
                           : fmt::format("not met ({} us over)", format_us(us - kRouterTargetAloneUs)));
  }
  if (baseline_alone_us > kRouterTargetAloneUs)
    out += fmt::format(
        "  note: minimal_rw_kernel alone takes {} us here, above the target: timed this way,\n"
        "  no kernel launch meets it on this machine\n",
        format_us(baseline_alone_us));

  out += fmt::format(
      "target: >= {:g}x PyTorch softmax + topk: measured by `python -m braidinfer.compare router`"
      " (both in one process); this binary cannot run PyTorch.\n",
      kRouterTargetSpeedupVsTorch);
  bool header = false;
  for (const RouterLine& l : alone) {
    const auto a = torch_router_anchor(l.shape);
    if (!a) continue;
    if (!header) {
      out += "  PyTorch from ANCHORS.md (H100, another run; indicative only):\n";
      header = true;
    }
    out += fmt::format(
        "  tokens={:<6} PyTorch eager {:.1f} us, in a graph {:.1f} us; eager / {:g} = {} us; "
        "eager / ours alone = {:.1f}x\n",
        l.shape.tokens, a->eager_us, a->graph_us, kRouterTargetSpeedupVsTorch,
        format_us(a->eager_us / kRouterTargetSpeedupVsTorch), a->eager_us / l.stats.median_us);
  }
  if (!header) out += "  (ANCHORS.md has no PyTorch figure for these shapes)\n";

  if (!alone.empty() && alone.front().copy_gbps > 0 && baseline_alone_us > 0) {
    RouterShape one = alone.front().shape;
    one.tokens = 1;
    const double bytes = alone.front().copy_gbps * baseline_alone_us * 1e3;  // GB/s * ns
    out += fmt::format(
        "moving data as long as the fixed cost ({} us at {:.0f} GB/s) takes {} = {:.0f} tokens "
        "of {:g} B\n",
        format_us(baseline_alone_us), alone.front().copy_gbps, format_bytes(bytes),
        bytes / router_bytes(one), router_bytes(one));
  }
  return out;
}

nlohmann::json router_json(const std::vector<BaselineLine>& baselines,
                           const std::vector<RouterLine>& lines) {
  auto stats_json = [](const Stats& s) {
    return nlohmann::json{{"median_us", s.median_us}, {"min_us", s.min_us},
                          {"max_us", s.max_us},       {"mean_us", s.mean_us},
                          {"samples", s.count}};
  };
  auto number_or_null = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  nlohmann::json b = nlohmann::json::array();
  for (const BaselineLine& x : baselines)
    b.push_back({{"kernel", x.kernel}, {"mode", x.mode}, {"timing", x.timing},
                 {"stats", stats_json(x.stats)}});
  nlohmann::json r = nlohmann::json::array();
  for (const RouterLine& x : lines) {
    const RouterFigures f = router_figures(x);
    nlohmann::json j = {{"op", router_op_name(x.shape)},
                        {"tokens", x.shape.tokens},
                        {"experts", x.shape.experts},
                        {"k", x.shape.k},
                        {"logit_bytes", x.shape.logit_bytes},
                        {"mode", x.mode},
                        {"timing", x.timing},
                        {"stats", stats_json(x.stats)},
                        {"bytes", f.bytes},
                        {"copy_gbps", x.copy_gbps},
                        {"transfer_ns", f.transfer_ns},
                        {"bw_utilisation", f.bw_utilisation},
                        {"baseline_us", x.baseline_us},
                        {"overhead_share", f.overhead_share},
                        {"above_baseline_us", f.above_baseline_us},
                        {"check", {{"entries", x.check.entries},
                                   {"id_mismatches", x.check.id_mismatches},
                                   {"max_abs_weight_error", number_or_null(x.check.max_abs_weight_error)},
                                   {"weight_tolerance", kRouterWeightTolerance},
                                   {"ok", x.check.ok()}}}};
    if (x.shape.grouped()) {
      j["n_group"] = x.shape.n_group;
      j["topk_group"] = x.shape.topk_group;
      j["bias_bytes"] = x.shape.bias_bytes;
    } else {
      j["renormalize"] = true;
    }
    if (const auto a = torch_router_anchor(x.shape))
      j["anchors_torch_h100"] = {{"eager_us", a->eager_us}, {"graph_us", a->graph_us}};
    r.push_back(std::move(j));
  }
  return {{"baselines", b},
          {"lines", r},
          {"targets", {{"alone_us", kRouterTargetAloneUs},
                       {"speedup_vs_torch", kRouterTargetSpeedupVsTorch},
                       {"speedup_measured_by", "python -m braidinfer.compare router"}}}};
}

}  // namespace braid::bench
