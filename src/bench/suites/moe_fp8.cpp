#include "bench/suites/moe_fp8.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench {

namespace {

constexpr double kBf16 = 2, kI32 = 4, kF32 = 4;

[[noreturn]] void bad_option(const char* option, const std::string& expected,
                             const std::string& given) {
  throw_arg_error(ErrorKind::invalid_argument, "bench moe-fp8", option, expected, given);
}

std::string seed001_label(int64_t tokens) {
  if (tokens == 4 * 512) return "4x512";
  if (tokens == 16 * 2048) return "16x2048";
  if (tokens == 32 * 2048) return "32x2048";
  return fmt::format("T={}", tokens);
}

// bench moe's shape of the same tokens: its step costs serve the bf16 steps of the FP8 layer.
MoeShape bf16_shape(const Fp8Shape& s) { return {seed001_model(), s.tokens, s.label}; }

const ResultRow* find_row(const MoeFp8Case& c, Fp8Step s) {
  for (size_t i = 0; i < c.steps.size() && i < c.rows.size(); ++i)
    if (c.steps[i] == s) return &c.rows[i];
  return nullptr;
}

double median_us(const MoeFp8Case& c, Fp8Step s) {
  const ResultRow* r = find_row(c, s);
  return r ? r->stats.median_us : 0.0;
}

std::string dash_or(double v, const char* spec) {
  return v > 0 ? fmt::format(fmt::runtime(spec), v) : std::string("-");
}

std::string case_name(const MoeFp8Case& c) {
  std::string name = std::string(fp8_layer_name(c.shape.layer)) + " " + c.shape.label;
  if (c.shape.layer == Fp8Layer::seed003) name += fmt::format(" terms={}", c.terms);
  return name;
}

nlohmann::json error_json(const ErrorSummary& e) {
  return {{"elements", e.elements},       {"max_abs_error", e.max_abs},
          {"mean_abs_error", e.mean_abs}, {"max_rel_error", e.max_rel},
          {"rel_l2_error", e.rel_l2}};
}

nlohmann::json match_json(const MatchCount& m, const MatchRule& rule) {
  return {{"elements", m.elements}, {"matched", m.matched}, {"ratio", m.ratio()},
          {"passes", m.passes(rule)}};
}

}  // namespace

const char* fp8_layer_name(Fp8Layer l) { return l == Fp8Layer::seed003 ? "seed003" : "seed001"; }

Fp8Dims fp8_dims(Fp8Layer l) {
  if (l == Fp8Layer::seed003)
    return {7168, 2048, kSeed003LocalExperts, kSeed003GlobalExperts, kSeed003TopK};
  const MoeModel m = seed001_model();
  return {m.hidden, m.inter, m.experts, m.experts, m.k};
}

std::vector<Fp8Shape> moe_fp8_shapes(const std::string& which, const std::vector<int64_t>& tokens) {
  std::vector<Fp8Layer> layers;
  if (which == "seed003" || which == "all") layers.push_back(Fp8Layer::seed003);
  if (which == "seed001" || which == "all") layers.push_back(Fp8Layer::seed001);
  if (layers.empty()) bad_option("--shape", "seed003, seed001 or all", "'" + which + "'");
  for (int64_t t : tokens)
    if (t < 1) bad_option("--tokens", "token counts >= 1", std::to_string(t));
  // seed001's FP8 layer is bench moe's grouped path with fp8 experts; bench moe takes its decode
  // path (moe_experts, no permutation) up to kMoeDecodeMaxTokens tokens.
  if (std::find(layers.begin(), layers.end(), Fp8Layer::seed001) != layers.end())
    for (int64_t t : tokens)
      if (t <= kMoeDecodeMaxTokens)
        bad_option("--tokens", fmt::format("counts > {} for seed001 (the grouped path)",
                                           kMoeDecodeMaxTokens),
                   std::to_string(t));
  std::vector<Fp8Shape> shapes;
  for (Fp8Layer l : layers) {
    std::vector<int64_t> counts = tokens;
    if (counts.empty())
      counts = l == Fp8Layer::seed003 ? std::vector<int64_t>{1, 16, 256, 4096}
                                      : std::vector<int64_t>{4 * 512, 16 * 2048, 32 * 2048};
    for (int64_t t : counts)
      shapes.push_back(
          {l, t, l == Fp8Layer::seed001 ? seed001_label(t) : fmt::format("T={}", t)});
  }
  return shapes;
}

