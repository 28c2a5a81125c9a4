// `braidinfer bench moe`: the bf16 MoE layer on the GPU, each step timed alone and the whole layer
// timed as one sequence and as one CUDA graph, read against the copy and bf16 GEMM ceilings
// measured in the same run (bench/moe_bench.h has the arithmetic):
//   grouped path (more than 16 tokens): router gemm, moe_route_topk_softmax, moe_permute,
//     moe_gather, moe_grouped_gemm swiglu (gate_up), moe_grouped_gemm (down), moe_combine;
//     beside it, dense cuBLAS (ops::gemm) on the same FLOPs, one GEMM per projection;
//   decode path (1-16 tokens): router gemm, route, moe_experts, over rotating input sets so that
//     the chosen experts differ between calls and their weights come from DRAM.
// Every shape is then checked on a sample of tokens against the CPU reference op
// (bench/moe_check.h), and its routing summarised (tokens per expert, Switch auxiliary loss, CV:
// bench/moe_stats.h). Shapes: seed 001's layer at 4x512, 16x2048, 32x2048 tokens; Qwen3-30B-A3B's
// at 1, 4, 16, 512, 4096 tokens (--shape, --tokens). Weights are allocated once per model,
// activations per shape.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/harness/ceilings.h"
#include "bench/harness/cuda/device.h"
#include "bench/suites/moe.h"
#include "bench/suites/moe_check.h"
#include "bench/suites/moe_layer.h"
#include "bench/suites/moe_stats.h"
#include "bench/harness/report.h"
#include "bench/harness/timer.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "commands.h"
#include "table_outputs.h"

