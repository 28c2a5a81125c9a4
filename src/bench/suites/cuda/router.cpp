// `braidinfer bench router`: ops::moe_route_topk_softmax (softmax over the experts, top k,
// renormalised) on Qwen3-30B-A3B's router shape, or with `--router grouped` ops::moe_route_grouped
// on DeepSeek-V3's (seed 003: 256 experts, fp32 logits, bf16 bias, 8 groups, top-4 groups,
// top-8), measured as seed 000 measures it:
//   1. the copy ceiling of this run (what the data would take at full bandwidth);
//   2. the fixed cost of any kernel on this machine: an empty kernel and a one-thread
//      read-write kernel, each timed alone (event pair around one launch), back to back and
//      inside a CUDA graph;
//   3. the router at each token count, timed the same three ways, each timing followed by a check
//      of its outputs against the CPU reference (ids equal, max weight error).
// The tables then read each router time against the same-mode read-write kernel: bytes, transfer
// time at the copy ceiling, bandwidth use, the share of the time that is fixed cost, and the time
// above it. The logits stay in L2 between calls (256 KiB at 1024 tokens), as they do in a model,
// where the gate GEMM has just written them.
#include "bench/suites/router.h"

#include <CLI/CLI.hpp>

#include <fmt/core.h>

#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/harness/cuda/ceilings.h"
#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda/kernels.h"
#include "bench/harness/cuda/timer.h"
#include "bench/harness/report.h"
#include "bench/harness/suite.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench {

