// `braidinfer bench moe`: the bf16 MoE layer on the GPU, each step timed alone and the whole layer
// timed as one sequence and as one CUDA graph, read against the copy and bf16 GEMM ceilings
// measured in the same run (suites/moe.h has the arithmetic):
//   grouped path (more than 16 tokens): router gemm, moe_route_topk_softmax, moe_permute,
//     moe_gather, moe_grouped_gemm swiglu (gate_up), moe_grouped_gemm (down), moe_combine;
//     beside it, dense cuBLAS (ops::gemm) on the same FLOPs, one GEMM per projection;
//   decode path (1-16 tokens): router gemm, route, moe_experts, over rotating input sets so that
//     the chosen experts differ between calls and their weights come from DRAM.
// Every shape is then checked on a sample of tokens against the CPU reference op
// (suites/moe_check.h), and its routing summarised (tokens per expert, Switch auxiliary loss, CV:
// suites/moe_stats.h). Shapes: seed 001's layer at 4x512, 16x2048, 32x2048 tokens; Qwen3-30B-A3B's
// at 1, 4, 16, 512, 4096 tokens (--shape, --tokens). Weights are allocated once per model,
// activations per shape.
#include "bench/suites/moe.h"

#include <CLI/CLI.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/harness/cuda/ceilings.h"
#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda/timer.h"
#include "bench/harness/report.h"
#include "bench/harness/suite.h"
#include "bench/suites/moe_check.h"
#include "bench/suites/moe_layer.h"
#include "bench/suites/moe_stats.h"
#include "braid/buffer.h"
#include "braid/error.h"

