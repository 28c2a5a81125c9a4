#include "bench/suites/moe.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include <fmt/format.h>

#include "braid/error.h"

namespace braid::bench {

namespace {

constexpr double kBf16 = 2, kI32 = 4, kF32 = 4;

[[noreturn]] void bad_option(const char* option, const std::string& expected,
                             const std::string& given) {
  throw_arg_error(ErrorKind::invalid_argument, "bench moe", option, expected, given);
}

// Seed 001's table writes its token counts as batch x sequence length.
std::string seed001_label(int64_t tokens) {
  if (tokens == 4 * 512) return "4x512";
  if (tokens == 16 * 2048) return "16x2048";
  if (tokens == 32 * 2048) return "32x2048";
  return fmt::format("T={}", tokens);
}

const ResultRow* find_row(const MoeCase& c, MoeStep s) {
  for (size_t i = 0; i < c.steps.size() && i < c.rows.size(); ++i)
    if (c.steps[i] == s) return &c.rows[i];
  return nullptr;
}

double median_us(const MoeCase& c, MoeStep s) {
  const ResultRow* r = find_row(c, s);
  return r ? r->stats.median_us : 0.0;
}

std::string dash_or(double v, const char* fmt_spec) {
  return v > 0 ? fmt::format(fmt::runtime(fmt_spec), v) : std::string("-");
}

nlohmann::json error_json(const ErrorSummary& e) {
  return {{"elements", e.elements},       {"max_abs_error", e.max_abs},
          {"mean_abs_error", e.mean_abs}, {"max_rel_error", e.max_rel},
          {"rel_l2_error", e.rel_l2},     {"bf16_rounding_max_abs", e.rounding_max_abs}};
}

}  // namespace

MoeModel seed001_model() { return {"seed001", 4096, 11008, 32, 2, true}; }
MoeModel qwen3_model() { return {"qwen3", 2048, 768, 128, 8, true}; }

std::vector<MoeShape> moe_shapes(const std::string& which, const std::vector<int64_t>& tokens) {
  std::vector<MoeModel> models;
  if (which == "seed001" || which == "all") models.push_back(seed001_model());
  if (which == "qwen3" || which == "all") models.push_back(qwen3_model());
  if (models.empty()) bad_option("--shape", "seed001, qwen3 or all", "'" + which + "'");
  for (int64_t t : tokens)
    if (t < 1) bad_option("--tokens", "token counts >= 1", std::to_string(t));

  std::vector<MoeShape> shapes;
  for (const MoeModel& m : models) {
    std::vector<int64_t> counts = tokens;
    if (counts.empty())
      counts = m.name == "seed001" ? std::vector<int64_t>{4 * 512, 16 * 2048, 32 * 2048}
                                   : std::vector<int64_t>{1, 4, 16, 512, 4096};
    for (int64_t t : counts)
      shapes.push_back({m, t, m.name == "seed001" ? seed001_label(t) : fmt::format("T={}", t)});
  }
  return shapes;
}

void validate_moe_samples(int samples) {
  if (samples < 0) bad_option("--samples", "at least 0", std::to_string(samples));
}

std::optional<MoeAnchor> moe_anchor(const MoeShape& s) {
  // ANCHORS.md, "MoE layer": H100, torch._grouped_mm pipeline (Qwen3: inside a CUDA graph).
  if (s.model.name == "seed001") {
    if (s.tokens == 4 * 512) return MoeAnchor{5.20, 7.08, 3.8};
    if (s.tokens == 16 * 2048) return MoeAnchor{34.3, 36.4, 22.0};
    if (s.tokens == 32 * 2048) return MoeAnchor{68.0, 69.3, 38.0};
  } else if (s.model.name == "qwen3") {
    if (s.tokens == 1) return MoeAnchor{0.128, 0, 0};
    if (s.tokens == 4) return MoeAnchor{0.211, 0, 0};
    if (s.tokens == 16) return MoeAnchor{0.408, 0, 0};
    if (s.tokens == 512) return MoeAnchor{0.695, 0, 0};
  }
  return std::nullopt;
}

std::vector<float> moe_skew_bias(int experts, int k) {
  std::vector<float> bias(static_cast<size_t>(std::max(experts, 0)), 0.0f);
  const int hot = std::min(experts, std::max(k, experts / 16));
  for (int e = 0; e < hot; ++e) bias[e] = kMoeSkewBias;
  return bias;
}

const char* moe_step_name(MoeStep s) {
  switch (s) {
    case MoeStep::router_gemm: return "moe_router_gemm";
    case MoeStep::route: return "moe_route_topk_softmax";
    case MoeStep::permute: return "moe_permute";
    case MoeStep::gather: return "moe_gather";
    case MoeStep::gate_up: return "moe_grouped_gemm_swiglu";
    case MoeStep::down: return "moe_grouped_gemm";
    case MoeStep::combine: return "moe_combine";
    case MoeStep::experts: return "moe_experts";
    case MoeStep::layer: return "moe_layer";
    case MoeStep::layer_graph: return "moe_layer";
    case MoeStep::dense_gate_up: return "dense_cublas_gate_up";
    case MoeStep::dense_down: return "dense_cublas_down";
  }
  return "?";
}

std::vector<MoeStep> moe_components(bool decode) {
  if (decode) return {MoeStep::router_gemm, MoeStep::route, MoeStep::experts};
  return {MoeStep::router_gemm, MoeStep::route, MoeStep::permute, MoeStep::gather,
          MoeStep::gate_up,     MoeStep::down,  MoeStep::combine};
}

double moe_expert_flops(const MoeModel& m, int64_t pairs) {
  const double p = double(pairs), H = double(m.hidden), I = double(m.inter);
  return 2 * p * H * 2 * I + 2 * p * I * H;
}

MoeCost moe_step_cost(MoeStep s, const MoeShape& shape, const MoeRouting& r) {
  const MoeModel& m = shape.model;
  const double T = double(shape.tokens), H = double(m.hidden), I = double(m.inter);
  const double E = double(m.experts), slots = T * m.k, P = double(r.pairs);
  const double active = r.active_experts;
  switch (s) {
    case MoeStep::router_gemm: return {2 * T * E * H, kBf16 * (T * H + E * H + T * E)};
    case MoeStep::route:  // logits in; f32 weights and i32 ids out
      return {0, kBf16 * T * E + (kF32 + kI32) * slots};
    case MoeStep::permute:  // ids in; offsets, sorted_pairs and pair_rows out
      return {0, kI32 * (slots + (E + 1) + 2 * slots)};
    case MoeStep::gather:  // x once, sorted_pairs in; xs out
      return {0, kBf16 * (T * H + P * H) + kI32 * slots};
    case MoeStep::gate_up:
      return {2 * P * H * 2 * I, kBf16 * (active * 2 * I * H + P * H + P * I) + kI32 * (E + 1)};
    case MoeStep::down:
      return {2 * P * I * H, kBf16 * (active * H * I + P * I + P * H) + kI32 * (E + 1)};
    case MoeStep::combine:  // ys, pair_rows, weights in; out
      return {0, kBf16 * (P * H + T * H) + (kI32 + kF32) * slots};
    case MoeStep::experts:  // x, routing and the active experts' weights in; out
      return {moe_expert_flops(m, r.pairs),
              kBf16 * (active * 3 * I * H + 2 * T * H) + (kI32 + kF32) * slots};
    case MoeStep::layer:
    case MoeStep::layer_graph:
      return {2 * T * E * H + moe_expert_flops(m, r.pairs),
              kBf16 * (T * H + E * H + active * 3 * I * H + T * H)};
    case MoeStep::dense_gate_up:
      return {2 * P * H * 2 * I, kBf16 * (P * H + 2 * I * H + P * 2 * I)};
    case MoeStep::dense_down: return {2 * P * I * H, kBf16 * (P * I + H * I + P * H)};
  }
  return {};
}

TimingConfig moe_timing(double estimate_us, bool quick, TimingMode mode) {
  const double sample_us = quick ? 2000 : 10000;
  TimingConfig cfg;
  cfg.mode = mode;
  cfg.reps = quick ? 5 : 20;
  cfg.batch = mode == TimingMode::per_launch
                  ? 1
                  : std::clamp(static_cast<int>(sample_us / std::max(estimate_us, 1.0)), 1, 200);
  // Graph mode warms up with whole replays; otherwise with single launches, at least one batch.
  cfg.warmup = mode == TimingMode::graph ? (quick ? 1 : 2) : std::clamp(cfg.batch, 2, 20);
  return cfg;
}

std::vector<int64_t> moe_sample_tokens(int64_t tokens, int count, uint64_t seed) {
  std::vector<int64_t> rows;
  if (tokens <= 0 || count <= 0) return rows;
  if (tokens <= count) {
    for (int64_t t = 0; t < tokens; ++t) rows.push_back(t);
    return rows;
  }
  std::set<int64_t> chosen = {0, tokens - 1};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, tokens - 1);
  while (static_cast<int>(chosen.size()) < count) chosen.insert(pick(rng));
  return {chosen.begin(), chosen.end()};
}