void validate_fp8_terms(const std::vector<int>& terms) {
  if (terms.empty()) bad_option("--terms", "at least one count", "none");
  for (int t : terms)
    if (t < 1 || t > ops::kFp8MaxTerms)
      bad_option("--terms", fmt::format("counts in [1, {}]", ops::kFp8MaxTerms),
                 std::to_string(t));
}

double seed001_target_ms(int64_t tokens) {
  if (tokens == 4 * 512) return 3.8;
  if (tokens == 16 * 2048) return 22.0;
  if (tokens == 32 * 2048) return 38.0;
  return 0;
}

const char* fp8_step_name(Fp8Step s) {
  switch (s) {
    case Fp8Step::ds_route: return "moe_route_grouped";
    case Fp8Step::ds_permute: return "moe_permute";
    case Fp8Step::ds_gather: return "moe_gather_fp8";
    case Fp8Step::ds_gemm1: return "moe_grouped_gemm_fp8_swiglu_gate_last";
    case Fp8Step::ds_gemm2: return "moe_grouped_gemm_fp8";
    case Fp8Step::ds_combine: return "moe_combine";
    case Fp8Step::ds_pipeline: return "pipeline_of_public_ops";
    case Fp8Step::ds_op: return "moe_fp8_block_scale";
    case Fp8Step::router_gemm: return "moe_router_gemm";
    case Fp8Step::route: return "moe_route_topk_softmax";
    case Fp8Step::permute: return "moe_permute";
    case Fp8Step::gather: return "moe_gather";
    case Fp8Step::quantize: return "moe_fp8_quantize";
    case Fp8Step::gate_up: return "moe_grouped_gemm_fp8_swiglu";
    case Fp8Step::down: return "moe_grouped_gemm_fp8";
    case Fp8Step::combine: return "moe_combine";
    case Fp8Step::layer: return "moe_fp8_layer";
    case Fp8Step::layer_graph: return "moe_fp8_layer";
    case Fp8Step::bf16_layer_graph: return "moe_layer_bf16";
    case Fp8Step::dense_gate_up: return "dense_cublaslt_fp8_gate_up";
    case Fp8Step::dense_down: return "dense_cublaslt_fp8_down";
  }
  return "?";
}

std::vector<Fp8Step> fp8_components(Fp8Layer l) {
  if (l == Fp8Layer::seed003)
    return {Fp8Step::ds_route, Fp8Step::ds_permute, Fp8Step::ds_gather,
            Fp8Step::ds_gemm1, Fp8Step::ds_gemm2,   Fp8Step::ds_combine};
  return {Fp8Step::router_gemm, Fp8Step::route,   Fp8Step::permute, Fp8Step::gather,
          Fp8Step::quantize,    Fp8Step::gate_up, Fp8Step::down,    Fp8Step::combine};
}

bool fp8_is_component(Fp8Step s) {
  for (Fp8Layer l : {Fp8Layer::seed003, Fp8Layer::seed001})
    for (Fp8Step c : fp8_components(l))
      if (c == s) return true;
  return false;
}

Fp8Routing fp8_routing(const int32_t* ids, int64_t tokens, int k, int first, int experts) {
  Fp8Routing r;
  std::set<int32_t> seen;
  for (int64_t i = 0; i < tokens * k; ++i)
    if (ids[i] >= first && ids[i] < first + experts) {
      ++r.pairs;
      seen.insert(ids[i]);
    }
  r.active_experts = static_cast<int>(seen.size());
  return r;
}