namespace braid::bench {

namespace {

constexpr const char* kCmd = "braidinfer bench moe";
constexpr uint64_t kSeed = 0x30e5eedull;
constexpr int kDecodeSets = 4;  // rotating input sets on the decode path

struct MoeArgs {
  std::string shape = "all";
  std::vector<int64_t> tokens;
  bool quick = false;
  bool skew = false;
  int samples = 64;
};

using AddRow = std::function<void(ResultRow)>;

// Router logits back on the host as floats, and the chosen ids: the load statistics of a set.
MoeLoadStats load_of(const MoeShape& s, const MoeBuffers& b) {
  const Tensor& lg = b.logits.view();
  OwnedTensor logits(lg.dtype, {lg.shape[0], lg.shape[1]}, Device::cpu());
  OwnedTensor ids(DType::i32, {s.tokens, s.model.k}, Device::cpu());
  copy(lg, logits);
  copy(b.topk_ids, ids);
  std::vector<float> f(static_cast<size_t>(lg.numel()));
  for (size_t i = 0; i < f.size(); ++i) f[i] = load_as_float(logits.data(), lg.dtype, int64_t(i));
  return moe_load_stats(f.data(), ids.view().ptr<int32_t>(), s.tokens, s.model.experts,
                               s.model.k);
}

// True when row `row` of a [rows, n] device tensor holds only finite values: the outputs were
// poisoned with NaN before timing, so a NaN here means the timed launches never wrote it.
bool row_is_finite(const Tensor& t, int64_t row) {
  const Tensor r = t.select(0, row);
  OwnedTensor host(t.dtype, {r.shape[0]}, Device::cpu());
  copy(r, host);
  for (int64_t i = 0; i < r.shape[0]; ++i)
    if (!std::isfinite(load_as_float(host.data(), t.dtype, i))) return false;
  return true;
}

// Times one step: a short per-launch estimate sizes the batches (moe_timing), then the
// step is timed in `mode` over the rotating sets.
ResultRow time_step(MoeStep step, TimingMode mode, const MoeCase& c,
                           const MoeWeights& w, const std::vector<MoeBuffers>& sets,
                           const MoeDenseBuffers* dense, bool quick,
                           const Ceilings& ceil) {
  const LaunchFn launch = [&](int set, Stream s) {
    enqueue_moe_step(step, c.shape, w, sets[set], dense, s);
  };
  TimingConfig probe{TimingMode::per_launch, c.sets, 1, 2, 1};
  const double estimate_us = time_launches(launch, probe).min_us;
  TimingConfig cfg = moe_timing(estimate_us, quick, mode);
  cfg.sets = c.sets;
  const Stats st = time_launches(launch, cfg);

  const MoeCost cost = moe_step_cost(step, c.shape, c.routing);
  ResultRow r;
  r.name = moe_step_name(step);
  const MoeModel& m = c.shape.model;
  r.params = fmt::format("{} {} T={} E={} k={}{}", m.name, c.shape.label, c.shape.tokens, m.experts,
                         m.k, c.skew ? " skew" : "");
  r.timing = timing_label(cfg) + (cfg.sets > 1 ? fmt::format(", {} sets", cfg.sets) : "");
  r.stats = st;
  r.flops = cost.flops;
  r.bytes = cost.bytes;
  r.bound = roofline_bound(cost.flops, cost.bytes, ceil);
  r.note = roofline_name(roofline_class(cost.flops, cost.bytes, ceil));
  return r;
}

MoeCase measure_case(const MoeShape& shape, const MoeWeights& w,
                            const MoeHostWeights* host_w, const MoeArgs& args,
                            const Ceilings& ceil, Device dev, const AddRow& add) {
  MoeCase c;
  c.shape = shape;
  c.skew = args.skew;
  c.sets = shape.decode() ? kDecodeSets : 1;
  std::vector<MoeBuffers> sets;
  for (int i = 0; i < c.sets; ++i)
    sets.push_back(make_moe_buffers(shape, kSeed + 1000 * uint64_t(shape.tokens) + i, dev));

  // One forward pass per set outside any timing: the ops' argument checks, cuBLASLt's plans
  // (never made under capture), and the routing the statistics and byte counts are read from.
  for (const auto& b : sets)
    enqueue_moe_step(MoeStep::layer, shape, w, b, nullptr, {});
  double active = 0;
  for (int i = 0; i < c.sets; ++i) {
    const MoeLoadStats load = load_of(shape, sets[i]);
    if (i == 0) c.load = load;
    active += load.active_experts;
  }
  c.routing = {shape.tokens * shape.model.k - c.load.invalid_ids, active / c.sets};
  for (const auto& b : sets) fill_bytes(b.out, 0xFF);  // NaN: a row no timed launch wrote shows

  const auto record = [&](MoeStep step, TimingMode mode,
                          const MoeDenseBuffers* dense) {
    ResultRow r = time_step(step, mode, c, w, sets, dense, args.quick, ceil);
    c.steps.push_back(step);
    c.rows.push_back(r);
    add(std::move(r));
  };
  for (MoeStep step : moe_components(shape.decode()))
    record(step, TimingMode::graph, nullptr);
  record(MoeStep::layer, TimingMode::back_to_back, nullptr);
  record(MoeStep::layer_graph, TimingMode::graph, nullptr);

  if (args.samples > 0 && host_w) {
    fmt::print(stderr, "  checking {} {} against the CPU reference...\n", shape.model.name,
               shape.label);
    c.check =
        check_moe_layer(shape, w, *host_w, sets[0], args.samples, kSeed ^ shape.tokens);
  }

  // The dense peer reads the grouped path's xs and h: one cuBLAS GEMM per projection.
  if (!shape.decode()) {
    const MoeDenseBuffers dense = make_moe_dense_buffers(shape, dev);
    fill_bytes(dense.gate_up_out, 0xFF);
    fill_bytes(dense.down_out, 0xFF);
    record(MoeStep::dense_gate_up, TimingMode::graph, &dense);
    record(MoeStep::dense_down, TimingMode::graph, &dense);
    const int64_t last = shape.tokens * shape.model.k - 1;
    if (!row_is_finite(dense.gate_up_out, last) || !row_is_finite(dense.down_out, last))
      throw Error(ErrorKind::internal,
                  fmt::format("{}: {} {}: the dense peer left its output unwritten", kCmd,
                              shape.model.name, shape.label));
  }
  return c;
}

// The case's CPU check on the rows of the whole layer (the output it compares), in the run:
// `rows` points at the case's first row there (its rows are recorded in c.steps order).
void attach_check(const MoeCase& c, ResultRow* rows) {
  if (!c.check) return;
  Accuracy a;
  a.error = c.check->layer_vs_cpu;
  a.reference = fmt::format("cpu reference ops, {} sampled tokens", c.check->tokens);
  a.rel_l2_tolerance = kMoeRelL2Tolerance;
  a.other_checks_passed = c.check->nonfinite == 0;
  for (size_t j = 0; j < c.steps.size(); ++j)
    if (c.steps[j] == MoeStep::layer || c.steps[j] == MoeStep::layer_graph)
      rows[j].accuracy = a;
}

// What is printed under the run's table.
std::string report_text(const Report& run, const std::vector<MoeCase>& cases) {
  std::string out;
  out += fmt::format(
      "ceilings of this run: copy {:.2f} TB/s, bf16 GEMM {:.1f} TFLOP/s, ridge {:.0f} FLOP/B\n\n",
      run.ceilings.copy_gbps / 1000, run.ceilings.gemm_tflops,
      ridge_flop_per_byte(run.ceilings));
  for (const auto& c : cases) {
    out += fmt::format("{}", moe_case_table(c, run.ceilings));
    out += fmt::format("{}\n", moe_summary_lines(c, run.ceilings));
  }
  out += fmt::format(
      "Steps are timed in CUDA graphs (GPU time; batches sized to ~10 ms per sample); moe_layer\n"
      "back_to_back = the same launches enqueued from the host.\n"
      "FLOPs: experts 2*P*H*2I + 2*P*I*H (P = pairs with a valid id), router 2*T*E*H.\n"
      "Bytes: each step's inputs read once and outputs written once, expert weights only of the\n"
      "experts that got tokens; the layer counts x, the router weight, those experts' weights and\n"
      "the output. roofline: FLOP/B below half the ridge = memory, above twice = compute, else\n"
      "balanced. share = the step's time / the layer's graph time. dense cuBLAS = ops::gemm over\n"
      "all T*k gathered rows by one expert's weights (the same FLOPs as the grouped GEMMs).\n\n");
  out += fmt::format("Expert load (router on random bf16 weights and inputs)\n{}\n",
             moe_load_table(cases));
  out += fmt::format("Validation against the CPU reference\n{}", moe_validation_table(cases));
  return out;
}

SuiteResult run_moe_bench(const MoeArgs& args) {
  const std::vector<MoeShape> shapes = moe_shapes(args.shape, args.tokens);
  validate_moe_samples(args.samples);
  std::string reason;
  const auto info = query_device(0, &reason);
  if (!info) return not_measured(fmt::format("{}: {}", kCmd, reason));
  const Device dev = Device::cuda(0);
  const std::string suite =
      std::string("moe") + (args.quick ? " (quick)" : "") + (args.skew ? " skew" : "");
  Report run = start_report(suite, *info);
  const AddRow add = [&](ResultRow r) { record_row(run, std::move(r)); };
  fmt::print(stderr, "{}{}{}: measuring...\n", kCmd, args.quick ? " --quick" : "",
             args.skew ? " --skew" : "");
  // Ceilings first: every row's roofline class and % need them.
  run.ceilings = measure_ceilings(args.quick, 0, true, false, add);

  std::vector<MoeCase> cases;
  for (size_t i = 0; i < shapes.size();) {
    // One model's weights (seed 001: 8.7 GB) serve all its token counts, then are freed.
    const MoeModel model = shapes[i].model;
    const MoeWeights w = make_moe_weights(model, args.skew, kSeed, dev);
    std::optional<MoeHostWeights> host_w;
    if (args.samples > 0) host_w = copy_weights_to_host(w);
    for (; i < shapes.size() && shapes[i].model.name == model.name; ++i) {
      const size_t first_row = run.rows.size();
      cases.push_back(
          measure_case(shapes[i], w, host_w ? &*host_w : nullptr, args, run.ceilings, dev, add));
      attach_check(cases.back(), &run.rows[first_row]);
      cuda_allocator::empty_cache();  // the next shape gets the whole card
    }
  }
  cuda_allocator::empty_cache();

  SuiteResult r =
      report_result(run, report_text(run, cases), {{"moe", moe_json(cases, run.ceilings)}});
  const auto failed = std::count_if(cases.begin(), cases.end(), [](const MoeCase& c) {
    return c.check && !c.check->ok();
  });
  fail_if(r, kCmd, failed, cases.size(), "shapes FAILED the check (see the validation table)");
  return r;
}

}  // namespace

SuiteRun moe_command(CLI::App& cmd) {
  auto args = std::make_shared<MoeArgs>();
  cmd.add_option("--shape", args->shape, "seed001, qwen3 or all")->capture_default_str();
  cmd.add_option("--tokens", args->tokens,
                  "Token counts, comma-separated (default: seed001 2048,32768,65536; qwen3 "
                  "1,4,16,512,4096)")
      ->delimiter(',');
  cmd.add_option("--samples", args->samples,
                  "Tokens per shape checked against the CPU reference (0: no check)")
      ->capture_default_str();
  cmd.add_flag("--skew", args->skew, "Bias the router towards a few experts (an unbalanced load)");
  cmd.add_flag("--quick", args->quick, "Fewer repetitions, smaller ceiling shapes (smoke test)");
  return [args] { return run_moe_bench(*args); };
}

}  // namespace braid::bench