bool MoeCheck::ok() const {
  return nonfinite == 0 && !std::isnan(layer_vs_cpu.rel_l2) &&
         layer_vs_cpu.rel_l2 <= kMoeRelL2Tolerance;
}

MoeSummary moe_summary(const MoeCase& c, const Ceilings& ceil) {
  MoeSummary s;
  s.layer_ms = median_us(c, MoeStep::layer) / 1e3;
  s.layer_graph_ms = median_us(c, MoeStep::layer_graph) / 1e3;
  const double router_us = median_us(c, MoeStep::router_gemm) + median_us(c, MoeStep::route);
  if (s.layer_graph_ms > 0) s.router_share = router_us / (s.layer_graph_ms * 1e3);

  const double flops = moe_expert_flops(c.shape.model, c.routing.pairs);
  const bool decode = c.shape.decode();
  const double expert_us = decode ? median_us(c, MoeStep::experts)
                                  : median_us(c, MoeStep::gate_up) + median_us(c, MoeStep::down);
  double expert_bytes = 0;
  for (MoeStep st : decode ? std::vector<MoeStep>{MoeStep::experts}
                           : std::vector<MoeStep>{MoeStep::gate_up, MoeStep::down})
    if (const ResultRow* r = find_row(c, st)) expert_bytes += r->bytes;
  if (expert_us > 0) {
    s.expert_tflops = flops / expert_us / 1e6;
    if (ceil.copy_gbps > 0)
      s.expert_copy_percent = 100 * expert_bytes / expert_us / 1e3 / ceil.copy_gbps;
  }
  const double dense_us = median_us(c, MoeStep::dense_gate_up) + median_us(c, MoeStep::dense_down);
  if (dense_us > 0 && find_row(c, MoeStep::dense_gate_up) && find_row(c, MoeStep::dense_down)) {
    s.dense_tflops = flops / dense_us / 1e6;
    if (s.expert_tflops > 0) s.percent_of_dense = 100 * s.expert_tflops / s.dense_tflops;
  }
  if (const ResultRow* r = find_row(c, MoeStep::layer_graph); r && r->stats.median_us > 0)
    s.layer_tflops = r->flops / r->stats.median_us / 1e6;
  return s;
}