Fp8Cost moe_fp8_step_cost(Fp8Step s, const Fp8Shape& shape, const Fp8Routing& r, int terms) {
  const Fp8Dims d = fp8_dims(shape.layer);
  const double T = double(shape.tokens), H = double(d.hidden), I = double(d.inter);
  const double E = double(d.experts), Eg = double(d.routed_experts), slots = T * d.k;
  const double P = double(r.pairs), active = double(r.active_experts), R = double(terms);
  const double offsets = kI32 * (E + 1);
  const double gemm1 = 2 * P * H * 2 * I, gemm2 = 2 * P * I * H;
  const double weights = active * 3 * I * H * kFp8WeightBytes;
  auto cost = [](double flops, double definition, double bytes, bool fp8) {
    return Fp8Cost{flops, definition, bytes, fp8};
  };
  const MoeRouting bf16_routing{r.pairs, double(r.active_experts)};
  auto bf16 = [&](MoeStep step) {
    const MoeCost c = moe_step_cost(step, bf16_shape(shape), bf16_routing);
    return cost(c.flops, c.flops, c.bytes, false);
  };
  switch (s) {
    case Fp8Step::ds_route:  // f32 logits, bf16 bias in; f32 weights, i32 ids out
      return cost(0, 0, kF32 * T * Eg + kBf16 * Eg + (kF32 + kI32) * slots, false);
    case Fp8Step::ds_permute: return cost(0, 0, kI32 * (slots + (E + 1) + 2 * slots), false);
    case Fp8Step::ds_gather:  // hidden rows and scales once, sorted_pairs in; P rows out
      return cost(0, 0, kFp8ActBytes * (T * H + P * H) + kI32 * slots, false);
    case Fp8Step::ds_gemm1:
      return cost(gemm1, gemm1,
                  active * 2 * I * H * kFp8WeightBytes + kFp8ActBytes * (P * H + R * P * I) +
                      offsets,
                  true);
    case Fp8Step::ds_gemm2:  // every term meets the weights: R x the FLOPs; f32 ys out
      return cost(R * gemm2, gemm2,
                  active * H * I * kFp8WeightBytes + kFp8ActBytes * R * P * I + kF32 * P * H +
                      offsets,
                  true);
    case Fp8Step::ds_combine:
      return cost(0, 0, kF32 * P * H + kBf16 * T * H + (kI32 + kF32) * slots, false);
    case Fp8Step::ds_pipeline:
    case Fp8Step::ds_op:  // logits, bias, hidden and its scales in; the weights; bf16 out
      return cost(gemm1 + R * gemm2, gemm1 + gemm2,
                  kF32 * T * Eg + kBf16 * Eg + kFp8ActBytes * T * H + weights + kBf16 * T * H,
                  true);
    case Fp8Step::router_gemm: return bf16(MoeStep::router_gemm);
    case Fp8Step::route: return bf16(MoeStep::route);
    case Fp8Step::permute: return bf16(MoeStep::permute);
    case Fp8Step::gather: return bf16(MoeStep::gather);
    case Fp8Step::quantize: return cost(0, 0, kBf16 * P * H + kFp8ActBytes * P * H, false);
    case Fp8Step::gate_up:
      return cost(gemm1, gemm1,
                  active * 2 * I * H * kFp8WeightBytes + kFp8ActBytes * (P * H + P * I) + offsets,
                  true);
    case Fp8Step::down:
      return cost(gemm2, gemm2,
                  active * H * I * kFp8WeightBytes + kFp8ActBytes * P * I + kBf16 * P * H +
                      offsets,
                  true);
    case Fp8Step::combine: return bf16(MoeStep::combine);
    case Fp8Step::layer:
    case Fp8Step::layer_graph: {  // x, the bf16 router weight, the active fp8 experts, out
      const double router = 2 * T * E * H;
      return cost(router + gemm1 + gemm2, router + gemm1 + gemm2,
                  kBf16 * (T * H + E * H + T * H) + weights, true);
    }
    case Fp8Step::bf16_layer_graph: return bf16(MoeStep::layer_graph);
    case Fp8Step::dense_gate_up:
      return cost(gemm1, gemm1, P * H + 2 * I * H + kBf16 * P * 2 * I, true);
    case Fp8Step::dense_down: return cost(gemm2, gemm2, P * I + H * I + kBf16 * P * H, true);
  }
  return {};
}