namespace {

constexpr const char* kCmd = "braidinfer bench router";
constexpr uint64_t kSeed = 0x2007e5eedull;
// Router logits of a trained model spread over a few units; [-4, 4] gives a softmax that is
// neither flat nor one-hot. In bf16 many of the 128 values repeat, so ties are exercised too
// (both the kernel and the reference give them to the lower expert index).
constexpr float kLogitRange = 4.0f;
constexpr bool kRenormalize = true;  // Qwen3-MoE's norm_topk_prob
// DeepSeek-V3's router (seed 003): bias in bf16, weights scaled by routed_scaling_factor.
constexpr float kBiasRange = 0.5f;
constexpr float kRoutedScaling = 2.5f;

struct RouterArgs {
  std::string router = "topk_softmax";  // or "grouped"
  int experts = 0;                      // 0: the router's model (128, or 256 for grouped)
  int k = 8;
  int n_group = 8;     // grouped only
  int topk_group = 4;  // grouped only
  std::vector<int64_t> tokens{1, 4, 256, 1024};
  bool quick = false;
};

using AddRow = std::function<void(ResultRow)>;

// The three ways every kernel here is timed, with the ceilings bench's repetitions, so the
// baselines and the router are timed identically.
struct Mode {
  const char* name;
  TimingConfig cfg;
};

std::vector<Mode> timing_modes(bool quick) {
  const CeilingsPlan plan = ceilings_plan(quick);
  return {{"alone", plan.launch_alone},
          {"back_to_back", plan.launch_back_to_back},
          {"graph", plan.launch_graph}};
}

std::vector<BaselineLine> measure_baselines(const std::vector<Mode>& modes, Device dev,
                                                   const AddRow& add) {
  const LaunchProbes probes(dev);
  std::vector<BaselineLine> lines;
  for (const Mode& m : modes)
    for (const LaunchProbes::Probe& p : probes.probes()) {
      const Stats st = time_launches(p.launch, m.cfg);
      const std::string label = timing_label(m.cfg);
      add({p.name, "<<<1, 1>>>", label, st, 0, 0, Bound::none, m.name});
      lines.push_back({p.name, m.name, label, st});
    }
  probes.check(kCmd);
  return lines;
}

double baseline_us(const std::vector<BaselineLine>& lines, const std::string& mode) {
  for (const auto& b : lines)
    if (b.kernel == "minimal_rw_kernel" && b.mode == mode) return b.stats.median_us;
  return 0;
}

// The device outputs (copied back) against the reference outputs on the host; *accuracy gets the
// row's form of the same check (the weights' errors; the ids must all match).
RouterCheck check_outputs(const Tensor& weights, const Tensor& ids, const Tensor& ref_w,
                                 const Tensor& ref_ids, Accuracy* accuracy) {
  OwnedTensor w(DType::f32, {weights.shape[0], weights.shape[1]}, Device::cpu());
  OwnedTensor i(DType::i32, {ids.shape[0], ids.shape[1]}, Device::cpu());
  copy(weights, w);
  copy(ids, i);
  const RouterCheck check =
      check_router(w.view().ptr<float>(), i.view().ptr<int32_t>(), ref_w.ptr<float>(),
                          ref_ids.ptr<int32_t>(), weights.numel());
  const float* ref = ref_w.ptr<float>();
  const std::vector<double> ref64(ref, ref + weights.numel());
  ErrorAccumulator acc;
  acc.add(w.view().ptr<float>(), ref64.data(), weights.numel());
  accuracy->error = acc.summary();
  accuracy->reference = fmt::format("cpu reference op; {} of {} ids differ; pass = every id equal "
                                    "and max |dw| <= {:g}",
                                    check.id_mismatches, check.entries,
                                    kRouterWeightTolerance);
  accuracy->rel_l2_tolerance = 1.0;  // the rule above decides, not the relative error
  accuracy->other_checks_passed = check.ok();
  return check;
}

std::string shape_label(const RouterShape& s) {
  if (s.grouped())
    return fmt::format("f32 T={} E={} k={} groups {}/{}", s.tokens, s.experts, s.k, s.topk_group,
                       s.n_group);
  return fmt::format("bf16 T={} E={} k={} renorm", s.tokens, s.experts, s.k);
}

// One token count, every mode. Outputs are poisoned (NaN weights, id -1) before each timing,
// so a configuration whose timed launches did not write them fails its check.
std::vector<RouterLine> measure_router(const RouterShape& shape,
                                              const std::vector<Mode>& modes,
                                              const std::vector<BaselineLine>& baselines,
                                              double copy_gbps, Device dev, const AddRow& add) {
  const int64_t T = shape.tokens;
  const DType logit_dtype = shape.logit_bytes == 4 ? DType::f32 : DType::bf16;
  OwnedTensor logits(logit_dtype, {T, shape.experts}, dev);
  OwnedTensor bias(DType::bf16, {shape.grouped() ? shape.experts : 1}, dev);
  OwnedTensor weights(DType::f32, {T, shape.k}, dev), ids(DType::i32, {T, shape.k}, dev);
  fill_uniform(logits, kSeed + uint64_t(T), -kLogitRange, kLogitRange, {});
  fill_uniform(bias, kSeed - 1, -kBiasRange, kBiasRange, {});
  // The op on any device: the GPU call timed below and the CPU reference.
  auto route = [&](const Tensor& l, const Tensor& b, const Tensor& w, const Tensor& i, Stream s) {
    if (shape.grouped())
      ops::moe_route_grouped(l, b, shape.n_group, shape.topk_group, shape.k, kRoutedScaling, w,
                             i, s);
    else
      ops::moe_route_topk_softmax(l, shape.k, kRenormalize, w, i, s);
  };
  auto call = [&](Stream s) { route(logits, bias, weights, ids, s); };
  call({});  // the op's argument checks, outside the timing and any graph capture

  // The reference: the CPU op on the same logits and bias.
  OwnedTensor host_logits(logit_dtype, {T, shape.experts}, Device::cpu());
  OwnedTensor host_bias(DType::bf16, {bias.view().shape[0]}, Device::cpu());
  copy(logits, host_logits);
  copy(bias, host_bias);
  OwnedTensor ref_w(DType::f32, {T, shape.k}, Device::cpu());
  OwnedTensor ref_ids(DType::i32, {T, shape.k}, Device::cpu());
  route(host_logits, host_bias, ref_w, ref_ids, {});

  std::vector<RouterLine> lines;
  for (const Mode& m : modes) {
    fill_bytes(weights, 0xFF);
    fill_bytes(ids, 0xFF);
    RouterLine line;
    line.shape = shape;
    line.mode = m.name;
    line.timing = timing_label(m.cfg);
    line.stats = time_launches([&](int, Stream s) { call(s); }, m.cfg);
    Accuracy accuracy;
    line.check = check_outputs(weights, ids, ref_w, ref_ids, &accuracy);
    line.baseline_us = baseline_us(baselines, m.name);
    line.copy_gbps = copy_gbps;
    add({router_op_name(shape), shape_label(shape), line.timing,
         line.stats, router_bytes(shape), 0, Bound::memory,
         fmt::format("{}; check {} (id mismatches {}, max |dw| {:.1e})", m.name,
                     line.check.ok() ? "ok" : "FAILED", line.check.id_mismatches,
                     line.check.max_abs_weight_error),
         accuracy});
    lines.push_back(std::move(line));
  }
  return lines;
}

std::vector<RouterLine> lines_of_mode(const std::vector<RouterLine>& all,
                                             const std::string& mode) {
  std::vector<RouterLine> out;
  for (const auto& l : all)
    if (l.mode == mode) out.push_back(l);
  return out;
}

// What is printed under the run's table: the baselines, seed 000's tables per timing mode, the
// targets.
std::string report_text(const Report& run, const std::vector<BaselineLine>& baselines,
                        const std::vector<RouterLine>& lines) {
  std::string out = fmt::format("copy ceiling of this run: {:.0f} GB/s\n\n", run.ceilings.copy_gbps);

  out += "Baseline kernels (<<<1, 1>>>): the fixed cost of any kernel on this machine\n";
  out += baseline_table(baselines);
  out += fmt::format("fixed overhead baseline = minimal_rw_kernel: alone {} us, back to back {} us, in a "
             "graph {} us\n\n",
             format_us(baseline_us(baselines, "alone")),
             format_us(baseline_us(baselines, "back_to_back")),
             format_us(baseline_us(baselines, "graph")));

  const struct {
    const char* mode;
    const char* title;
  } sections[] = {
      {"alone", "timed alone: event pair around one call, host-synchronised between calls"},
      {"back_to_back", "back to back: events around a batch of calls enqueued without waiting, / batch"},
      {"graph", "in a CUDA graph: a batch of calls captured once and replayed, / batch"},
  };
  for (const auto& s : sections) {
    const auto mode_lines = lines_of_mode(lines, s.mode);
    if (mode_lines.empty()) continue;
    const RouterShape& shape = mode_lines.front().shape;
    if (shape.grouped())
      out += fmt::format("moe_route_grouped, E={} k={} fp32 logits, bf16 bias, groups {} of {}; {} ({})\n",
                 shape.experts, shape.k, shape.topk_group, shape.n_group, s.title,
                 mode_lines.front().timing);
    else
      out += fmt::format("moe_route_topk_softmax, E={} k={} bf16 logits, renormalize; {} ({})\n",
                 shape.experts, shape.k, s.title, mode_lines.front().timing);
    out += router_table(mode_lines);
    out += router_ratios(mode_lines) + "\n";
  }
  out += fmt::format(
      "data = logits read (+ the bias, once, for the grouped router) + weights (f32) and ids (i32) "
      "written; transfer = data at the copy "
      "ceiling of this run;\nBW util = transfer / median; overhead = baseline / median; above base "
      "= median - baseline; base = minimal_rw_kernel median, same mode;\nids/max |dw| = against "
      "the CPU reference on the same logits (check: ids equal, |dw| <= {:g}).\n\n",
      kRouterWeightTolerance);
  out += router_targets(lines_of_mode(lines, "alone"),
                                         baseline_us(baselines, "alone"));
  return out;
}

SuiteResult run_router_bench(RouterArgs args) {
  const bool grouped = args.router == "grouped";
  if (args.experts == 0) args.experts = grouped ? 256 : 128;
  validate_router_args(args.experts, args.k, args.tokens);
  std::string reason;
  const auto info = query_device(0, &reason);
  if (!info) return not_measured(fmt::format("{}: {}", kCmd, reason));
  const Device dev = Device::cuda(0);
  Report run = start_report(args.quick ? "router (quick)" : "router", *info);
  const AddRow add = [&](ResultRow r) { record_row(run, std::move(r)); };
  fmt::print(stderr, "{}{}: measuring...\n", kCmd, args.quick ? " --quick" : "");

  run.ceilings = measure_ceilings(args.quick, 0, false, false, add);
  const std::vector<Mode> modes = timing_modes(args.quick);
  const auto baselines = measure_baselines(modes, dev, add);
  std::vector<RouterLine> lines;
  for (int64_t t : args.tokens) {
    RouterShape shape{t, args.experts, args.k, 2};
    if (grouped) {
      shape.logit_bytes = 4;
      shape.n_group = args.n_group;
      shape.topk_group = args.topk_group;
      shape.bias_bytes = 2;
    }
    for (auto& l : measure_router(shape, modes, baselines, run.ceilings.copy_gbps, dev, add))
      lines.push_back(std::move(l));
  }
  cuda_allocator::empty_cache();

  SuiteResult r = report_result(run, report_text(run, baselines, lines),
                                {{"router", router_json(baselines, lines)}});
  int failed = 0;
  for (const auto& l : lines) failed += !l.check.ok();
  fail_if(r, kCmd, failed, lines.size(),
          "measured configurations FAILED the check (see the tables)");
  return r;
}

}  // namespace

SuiteRun router_command(CLI::App& cmd) {
  auto args = std::make_shared<RouterArgs>();
  cmd.add_option("--router", args->router,
                  "topk_softmax (Qwen3-MoE, Mixtral) or grouped (DeepSeek-V3: fp32 logits, bf16 "
                  "bias, sigmoid, groups, routed_scaling_factor 2.5)")
      ->check(CLI::IsMember({"topk_softmax", "grouped"}))
      ->capture_default_str();
  cmd.add_option("--experts", args->experts,
                  "Experts per token's logits row (default 128, or 256 for grouped)");
  cmd.add_option("--n-group", args->n_group, "Expert groups (grouped only)")
      ->capture_default_str();
  cmd.add_option("--topk-group", args->topk_group, "Groups kept per token (grouped only)")
      ->capture_default_str();
  cmd.add_option("--k", args->k, "Experts chosen per token")->capture_default_str();
  cmd.add_option("--tokens", args->tokens, "Token counts, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  cmd.add_flag("--quick", args->quick, "Fewer repetitions, smaller copy ceiling (smoke test)");
  return [args] { return run_router_bench(*args); };
}

}  // namespace braid::bench