std::string moe_case_table(const MoeCase& c, const Ceilings& ceil) {
  const MoeModel& m = c.shape.model;
  const double layer_us = median_us(c, MoeStep::layer_graph);
  std::string out = fmt::format(
      "{} {}: T={} H={} I={} E={} top-{}{}, {} path; pairs {}, experts with tokens {:.4g}/{}{}\n",
      m.name, c.shape.label, c.shape.tokens, m.hidden, m.inter, m.experts, m.k,
      m.renormalize ? " renorm" : "", c.shape.decode() ? "decode (moe_experts)" : "grouped",
      c.routing.pairs, c.routing.active_experts, m.experts, c.skew ? ", skewed router" : "");
  out += fmt::format("{:<26} {:<22} {:>9} {:>9} {:>9} {:>8} {:>8} {:>6} {:>6} {:>7} {:>8} {:>6}\n",
                     "step", "timing", "median ms", "min ms", "max ms", "TFLOP/s", "GB/s", "%GEMM",
                     "%copy", "FLOP/B", "roofline", "share");
  for (size_t i = 0; i < c.rows.size() && i < c.steps.size(); ++i) {
    const ResultRow& r = c.rows[i];
    const MoeStep st = c.steps[i];
    const double tflops = achieved_tflops(r).value_or(0), gbps = achieved_gbps(r).value_or(0);
    const bool component = st != MoeStep::layer && st != MoeStep::layer_graph &&
                           st != MoeStep::dense_gate_up && st != MoeStep::dense_down;
    out += fmt::format(
        "{:<26} {:<22} {:>9.4f} {:>9.4f} {:>9.4f} {:>8} {:>8} {:>6} {:>6} {:>7} {:>8} {:>6}\n",
        std::string(moe_step_name(st)) + (st == MoeStep::layer_graph ? " (graph)" : ""), r.timing,
        r.stats.median_us / 1e3, r.stats.min_us / 1e3, r.stats.max_us / 1e3,
        tflops > 0 ? format_rate(tflops) : "-", gbps > 0 ? format_rate(gbps) : "-",
        dash_or(ceil.gemm_tflops > 0 ? 100 * tflops / ceil.gemm_tflops : 0, "{:.1f}"),
        dash_or(ceil.copy_gbps > 0 ? 100 * gbps / ceil.copy_gbps : 0, "{:.1f}"),
        r.flops > 0 ? fmt::format("{:.0f}", r.flops / r.bytes) : "0",
        roofline_name(roofline_class(r.flops, r.bytes, ceil)),
        component && layer_us > 0 ? fmt::format("{:.1f}%", 100 * r.stats.median_us / layer_us)
                                  : "");
  }
  return out;
}