Bound fp8_step_bound(const Fp8Cost& c, const Ceilings& ceil) {
  if (!c.fp8) return roofline_bound(c.flops, c.bytes, ceil);
  return roofline_bound(c.flops, c.bytes, fp8_ceilings(ceil)) == Bound::compute
             ? Bound::compute_fp8
             : Bound::memory;
}

Roofline fp8_step_roofline(const Fp8Cost& c, const Ceilings& ceil) {
  return roofline_class(c.flops, c.bytes, c.fp8 ? fp8_ceilings(ceil) : ceil);
}

Fp8Floor moe_fp8_floor(const Fp8Shape& s, const Fp8Routing& r, const Ceilings& ceil) {
  const Fp8Dims d = fp8_dims(s.layer);
  Fp8Floor f;
  f.weight_bytes =
      double(r.active_experts) * 3 * double(d.inter) * double(d.hidden) * kFp8WeightBytes;
  f.flops = 6 * double(r.pairs) * double(d.hidden) * double(d.inter);
  if (ceil.copy_gbps <= 0 || ceil.fp8_gemm_tflops <= 0) return f;
  f.memory_us = f.weight_bytes / (ceil.copy_gbps * 1e3);      // GB/s = 1e3 bytes/us
  f.compute_us = f.flops / (ceil.fp8_gemm_tflops * 1e6);      // TFLOP/s = 1e6 FLOP/us
  f.floor_us = std::max(f.memory_us, f.compute_us);
  f.compute_bound = f.compute_us > f.memory_us;
  return f;
}

bool element_matches(double out, double ref, const MatchRule& rule) {
  const double diff = std::fabs(out - ref);
  if (!std::isfinite(out) || std::isnan(diff)) return false;
  if (diff <= rule.atol) return true;
  const double rel =
      ref != 0 ? diff / std::fabs(ref) : std::numeric_limits<double>::infinity();
  return !(rel > rule.rtol);
}

double MatchCount::ratio() const {
  return elements > 0 ? double(matched) / double(elements) : 0.0;
}

bool MatchCount::passes(const MatchRule& rule) const {
  return elements > 0 && ratio() >= rule.required_ratio;
}

void MatchCounter::add(const float* out, const double* ref, int64_t n) {
  for (int64_t i = 0; i < n; ++i) count_.matched += element_matches(out[i], ref[i], rule_);
  count_.elements += n;
}

bool Fp8DsCheck::ok(const MatchRule& rule) const {
  if (nonfinite != 0 || std::isnan(pipeline_vs_op.rel_l2) ||
      pipeline_vs_op.rel_l2 > kFp8PipelineVsOpTolerance)
    return false;
  return terms < ops::kFp8MaxTerms || (match_cpu_op.passes(rule) && match_fp32.passes(rule));
}

bool Fp8LayerCheck::ok() const {
  return nonfinite == 0 && !std::isnan(vs_fp8_fp32.rel_l2) &&
         vs_fp8_fp32.rel_l2 <= kFp8LayerRelL2Tolerance;
}