namespace braid::cli {

namespace {

constexpr const char* kCmd = "braidinfer bench moe";
constexpr uint64_t kSeed = 0x30e5eedull;
constexpr int kDecodeSets = 4;  // rotating input sets on the decode path

struct MoeArgs {
  std::string shape = "all";
  std::vector<int64_t> tokens;
  std::string json_path;
  TablePaths tables;
  bool quick = false;
  bool skew = false;
  int samples = 64;
};

using AddRow = std::function<void(bench::ResultRow)>;

// Router logits back on the host as floats, and the chosen ids: the load statistics of a set.
bench::MoeLoadStats load_of(const bench::MoeShape& s, const bench::MoeBuffers& b) {
  const Tensor& lg = b.logits.view();
  OwnedTensor logits(lg.dtype, {lg.shape[0], lg.shape[1]}, Device::cpu());
  OwnedTensor ids(DType::i32, {s.tokens, s.model.k}, Device::cpu());
  copy(lg, logits);
  copy(b.topk_ids, ids);
  std::vector<float> f(static_cast<size_t>(lg.numel()));
  for (size_t i = 0; i < f.size(); ++i) f[i] = load_as_float(logits.data(), lg.dtype, int64_t(i));
  return bench::moe_load_stats(f.data(), ids.view().ptr<int32_t>(), s.tokens, s.model.experts,
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

// Times one step: a short per-launch estimate sizes the batches (bench::moe_timing), then the
// step is timed in `mode` over the rotating sets.
bench::ResultRow time_step(bench::MoeStep step, bench::TimingMode mode, const bench::MoeCase& c,
                           const bench::MoeWeights& w, const std::vector<bench::MoeBuffers>& sets,
                           const bench::MoeDenseBuffers* dense, bool quick,
                           const bench::Ceilings& ceil) {
  const bench::LaunchFn launch = [&](int set, Stream s) {
    bench::enqueue_moe_step(step, c.shape, w, sets[set], dense, s);
  };
  bench::TimingConfig probe{bench::TimingMode::per_launch, c.sets, 1, 2, 1};
  const double estimate_us = bench::time_launches(launch, probe).min_us;
  bench::TimingConfig cfg = bench::moe_timing(estimate_us, quick, mode);
  cfg.sets = c.sets;
  const bench::Stats st = bench::time_launches(launch, cfg);

  const bench::MoeCost cost = bench::moe_step_cost(step, c.shape, c.routing);
  bench::ResultRow r;
  r.name = bench::moe_step_name(step);
  const bench::MoeModel& m = c.shape.model;
  r.params = fmt::format("{} {} T={} E={} k={}{}", m.name, c.shape.label, c.shape.tokens, m.experts,
                         m.k, c.skew ? " skew" : "");
  r.timing = bench::timing_label(cfg) + (cfg.sets > 1 ? fmt::format(", {} sets", cfg.sets) : "");
  r.stats = st;
  r.flops = cost.flops;
  r.bytes = cost.bytes;
  r.bound = bench::roofline_bound(cost.flops, cost.bytes, ceil);
  r.note = bench::roofline_name(bench::roofline_class(cost.flops, cost.bytes, ceil));
  return r;
}

bench::MoeCase measure_case(const bench::MoeShape& shape, const bench::MoeWeights& w,
                            const bench::MoeHostWeights* host_w, const MoeArgs& args,
                            const bench::Ceilings& ceil, Device dev, const AddRow& add) {
  bench::MoeCase c;
  c.shape = shape;
  c.skew = args.skew;
  c.sets = shape.decode() ? kDecodeSets : 1;
  std::vector<bench::MoeBuffers> sets;
  for (int i = 0; i < c.sets; ++i)
    sets.push_back(bench::make_moe_buffers(shape, kSeed + 1000 * uint64_t(shape.tokens) + i, dev));

  // One forward pass per set outside any timing: the ops' argument checks, cuBLASLt's plans
  // (never made under capture), and the routing the statistics and byte counts are read from.
  for (const auto& b : sets)
    bench::enqueue_moe_step(bench::MoeStep::layer, shape, w, b, nullptr, {});
  double active = 0;
  for (int i = 0; i < c.sets; ++i) {
    const bench::MoeLoadStats load = load_of(shape, sets[i]);
    if (i == 0) c.load = load;
    active += load.active_experts;
  }
  c.routing = {shape.tokens * shape.model.k - c.load.invalid_ids, active / c.sets};
  for (const auto& b : sets) fill_bytes(b.out, 0xFF);  // NaN: a row no timed launch wrote shows

  const auto record = [&](bench::MoeStep step, bench::TimingMode mode,
                          const bench::MoeDenseBuffers* dense) {
    bench::ResultRow r = time_step(step, mode, c, w, sets, dense, args.quick, ceil);
    c.steps.push_back(step);
    c.rows.push_back(r);
    add(std::move(r));
  };
  for (bench::MoeStep step : bench::moe_components(shape.decode()))
    record(step, bench::TimingMode::graph, nullptr);
  record(bench::MoeStep::layer, bench::TimingMode::back_to_back, nullptr);
  record(bench::MoeStep::layer_graph, bench::TimingMode::graph, nullptr);

  if (args.samples > 0 && host_w) {
    fmt::print(stderr, "  checking {} {} against the CPU reference...\n", shape.model.name,
               shape.label);
    c.check =
        bench::check_moe_layer(shape, w, *host_w, sets[0], args.samples, kSeed ^ shape.tokens);
  }

  // The dense peer reads the grouped path's xs and h: one cuBLAS GEMM per projection.
  if (!shape.decode()) {
    const bench::MoeDenseBuffers dense = bench::make_moe_dense_buffers(shape, dev);
    fill_bytes(dense.gate_up_out, 0xFF);
    fill_bytes(dense.down_out, 0xFF);
    record(bench::MoeStep::dense_gate_up, bench::TimingMode::graph, &dense);
    record(bench::MoeStep::dense_down, bench::TimingMode::graph, &dense);
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
void attach_check(const bench::MoeCase& c, bench::ResultRow* rows) {
  if (!c.check) return;
  bench::Accuracy a;
  a.error = c.check->layer_vs_cpu;
  a.reference = fmt::format("cpu reference ops, {} sampled tokens", c.check->tokens);
  a.rel_l2_tolerance = bench::kMoeRelL2Tolerance;
  a.other_checks_passed = c.check->nonfinite == 0;
  for (size_t j = 0; j < c.steps.size(); ++j)
    if (c.steps[j] == bench::MoeStep::layer || c.steps[j] == bench::MoeStep::layer_graph)
      rows[j].accuracy = a;
}

void print_report(const bench::Report& run, const std::vector<bench::MoeCase>& cases) {
  fmt::print("{}", bench::describe_device(run.device));
  fmt::print("git {}, {}\n\n", run.git_commit, run.date_utc);
  fmt::print("{}\n", bench::format_table(run));
  fmt::print(
      "ceilings of this run: copy {:.2f} TB/s, bf16 GEMM {:.1f} TFLOP/s, ridge {:.0f} FLOP/B\n\n",
      run.ceilings.copy_gbps / 1000, run.ceilings.gemm_tflops,
      bench::ridge_flop_per_byte(run.ceilings));
  for (const auto& c : cases) {
    fmt::print("{}", bench::moe_case_table(c, run.ceilings));
    fmt::print("{}\n", bench::moe_summary_lines(c, run.ceilings));
  }
  fmt::print(
      "Steps are timed in CUDA graphs (GPU time; batches sized to ~10 ms per sample); moe_layer\n"
      "back_to_back = the same launches enqueued from the host.\n"
      "FLOPs: experts 2*P*H*2I + 2*P*I*H (P = pairs with a valid id), router 2*T*E*H.\n"
      "Bytes: each step's inputs read once and outputs written once, expert weights only of the\n"
      "experts that got tokens; the layer counts x, the router weight, those experts' weights and\n"
      "the output. roofline: FLOP/B below half the ridge = memory, above twice = compute, else\n"
      "balanced. share = the step's time / the layer's graph time. dense cuBLAS = ops::gemm over\n"
      "all T*k gathered rows by one expert's weights (the same FLOPs as the grouped GEMMs).\n\n");
  fmt::print("Expert load (router on random bf16 weights and inputs)\n{}\n",
             bench::moe_load_table(cases));
  fmt::print("Validation against the CPU reference\n{}", bench::moe_validation_table(cases));
}

void write_json(const bench::Report& run, const std::vector<bench::MoeCase>& cases,
                const std::string& path) {
  nlohmann::json j = bench::to_json(run);  // the standard run (report_from_json reads it)
  j["moe"] = bench::moe_json(cases, run.ceilings);
  std::ofstream f(path);
  if (!f) throw Error(ErrorKind::io, "bench moe: cannot open '" + path + "' for writing");
  f << j.dump(2) << "\n";
  f.close();
  if (!f) throw Error(ErrorKind::io, "bench moe: writing '" + path + "' failed");
}

int run_moe_bench(const MoeArgs& args) {
  const std::vector<bench::MoeShape> shapes = bench::moe_shapes(args.shape, args.tokens);
  bench::validate_moe_samples(args.samples);
  std::string reason;
  const auto info = bench::query_device(0, &reason);
  if (!info) {
    fmt::print(stderr, "{}: {}\n", kCmd, reason);
    return 2;
  }
  const Device dev = Device::cuda(0);
  const std::string suite =
      std::string("moe") + (args.quick ? " (quick)" : "") + (args.skew ? " skew" : "");
  bench::Report run = bench::start_report(suite, *info);
  const AddRow add = [&](bench::ResultRow r) { bench::record_row(run, std::move(r)); };
  fmt::print(stderr, "{}{}{}: measuring...\n", kCmd, args.quick ? " --quick" : "",
             args.skew ? " --skew" : "");
  // Ceilings first: every row's roofline class and % need them.
  bench::measure_copy_ceiling(args.quick, 0, add);
  bench::measure_gemm_ceiling(args.quick, 0, add);
  run.ceilings = bench::ceilings_from_rows(run.rows);

  std::vector<bench::MoeCase> cases;
  for (size_t i = 0; i < shapes.size();) {
    // One model's weights (seed 001: 8.7 GB) serve all its token counts, then are freed.
    const bench::MoeModel model = shapes[i].model;
    const bench::MoeWeights w = bench::make_moe_weights(model, args.skew, kSeed, dev);
    std::optional<bench::MoeHostWeights> host_w;
    if (args.samples > 0) host_w = bench::copy_weights_to_host(w);
    for (; i < shapes.size() && shapes[i].model.name == model.name; ++i) {
      const size_t first_row = run.rows.size();
      cases.push_back(
          measure_case(shapes[i], w, host_w ? &*host_w : nullptr, args, run.ceilings, dev, add));
      attach_check(cases.back(), &run.rows[first_row]);
      cuda_allocator::empty_cache();  // the next shape gets the whole card
    }
  }
  cuda_allocator::empty_cache();

  print_report(run, cases);
  if (!args.json_path.empty()) {
    write_json(run, cases, args.json_path);
    fmt::print("wrote {}\n", args.json_path);
  }
  write_table_outputs(run, args.tables);
  const auto failed = std::count_if(cases.begin(), cases.end(), [](const bench::MoeCase& c) {
    return c.check && !c.check->ok();
  });
  if (failed > 0) {
    fmt::print(stderr, "{}: {} of {} shapes FAILED the check (see the validation table)\n", kCmd,
               failed, cases.size());
    return 1;
  }
  return 0;
}

}  // namespace

void add_bench_moe_command(CLI::App* bench, int& exit_code) {
  auto args = std::make_shared<MoeArgs>();
  CLI::App* cmd = bench->add_subcommand(
      "moe",
      "bf16 MoE layer (router gemm, route, permute, gather, grouped GEMMs, combine; moe_experts "
      "for decode) per step and whole, with dense cuBLAS, load statistics and a CPU check");
  cmd->add_option("--shape", args->shape, "seed001, qwen3 or all")->capture_default_str();
  cmd->add_option("--tokens", args->tokens,
                  "Token counts, comma-separated (default: seed001 2048,32768,65536; qwen3 "
                  "1,4,16,512,4096)")
      ->delimiter(',');
  cmd->add_option("--samples", args->samples,
                  "Tokens per shape checked against the CPU reference (0: no check)")
      ->capture_default_str();
  cmd->add_flag("--skew", args->skew, "Bias the router towards a few experts (an unbalanced load)");
  cmd->add_option("--json", args->json_path, "Write the run as JSON to this file");
  add_table_output_options(cmd, args->tables);
  cmd->add_flag("--quick", args->quick, "Fewer repetitions, smaller ceiling shapes (smoke test)");
  set_cuda_callback(cmd, kCmd, exit_code, [args] { return run_moe_bench(*args); });
}

}  // namespace braid::cli