std::string moe_summary_lines(const MoeCase& c, const Ceilings& ceil) {
  const MoeSummary s = moe_summary(c, ceil);
  std::string out = fmt::format(
      "  layer: {:.4f} ms as a graph ({:.1f} TFLOP/s), {:.4f} ms back to back; router (gemm + "
      "route) {:.1f}% of the layer (seed 001: < 5%, excellent < 2%)\n",
      s.layer_graph_ms, s.layer_tflops, s.layer_ms, 100 * s.router_share);
  if (c.shape.decode()) {
    out += fmt::format(
        "  experts (moe_experts): {:.1f} TFLOP/s, {:.1f}% of the copy ceiling on the chosen "
        "experts' weights (target >= {:.0f}%: {})\n",
        s.expert_tflops, s.expert_copy_percent, kMoeTargetDecodeCopyPercent,
        s.expert_copy_percent >= kMoeTargetDecodeCopyPercent ? "met" : "not met");
  } else {
    out += fmt::format("  experts (two grouped GEMMs): {:.1f} TFLOP/s", s.expert_tflops);
    if (s.dense_tflops > 0)
      out += fmt::format(
          " = {:.1f}% of dense cuBLAS on the same FLOPs ({:.1f} TFLOP/s; target "
          ">= {:.0f}%: {})",
          s.percent_of_dense, s.dense_tflops, kMoeTargetPercentOfDense,
          s.percent_of_dense >= kMoeTargetPercentOfDense ? "met" : "not met");
    out += fmt::format("; {:.1f}% of the GEMM ceiling\n",
                       ceil.gemm_tflops > 0 ? 100 * s.expert_tflops / ceil.gemm_tflops : 0.0);
  }
  if (const auto a = moe_anchor(c.shape); a && !c.skew) {
    out += fmt::format("  other runs (ANCHORS.md, H100): torch._grouped_mm pipeline {} ms",
                       fmt::format("{:.3f}", a->grouped_mm_ms));
    if (a->naive_loop_ms > 0) out += fmt::format(", per-expert loop {:.2f} ms", a->naive_loop_ms);
    if (a->seed_target_ms > 0) out += fmt::format(", seed 001 target {:.1f} ms", a->seed_target_ms);
    if (s.layer_graph_ms > 0)
      out += fmt::format(
          " -> {:.2f}x faster than that torch._grouped_mm figure (compare moe "
          "measures it in the same run)",
          a->grouped_mm_ms / s.layer_graph_ms);
    out += "\n";
  }
  return out;
}