MoeFp8Summary moe_fp8_summary(const MoeFp8Case& c, const Ceilings& ceil) {
  MoeFp8Summary s;
  const bool ds = c.shape.layer == Fp8Layer::seed003;
  const Fp8Step whole = ds ? Fp8Step::ds_op : Fp8Step::layer_graph;
  s.time_ms = median_us(c, whole) / 1e3;
  s.pipeline_ms = ds ? median_us(c, Fp8Step::ds_pipeline) / 1e3 : 0;
  s.floor = moe_fp8_floor(c.shape, c.routing, ceil);
  const Fp8Cost cost = moe_fp8_step_cost(whole, c.shape, c.routing, c.terms);
  s.roofline = fp8_step_roofline(cost, ceil);
  if (s.time_ms > 0) {
    s.percent_of_floor = 100 * s.floor.floor_us / (s.time_ms * 1e3);
    s.executed_tflops = cost.flops / (s.time_ms * 1e3) / 1e6;
    s.definition_tflops = cost.definition_flops / (s.time_ms * 1e3) / 1e6;
  }
  if (ds) return s;

  const double expert_flops = 6 * double(c.routing.pairs) * double(fp8_dims(c.shape.layer).hidden) *
                              double(fp8_dims(c.shape.layer).inter);
  const double expert_us = median_us(c, Fp8Step::gate_up) + median_us(c, Fp8Step::down);
  if (find_row(c, Fp8Step::gate_up) && find_row(c, Fp8Step::down) && expert_us > 0) {
    s.expert_tflops = expert_flops / expert_us / 1e6;
    if (ceil.fp8_gemm_tflops > 0)
      s.expert_percent_of_fp8 = 100 * s.expert_tflops / ceil.fp8_gemm_tflops;
  }
  const double dense_us = median_us(c, Fp8Step::dense_gate_up) + median_us(c, Fp8Step::dense_down);
  if (find_row(c, Fp8Step::dense_gate_up) && find_row(c, Fp8Step::dense_down) && dense_us > 0) {
    s.dense_fp8_tflops = expert_flops / dense_us / 1e6;
    if (s.expert_tflops > 0) s.percent_of_dense_fp8 = 100 * s.expert_tflops / s.dense_fp8_tflops;
  }
  s.bf16_layer_ms = median_us(c, Fp8Step::bf16_layer_graph) / 1e3;
  if (s.bf16_layer_ms > 0 && s.time_ms > 0) s.speedup_vs_bf16 = s.bf16_layer_ms / s.time_ms;
  const double router_us = median_us(c, Fp8Step::router_gemm) + median_us(c, Fp8Step::route);
  if (s.time_ms > 0) s.router_share = router_us / (s.time_ms * 1e3);
  s.seed_target_ms = seed001_target_ms(c.shape.tokens);
  return s;
}

std::string moe_fp8_case_table(const MoeFp8Case& c, const Ceilings& ceil) {
  const Fp8Dims d = fp8_dims(c.shape.layer);
  const bool ds = c.shape.layer == Fp8Layer::seed003;
  std::string out = fmt::format(
      "{}: T={} H={} I={} experts {}{} top-{}; pairs on local experts {}, active experts {}/{}\n",
      case_name(c), c.shape.tokens, d.hidden, d.inter, d.experts,
      ds ? fmt::format(" of {} (grouped sigmoid routing)", d.routed_experts)
         : std::string(" (softmax routing)"),
      d.k, c.routing.pairs, c.routing.active_experts, d.experts);
  out += fmt::format("{:<40} {:<16} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7} {:>8} {:>6}\n",
                     "step", "timing", "median ms", "min ms", "max ms", "TFLOP/s", "GB/s", "%ceil",
                     "FLOP/B", "roofline", "share");
  const double whole_us = median_us(c, ds ? Fp8Step::ds_pipeline : Fp8Step::layer_graph);
  for (size_t i = 0; i < c.rows.size() && i < c.steps.size(); ++i) {
    const ResultRow& r = c.rows[i];
    const Fp8Step st = c.steps[i];
    const Fp8Cost cost = moe_fp8_step_cost(st, c.shape, c.routing, c.terms);
    const double tflops = achieved_tflops(r).value_or(0), gbps = achieved_gbps(r).value_or(0);
    const std::optional<double> pct = percent_of_ceiling(r, ceil);
    std::string name = fp8_step_name(st);
    if (st == Fp8Step::layer_graph || st == Fp8Step::bf16_layer_graph || st == Fp8Step::ds_op ||
        st == Fp8Step::ds_pipeline)
      name += " (graph)";
    out += fmt::format(
        "{:<40} {:<16} {:>9.4f} {:>9.4f} {:>9.4f} {:>8} {:>8} {:>7} {:>7} {:>8} {:>6}\n", name,
        r.timing, r.stats.median_us / 1e3, r.stats.min_us / 1e3, r.stats.max_us / 1e3,
        tflops > 0 ? format_rate(tflops) : "-", gbps > 0 ? format_rate(gbps) : "-",
        pct ? fmt::format("{:.1f}", *pct) : "-",
        r.bytes > 0 ? fmt::format("{:.0f}", r.flops / r.bytes) : "0",
        roofline_name(fp8_step_roofline(cost, ceil)),
        fp8_is_component(st) && whole_us > 0
            ? fmt::format("{:.1f}%", 100 * r.stats.median_us / whole_us)
            : "");
  }
  return out;
}

std::string moe_fp8_summary_lines(const MoeFp8Case& c, const Ceilings& ceil) {
  const MoeFp8Summary s = moe_fp8_summary(c, ceil);
  const Fp8Floor& f = s.floor;
  std::string out;
  const std::string what = c.shape.layer == Fp8Layer::seed003 ? "moe_fp8_block_scale" : "layer";
  out += fmt::format(
      "  {}: {} ms as a graph; floor {} ms ({}: {:.3f} GB of active fp8 weights {} ms, {:.3f} "
      "TFLOP {} ms) -> {}% of the floor; {} TFLOP/s executed, {} TFLOP/s of the definition's "
      "FLOPs; roofline {}\n",
      what, dash_or(s.time_ms, "{:.4f}"), dash_or(f.floor_us / 1e3, "{:.4f}"),
      f.compute_bound ? "compute" : "memory", f.weight_bytes / 1e9,
      dash_or(f.memory_us / 1e3, "{:.4f}"), f.flops / 1e12, dash_or(f.compute_us / 1e3, "{:.4f}"),
      dash_or(s.percent_of_floor, "{:.1f}"), dash_or(s.executed_tflops, "{:.1f}"),
      dash_or(s.definition_tflops, "{:.1f}"), roofline_name(s.roofline));
  if (c.shape.layer == Fp8Layer::seed003) {
    if (s.pipeline_ms > 0 && s.time_ms > 0)
      out += fmt::format("  the same pipeline from the public ops: {:.4f} ms ({:.2f}x the op)\n",
                         s.pipeline_ms, s.pipeline_ms / s.time_ms);
    return out;
  }
  out += fmt::format("  experts (two fp8 grouped GEMMs): {} TFLOP/s = {}% of the fp8 GEMM ceiling",
                     dash_or(s.expert_tflops, "{:.1f}"),
                     dash_or(s.expert_percent_of_fp8, "{:.1f}"));
  if (s.dense_fp8_tflops > 0)
    out += fmt::format(", {:.1f}% of dense cuBLASLt fp8 on the same FLOPs ({:.1f} TFLOP/s)",
                       s.percent_of_dense_fp8, s.dense_fp8_tflops);
  else if (!c.dense_error.empty())
    out += "; dense cuBLASLt fp8: " + c.dense_error;
  out += "\n";
  out += fmt::format(
      "  bf16 layer of the same run: {} ms -> FP8 {}x faster; router {}% of the layer",
      dash_or(s.bf16_layer_ms, "{:.4f}"), dash_or(s.speedup_vs_bf16, "{:.2f}"),
      dash_or(100 * s.router_share, "{:.2f}"));
  if (s.seed_target_ms > 0)
    out += fmt::format("; seed 001 H100 target {:.1f} ms: {}", s.seed_target_ms,
                       s.time_ms <= 0 ? "-" : s.time_ms <= s.seed_target_ms ? "met" : "not met");
  out += "\n";
  return out;
}