std::string moe_load_table(const std::vector<MoeCase>& cases) {
  std::string out =
      fmt::format("{:<18} {:>7} {:>8} {:>7} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8}  {}\n", "case",
                  "tokens", "pairs", "active", "min", "max", "max/mean", "CV", "aux", "router %",
                  "most loaded experts (id:pairs)");
  for (const MoeCase& c : cases) {
    const MoeLoadStats& l = c.load;
    if (l.counts.empty()) continue;
    std::vector<int> order(l.counts.size());
    for (size_t e = 0; e < order.size(); ++e) order[e] = int(e);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return l.counts[a] > l.counts[b]; });
    std::string top;
    for (size_t i = 0; i < std::min<size_t>(4, order.size()); ++i)
      top += fmt::format("{}{}:{}", i ? " " : "", order[i], l.counts[order[i]]);
    const double router_share = moe_summary(c, Ceilings{}).router_share;
    out +=
        fmt::format("{:<18} {:>7} {:>8} {:>7} {:>8} {:>8} {:>8.2f} {:>7.3f} {:>8.4f} {:>8}  {}\n",
                    c.shape.model.name + " " + c.shape.label + (c.skew ? " skew" : ""), l.tokens,
                    l.tokens * l.k - l.invalid_ids, l.active_experts, l.min_load, l.max_load,
                    l.max_over_mean, l.load_cv, l.aux_loss,
                    router_share > 0 ? fmt::format("{:.2f}", 100 * router_share) : "-", top);
  }
  out +=
      "per input set 0: pairs per expert (min, max, max/mean), CV = population stddev / mean of "
      "the pairs per expert (seed 001 'expert usage variance': < 10%, excellent < 5%),\naux = E * "
      "sum f_i P_i (Switch Transformer, f_i = share of the T*k pairs, P_i = mean router "
      "probability): 1 when balanced, E when collapsed; router % = (router gemm + route) / "
      "the layer's graph time (seed 001: < 5%, excellent < 2%).\n";
  return out;
}

std::string moe_validation_table(const std::vector<MoeCase>& cases) {
  std::string out =
      fmt::format("{:<18} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>10} {:>5}\n",
                  "case", "tokens", "max abs", "mean abs", "max rel", "rel L2", "bf16 rnd",
                  "max abs", "mean abs", "rel L2", "non-finite", "ok");
  for (const MoeCase& c : cases) {
    if (!c.check) continue;
    const MoeCheck& k = *c.check;
    out += fmt::format(
        "{:<18} {:>6} {:>9.2e} {:>9.2e} {:>9.2e} {:>9.2e} {:>9.2e} | {:>9.2e} {:>9.2e} {:>9.2e} "
        "{:>10} {:>5}\n",
        c.shape.model.name + " " + c.shape.label + (c.skew ? " skew" : ""), k.tokens,
        k.layer_vs_cpu.max_abs, k.layer_vs_cpu.mean_abs, k.layer_vs_cpu.max_rel,
        k.layer_vs_cpu.rel_l2, k.layer_vs_cpu.rounding_max_abs, k.experts_vs_cpu.max_abs,
        k.experts_vs_cpu.mean_abs, k.experts_vs_cpu.rel_l2, k.nonfinite, k.ok() ? "ok" : "FAIL");
  }
  out += fmt::format(
      "left: the layer's output rows of the sampled tokens against ops::moe_experts on the CPU "
      "(same bf16 x, weights and routing; its output is bf16 too,\nso 'bf16 rnd' is 0 and one "
      "bf16 ulp of an output is the expected difference); right: ops::moe_experts on the GPU "
      "against the same reference.\nmax rel = |out - ref| / max(|ref|, 0.1 * RMS of the row). "
      "ok = no NaN/Inf and rel L2 <= {:g} (DESIGN.md, bf16). Seed 001 acceptable: max abs < "
      "1e-3, mean abs < 1e-4, max rel < 1e-2.\n",
      kMoeRelL2Tolerance);
  return out;
}