std::string moe_fp8_validation_table(const std::vector<MoeFp8Case>& cases) {
  const MatchRule rule;
  std::string out;
  bool any_ds = false, any_layer = false;
  for (const MoeFp8Case& c : cases) any_ds |= c.ds_check.has_value();
  for (const MoeFp8Case& c : cases) any_layer |= c.layer_check.has_value();
  if (any_ds) {
    out += fmt::format("{:<24} {:>6} | {:>9} {:>9} {:>8} | {:>9} {:>8} | {:>10} {:>10} {:>5}\n",
                       "seed003 case", "tokens", "rel L2", "max abs", "matched", "rel L2",
                       "matched", "pipe/op L2", "non-finite", "ok");
    for (const MoeFp8Case& c : cases) {
      if (!c.ds_check) continue;
      const Fp8DsCheck& k = *c.ds_check;
      const bool judged = k.terms >= ops::kFp8MaxTerms;
      out += fmt::format(
          "{:<24} {:>6} | {:>9.2e} {:>9.2e} {:>7.2f}% | {:>9.2e} {:>7.2f}% | {:>10.2e} {:>10} "
          "{:>5}\n",
          case_name(c), k.tokens, k.vs_cpu_op.rel_l2, k.vs_cpu_op.max_abs,
          100 * k.match_cpu_op.ratio(), k.vs_fp32.rel_l2, 100 * k.match_fp32.ratio(),
          k.pipeline_vs_op.rel_l2, k.nonfinite,
          k.ok(rule) ? (judged ? "ok" : "ok*") : "FAIL");
    }
    out += fmt::format(
        "left: moe_fp8_block_scale's sampled rows against ops::moe_fp8_block_scale on the CPU "
        "(the library's fp32 reference);\nmiddle: against the definition written out in the "
        "bench (dequantized inputs, fp64 sums, unrounded intermediate); matched = "
        "flashinfer-bench's rule\n(an element fails when |d| > {:g} and |d|/|ref| > {:g}; "
        "pass: >= {:.0f}% matched); pipe/op = the bench's pipeline of public ops against the op, "
        "every row.\nok = no "
        "NaN/Inf, pipe/op <= {:g} and, with {} terms, the rule passes against both; ok* = fewer "
        "terms, expected to fail the rule (ops.h), not judged on it.\n",
        rule.atol, rule.rtol, 100 * rule.required_ratio, kFp8PipelineVsOpTolerance,
        ops::kFp8MaxTerms);
  }
  if (any_layer) {
    out += fmt::format("{:<24} {:>6} | {:>9} {:>9} | {:>9} {:>9} | {:>9} {:>10} {:>5}\n",
                       "seed001 FP8 case", "tokens", "rel L2", "max rel", "rel L2", "max rel",
                       "bf16 L2", "non-finite", "ok");
    for (const MoeFp8Case& c : cases) {
      if (!c.layer_check) continue;
      const Fp8LayerCheck& k = *c.layer_check;
      out += fmt::format(
          "{:<24} {:>6} | {:>9.2e} {:>9.2e} | {:>9.2e} {:>9.2e} | {:>9.2e} {:>10} {:>5}\n",
          case_name(c), k.tokens, k.vs_fp32.rel_l2, k.vs_fp32.max_rel, k.vs_fp8_fp32.rel_l2,
          k.vs_fp8_fp32.max_rel, k.bf16_vs_fp32.rel_l2, k.nonfinite, k.ok() ? "ok" : "FAIL");
    }
    out += fmt::format(
        "left: the FP8 layer's sampled rows against fp32 arithmetic on the bf16 weights and x "
        "(what FP8 costs); middle: against fp32 arithmetic on the same fp8 weights and fp8 x\n"
        "(the layer's own roundings); bf16 L2 = bench moe's bf16 layer on the same rows against "
        "the left reference. ok = no NaN/Inf and middle rel L2 <= {:g}.\n",
        kFp8LayerRelL2Tolerance);
  }
  return out;
}