nlohmann::json moe_json(const std::vector<MoeCase>& cases, const Ceilings& ceil) {
  nlohmann::json jc = nlohmann::json::array();
  for (const MoeCase& c : cases) {
    const MoeModel& m = c.shape.model;
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < c.rows.size() && i < c.steps.size(); ++i) {
      const ResultRow& r = c.rows[i];
      rows.push_back(
          {{"step", moe_step_name(c.steps[i])},
           {"graph", c.steps[i] == MoeStep::layer_graph},
           {"timing", r.timing},
           {"median_ms", r.stats.median_us / 1e3},
           {"min_ms", r.stats.min_us / 1e3},
           {"max_ms", r.stats.max_us / 1e3},
           {"flops", r.flops},
           {"bytes", r.bytes},
           {"tflops", achieved_tflops(r).value_or(0)},
           {"gbps", achieved_gbps(r).value_or(0)},
           {"percent_of_gemm_ceiling",
            ceil.gemm_tflops > 0 ? 100 * achieved_tflops(r).value_or(0) / ceil.gemm_tflops : 0},
           {"percent_of_copy_ceiling",
            ceil.copy_gbps > 0 ? 100 * achieved_gbps(r).value_or(0) / ceil.copy_gbps : 0},
           {"flop_per_byte", r.bytes > 0 ? r.flops / r.bytes : 0},
           {"roofline", roofline_name(roofline_class(r.flops, r.bytes, ceil))}});
    }
    const MoeLoadStats& l = c.load;
    const MoeSummary s = moe_summary(c, ceil);
    nlohmann::json j = {
        {"model", m.name},
        {"label", c.shape.label},
        {"tokens", c.shape.tokens},
        {"hidden", m.hidden},
        {"intermediate", m.inter},
        {"experts", m.experts},
        {"k", m.k},
        {"renormalize", m.renormalize},
        {"path", c.shape.decode() ? "decode" : "grouped"},
        {"skew", c.skew},
        {"input_sets", c.sets},
        {"pairs", c.routing.pairs},
        {"active_experts", c.routing.active_experts},
        {"rows", rows},
        {"load",
         {{"counts", l.counts},
          {"fraction", l.fraction},
          {"mean_prob", l.mean_prob},
          {"aux_loss", l.aux_loss},
          {"load_cv", l.load_cv},
          {"min_load", l.min_load},
          {"max_load", l.max_load},
          {"max_over_mean", l.max_over_mean},
          {"active_experts", l.active_experts},
          {"invalid_ids", l.invalid_ids}}},
        {"summary",
         {{"layer_ms", s.layer_ms},
          {"layer_graph_ms", s.layer_graph_ms},
          {"layer_tflops", s.layer_tflops},
          {"router_share", s.router_share},
          {"expert_tflops", s.expert_tflops},
          {"dense_cublas_tflops", s.dense_tflops},
          {"percent_of_dense_cublas", s.percent_of_dense},
          {"expert_percent_of_copy", s.expert_copy_percent}}},
    };
    if (c.check)
      j["check"] = {{"tokens", c.check->tokens},
                    {"layer_vs_cpu", error_json(c.check->layer_vs_cpu)},
                    {"gpu_moe_experts_vs_cpu", error_json(c.check->experts_vs_cpu)},
                    {"nonfinite", c.check->nonfinite},
                    {"ok", c.check->ok()}};
    if (const auto a = moe_anchor(c.shape))
      j["anchors_h100"] = {{"torch_grouped_mm_ms", a->grouped_mm_ms},
                           {"naive_loop_ms", a->naive_loop_ms},
                           {"seed_target_ms", a->seed_target_ms}};
    jc.push_back(std::move(j));
  }
  return {{"cases", jc},
          {"ridge_flop_per_byte", ridge_flop_per_byte(ceil)},
          {"targets",
           {{"percent_of_dense_cublas", kMoeTargetPercentOfDense},
            {"decode_percent_of_copy", kMoeTargetDecodeCopyPercent},
            {"rel_l2_tolerance", kMoeRelL2Tolerance}}}};
}

}  // namespace braid::bench