nlohmann::json moe_fp8_json(const std::vector<MoeFp8Case>& cases, const Ceilings& ceil) {
  const MatchRule rule;
  nlohmann::json jc = nlohmann::json::array();
  for (const MoeFp8Case& c : cases) {
    const Fp8Dims d = fp8_dims(c.shape.layer);
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < c.rows.size() && i < c.steps.size(); ++i) {
      const ResultRow& r = c.rows[i];
      const Fp8Cost cost = moe_fp8_step_cost(c.steps[i], c.shape, c.routing, c.terms);
      const std::optional<double> pct = percent_of_ceiling(r, ceil);
      rows.push_back({{"step", fp8_step_name(c.steps[i])},
                      {"graph", c.steps[i] != Fp8Step::layer},
                      {"timing", r.timing},
                      {"median_ms", r.stats.median_us / 1e3},
                      {"min_ms", r.stats.min_us / 1e3},
                      {"max_ms", r.stats.max_us / 1e3},
                      {"flops", cost.flops},
                      {"definition_flops", cost.definition_flops},
                      {"bytes", cost.bytes},
                      {"fp8", cost.fp8},
                      {"tflops", achieved_tflops(r).value_or(0)},
                      {"gbps", achieved_gbps(r).value_or(0)},
                      {"percent_of_ceiling", pct ? nlohmann::json(*pct) : nlohmann::json()},
                      {"flop_per_byte", cost.bytes > 0 ? cost.flops / cost.bytes : 0},
                      {"roofline", roofline_name(fp8_step_roofline(cost, ceil))}});
    }
    const MoeFp8Summary s = moe_fp8_summary(c, ceil);
    nlohmann::json j = {
        {"layer", fp8_layer_name(c.shape.layer)},
        {"label", c.shape.label},
        {"tokens", c.shape.tokens},
        {"hidden", d.hidden},
        {"intermediate", d.inter},
        {"local_experts", d.experts},
        {"routed_experts", d.routed_experts},
        {"k", d.k},
        {"intermediate_terms", c.terms},
        {"pairs", c.routing.pairs},
        {"active_experts", c.routing.active_experts},
        {"rows", rows},
        {"summary",
         {{"time_ms", s.time_ms},
          {"pipeline_ms", s.pipeline_ms},
          {"floor_ms", s.floor.floor_us / 1e3},
          {"floor_bound", s.floor.compute_bound ? "compute" : "memory"},
          {"floor_weight_bytes", s.floor.weight_bytes},
          {"floor_flops", s.floor.flops},
          {"percent_of_floor", s.percent_of_floor},
          {"executed_tflops", s.executed_tflops},
          {"definition_tflops", s.definition_tflops},
          {"roofline", roofline_name(s.roofline)},
          {"expert_tflops", s.expert_tflops},
          {"expert_percent_of_fp8_ceiling", s.expert_percent_of_fp8},
          {"dense_fp8_tflops", s.dense_fp8_tflops},
          {"percent_of_dense_fp8", s.percent_of_dense_fp8},
          {"bf16_layer_ms", s.bf16_layer_ms},
          {"speedup_vs_bf16", s.speedup_vs_bf16},
          {"router_share", s.router_share},
          {"seed001_target_ms", s.seed_target_ms}}},
    };
    if (!c.dense_error.empty()) j["dense_fp8_error"] = c.dense_error;
    if (c.ds_check) {
      const Fp8DsCheck& k = *c.ds_check;
      j["check"] = {{"tokens", k.tokens},
                    {"vs_fp32", error_json(k.vs_fp32)},
                    {"match_vs_fp32", match_json(k.match_fp32, rule)},
                    {"vs_cpu_op", error_json(k.vs_cpu_op)},
                    {"match_vs_cpu_op", match_json(k.match_cpu_op, rule)},
                    {"pipeline_vs_op", error_json(k.pipeline_vs_op)},
                    {"nonfinite", k.nonfinite},
                    {"judged_on_rule", k.terms >= ops::kFp8MaxTerms},
                    {"ok", k.ok(rule)}};
    }
    if (c.layer_check) {
      const Fp8LayerCheck& k = *c.layer_check;
      j["check"] = {{"tokens", k.tokens},
                    {"vs_fp32", error_json(k.vs_fp32)},
                    {"vs_fp8_fp32", error_json(k.vs_fp8_fp32)},
                    {"bf16_layer_vs_fp32", error_json(k.bf16_vs_fp32)},
                    {"nonfinite", k.nonfinite},
                    {"ok", k.ok()}};
    }
    jc.push_back(std::move(j));
  }
  return {{"cases", jc},
          {"ceilings",
           {{"copy_gbps", ceil.copy_gbps},
            {"gemm_tflops", ceil.gemm_tflops},
            {"fp8_gemm_tflops", ceil.fp8_gemm_tflops}}},
          {"fp8_ridge_flop_per_byte", ridge_flop_per_byte(fp8_ceilings(ceil))},
          {"rule",
           {{"atol", rule.atol}, {"rtol", rule.rtol}, {"required_ratio", rule.required_ratio}}},
          {"tolerances",
           {{"pipeline_vs_op_rel_l2", kFp8PipelineVsOpTolerance},
            {"seed001_fp8_vs_fp8_fp32_rel_l2", kFp8LayerRelL2Tolerance}}}};
}

}  // namespace braid::bench
