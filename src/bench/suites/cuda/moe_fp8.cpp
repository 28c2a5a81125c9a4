// `braidinfer bench moe-fp8`: the FP8 block-scale MoE layers on the GPU, read against the copy,
// bf16 GEMM and fp8 GEMM ceilings measured in the same run (suites/moe_fp8.h has the
// arithmetic, suites/moe_fp8_layer.h the tensors and steps, suites/moe_fp8_check.h the checks):
//   seed003  seed 003's definition (DeepSeek-V3 routing over 256 experts, 32 local, H 7168,
//            I 2048) at 1, 16, 256 and 4096 tokens, for each --terms value (the intermediate's fp8
//            terms, 3 then 1): ops::moe_fp8_block_scale as a CUDA graph, against its floor; the
//            same pipeline built from the public ops, each step in its own graph and all six in
//            one; checked on sampled tokens against two fp32 references (the CPU op and the
//            definition written out in the bench) with flashinfer-bench's rule, and the pipeline
//            against the op on every token;
//   seed001  seed 001's layer (H 4096, I 11008, 32 experts, top-2) with its experts in fp8, at
//            4x512, 16x2048 and 32x2048 tokens: each step, the layer back to back and as a graph,
//            bench moe's bf16 layer on the same x, dense cuBLASLt fp8 on the same FLOPs; checked on
//            sampled tokens against fp32 arithmetic. Seed 001's H100 targets are printed beside.
// Weights are made once per layer on the GPU (seed003's 1.4 GB drawn and quantized in one pass),
// inputs per shape.
#include "bench/suites/moe_fp8.h"

#include <CLI/CLI.hpp>

#include <fmt/core.h>

#include <algorithm>
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
#include "bench/suites/moe.h"
#include "bench/suites/moe_check.h"
#include "bench/suites/moe_fp8_check.h"
#include "bench/suites/moe_fp8_layer.h"
#include "bench/suites/moe_layer.h"
#include "braid/buffer.h"
#include "braid/error.h"

namespace braid::bench {

namespace {

constexpr const char* kCmd = "braidinfer bench moe-fp8";
constexpr uint64_t kSeed = 0xf8e4b3ull;

struct MoeFp8Args {
  std::string shape = "all";
  std::vector<int64_t> tokens;
  std::vector<int> terms = {3, 1};
  bool quick = false;
  int samples = 16;
};

using AddRow = std::function<void(ResultRow)>;
using Launch = std::function<void(Stream)>;

// Times one step: a short per-launch estimate sizes the batches (moe_timing), then the
// step is timed in `mode`.
ResultRow time_step(Fp8Step step, TimingMode mode,
                           const MoeFp8Case& c, const Launch& launch, bool quick,
                           const Ceilings& ceil) {
  const LaunchFn fn = [&](int, Stream s) { launch(s); };
  const TimingConfig probe{TimingMode::per_launch, 1, 1, 2, 1};
  const double estimate_us = time_launches(fn, probe).min_us;
  const TimingConfig cfg = moe_timing(estimate_us, quick, mode);
  const Stats st = time_launches(fn, cfg);

  const Fp8Cost cost = moe_fp8_step_cost(step, c.shape, c.routing, c.terms);
  ResultRow r;
  r.name = fp8_step_name(step);
  r.params = fmt::format("{} {} T={}{}", fp8_layer_name(c.shape.layer), c.shape.label,
                         c.shape.tokens,
                         c.shape.layer == Fp8Layer::seed003
                             ? fmt::format(" terms={}", c.terms)
                             : std::string());
  r.timing = timing_label(cfg);
  r.stats = st;
  r.flops = cost.flops;
  r.bytes = cost.bytes;
  r.bound = fp8_step_bound(cost, ceil);
  r.note = roofline_name(fp8_step_roofline(cost, ceil));
  return r;
}

// Records a timed step into the case and the run.
struct Recorder {
  MoeFp8Case& c;
  const MoeFp8Args& args;
  const Ceilings& ceil;
  const AddRow& add;
  void operator()(Fp8Step step, TimingMode mode, const Launch& launch) {
    ResultRow r = time_step(step, mode, c, launch, args.quick, ceil);
    c.steps.push_back(step);
    c.rows.push_back(r);
    add(std::move(r));
  }
};

Fp8Routing routing_of(const Tensor& topk_ids, int first, int experts) {
  OwnedTensor ids(DType::i32, {topk_ids.shape[0], topk_ids.shape[1]}, Device::cpu());
  copy(topk_ids, ids);
  return fp8_routing(ids.view().ptr<int32_t>(), topk_ids.shape[0],
                            static_cast<int>(topk_ids.shape[1]), first, experts);
}

// ---- seed003 ----

void measure_seed003(const std::vector<Fp8Shape>& shapes, const MoeFp8Args& args,
                     const Ceilings& ceil, Device dev, const AddRow& add,
                     std::vector<MoeFp8Case>* cases) {
  const DsModel m = seed003_ds_model();
  const DsWeights w = make_ds_weights(m, kSeed, dev);
  std::optional<DsHostWeights> host_w;
  if (args.samples > 0) host_w = copy_ds_weights_to_host(w);
  for (const Fp8Shape& shape : shapes) {
    const DsInputs in = make_ds_inputs(m, shape.tokens, kSeed + shape.tokens, dev);
    std::optional<DsReference> ref;
    if (host_w) {
      fmt::print(stderr, "  seed003 {}: the fp32 references of {} sampled tokens...\n", shape.label,
                 std::min<int64_t>(args.samples, shape.tokens));
      ref = ds_reference(m, in, *host_w, args.samples, kSeed ^ uint64_t(shape.tokens));
    }
    for (int terms : args.terms) {
      MoeFp8Case c;
      c.shape = shape;
      c.terms = terms;
      const DsBuffers b = make_ds_buffers(m, shape.tokens, terms, dev);
      const auto enqueue = [&](Fp8Step step) {
        return [&, step](Stream s) { enqueue_ds_step(step, m, in, w, b, s); };
      };
      // One pass of each outside any timing: argument checks, and the routing the byte counts
      // and floor are read from.
      enqueue(Fp8Step::ds_op)({});
      enqueue(Fp8Step::ds_pipeline)({});
      c.routing = routing_of(b.topk_ids, m.local_offset, m.local_experts);
      fill_bytes(b.op_out, 0xFF);  // NaN: a row no timed launch wrote shows in the check
      fill_bytes(b.out, 0xFF);

      Recorder record{c, args, ceil, add};
      for (Fp8Step step : fp8_components(Fp8Layer::seed003))
        record(step, TimingMode::graph, enqueue(step));
      record(Fp8Step::ds_pipeline, TimingMode::graph,
             enqueue(Fp8Step::ds_pipeline));
      record(Fp8Step::ds_op, TimingMode::graph, enqueue(Fp8Step::ds_op));
      if (ref) {
        fmt::print(stderr, "  checking seed003 {} terms={}...\n", shape.label, terms);
        c.ds_check = check_ds_case(b, *ref);
      }
      cases->push_back(std::move(c));
    }
    cuda_allocator::empty_cache();
  }
}

// ---- seed001 in FP8 ----

void measure_seed001(const std::vector<Fp8Shape>& shapes, const MoeFp8Args& args,
                     const Ceilings& ceil, Device dev, const AddRow& add,
                     std::vector<MoeFp8Case>* cases) {
  const MoeModel model = seed001_model();
  const MoeWeights w = make_moe_weights(model, false, kSeed, dev);
  const Fp8LayerWeights w8 = quantize_moe_weights(model, w);
  std::optional<MoeHostWeights> host_w;
  std::optional<Fp8LayerHostWeights> host_w8;
  if (args.samples > 0) {
    host_w = copy_weights_to_host(w);
    host_w8 = copy_fp8_layer_weights_to_host(w8);
  }
  for (const Fp8Shape& fs : shapes) {
    const MoeShape shape{model, fs.tokens, fs.label};
    MoeFp8Case c;
    c.shape = fs;
    const MoeBuffers b = make_moe_buffers(shape, kSeed + uint64_t(fs.tokens), dev);
    const Fp8LayerBuffers b8 = make_fp8_layer_buffers(shape, dev);
    const auto enqueue = [&](Fp8Step step, const MoeDenseBuffers* dense = nullptr) {
      return [&, step, dense](Stream s) {
        enqueue_fp8_layer_step(step, shape, w, w8, b, b8, dense, s);
      };
    };
    enqueue(Fp8Step::layer)({});
    enqueue(Fp8Step::bf16_layer_graph)({});
    c.routing = routing_of(b.topk_ids, 0, model.experts);
    fill_bytes(b8.out, 0xFF);
    fill_bytes(b.out, 0xFF);

    Recorder record{c, args, ceil, add};
    for (Fp8Step step : fp8_components(Fp8Layer::seed001))
      record(step, TimingMode::graph, enqueue(step));
    record(Fp8Step::layer, TimingMode::back_to_back, enqueue(Fp8Step::layer));
    record(Fp8Step::layer_graph, TimingMode::graph,
           enqueue(Fp8Step::layer_graph));
    record(Fp8Step::bf16_layer_graph, TimingMode::graph,
           enqueue(Fp8Step::bf16_layer_graph));
    if (host_w) {
      fmt::print(stderr, "  checking seed001 FP8 {} against fp32 references...\n", fs.label);
      c.layer_check = check_fp8_layer(shape, *host_w, *host_w8, b, b8, true, args.samples,
                                             kSeed ^ uint64_t(fs.tokens));
    }
    // The dense peer: cuBLASLt fp8 over all P quantized rows by one expert's weights.
    try {
      const MoeDenseBuffers dense = make_moe_dense_buffers(shape, dev);
      enqueue(Fp8Step::dense_gate_up, &dense)({});  // the plans, outside any timing
      enqueue(Fp8Step::dense_down, &dense)({});
      fill_bytes(dense.gate_up_out, 0xFF);
      fill_bytes(dense.down_out, 0xFF);
      record(Fp8Step::dense_gate_up, TimingMode::graph,
             enqueue(Fp8Step::dense_gate_up, &dense));
      record(Fp8Step::dense_down, TimingMode::graph,
             enqueue(Fp8Step::dense_down, &dense));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::unsupported && e.kind() != ErrorKind::cublas) throw;
      c.dense_error = e.what();
      fmt::print(stderr, "  dense cuBLASLt fp8 peer not measured: {}\n", e.what());
    }
    cases->push_back(std::move(c));
    cuda_allocator::empty_cache();
  }
}

// What is printed under the run's table.
std::string report_text(const Report& run, const std::vector<MoeFp8Case>& cases) {
  std::string out;
  const Ceilings& ceil = run.ceilings;
  out += fmt::format(
      "ceilings of this run: copy {:.2f} TB/s, bf16 GEMM {:.1f} TFLOP/s, fp8 e4m3 GEMM {} "
      "(cuBLASLt, bf16 out), fp8 ridge {:.0f} FLOP/B\n\n",
      ceil.copy_gbps / 1000, ceil.gemm_tflops,
      ceil.fp8_gemm_tflops > 0 ? fmt::format("{:.1f} TFLOP/s", ceil.fp8_gemm_tflops)
                               : std::string("not measured (see its row)"),
      ridge_flop_per_byte(fp8_ceilings(ceil)));
  for (const auto& c : cases) {
    out += fmt::format("{}", moe_fp8_case_table(c, ceil));
    out += fmt::format("{}\n", moe_fp8_summary_lines(c, ceil));
  }
  out += fmt::format(
      "Steps are timed in CUDA graphs (GPU time; batches sized to ~10 ms per sample, median/min/"
      "max over the samples); moe_fp8_layer back_to_back = the same launches from the host.\n"
      "Floor = max(the active local experts' fp8 weights and scales / copy ceiling, the "
      "definition's FLOPs 2 P (2I H + H I) / fp8 GEMM ceiling), P = pairs on local experts.\n"
      "Executed FLOPs count the second GEMM once per intermediate term (terms x its FLOPs).\n"
      "Bytes: each input read once, each output written once, expert weights only of active "
      "experts (fp8 + 4 B per 128 x 128 block); %ceil against the copy, bf16 or fp8 ceiling as "
      "the row's bound.\nshare = the step's time / the whole (seed003: the pipeline of public ops; "
      "seed001: the FP8 layer graph).\ndense cuBLASLt fp8 = all P rows by one expert's "
      "weights.\n\n");
  out += fmt::format("Validation on sampled tokens\n{}", moe_fp8_validation_table(cases));
  return out;
}

// A case's checks on the run's rows of what they compare: seed003's on the op and the pipeline
// (pass = flashinfer-bench's rule and pipeline == op, the validation table's verdict; rel L2
// shown, bounded only by 1), seed001's on the whole fp8 layer (rel L2 against the fp32 reference
// of the same fp8 weights).
void attach_checks(const MoeFp8Case& c, std::vector<ResultRow>& rows) {
  auto set = [&](Fp8Step step, const Accuracy& a) {
    for (size_t j = 0; j < c.steps.size(); ++j) {
      if (c.steps[j] != step) continue;
      for (ResultRow& r : rows)
        if (r.name == c.rows[j].name && r.params == c.rows[j].params && r.timing == c.rows[j].timing)
          r.accuracy = a;
    }
  };
  if (c.ds_check) {
    Accuracy a;
    a.error = c.ds_check->vs_cpu_op;
    a.reference = fmt::format("cpu reference op, {} sampled tokens; pass = flashinfer-bench's rule",
                              c.ds_check->tokens);
    a.rel_l2_tolerance = 1.0;
    a.other_checks_passed = c.ds_check->ok();
    set(Fp8Step::ds_op, a);
    set(Fp8Step::ds_pipeline, a);
  }
  if (c.layer_check) {
    Accuracy a;
    a.error = c.layer_check->vs_fp8_fp32;
    a.reference = fmt::format("fp32 reference of the same fp8 weights, {} sampled tokens",
                              c.layer_check->tokens);
    a.rel_l2_tolerance = kFp8LayerRelL2Tolerance;
    a.other_checks_passed = c.layer_check->nonfinite == 0;
    set(Fp8Step::layer, a);
    set(Fp8Step::layer_graph, a);
  }
}

SuiteResult run_moe_fp8_bench(const MoeFp8Args& args) {
  const std::vector<Fp8Shape> shapes = moe_fp8_shapes(args.shape, args.tokens);
  validate_fp8_terms(args.terms);
  validate_moe_samples(args.samples);
  std::string reason;
  const auto info = query_device(0, &reason);
  if (!info) return not_measured(fmt::format("{}: {}", kCmd, reason));
  const Device dev = Device::cuda(0);
  Report run = start_report(std::string("moe-fp8") + (args.quick ? " (quick)" : ""),
                                          *info);
  const AddRow add = [&](ResultRow r) { record_row(run, std::move(r)); };
  fmt::print(stderr, "{}{}: measuring...\n", kCmd, args.quick ? " --quick" : "");
  // Ceilings first: every row's roofline class, % and the floors need them.
  run.ceilings = measure_ceilings(args.quick, 0, true, true, add);

  std::vector<Fp8Shape> ds, layer;
  for (const auto& s : shapes) (s.layer == Fp8Layer::seed003 ? ds : layer).push_back(s);
  std::vector<MoeFp8Case> cases;
  if (!ds.empty()) measure_seed003(ds, args, run.ceilings, dev, add, &cases);
  cuda_allocator::empty_cache();
  if (!layer.empty()) measure_seed001(layer, args, run.ceilings, dev, add, &cases);
  cuda_allocator::empty_cache();

  for (const MoeFp8Case& c : cases) attach_checks(c, run.rows);
  SuiteResult r =
      report_result(run, report_text(run, cases), {{"moe_fp8", moe_fp8_json(cases, run.ceilings)}});
  const auto failed = std::count_if(cases.begin(), cases.end(), [](const MoeFp8Case& c) {
    return (c.ds_check && !c.ds_check->ok()) || (c.layer_check && !c.layer_check->ok());
  });
  fail_if(r, kCmd, failed, cases.size(), "cases FAILED the check (see the validation table)");
  return r;
}

}  // namespace

SuiteRun moe_fp8_command(CLI::App& cmd) {
  auto args = std::make_shared<MoeFp8Args>();
  cmd.add_option("--shape", args->shape, "seed003, seed001 or all")->capture_default_str();
  cmd.add_option("--tokens", args->tokens,
                  "Token counts, comma-separated (default: seed003 1,16,256,4096; seed001 "
                  "2048,32768,65536)")
      ->delimiter(',');
  cmd.add_option("--terms", args->terms,
                  "seed003's intermediate_terms values, comma-separated (1..3)")
      ->delimiter(',')
      ->capture_default_str();
  cmd.add_option("--samples", args->samples,
                  "Tokens per shape checked against the host references (0: no check)")
      ->capture_default_str();
  cmd.add_flag("--quick", args->quick, "Fewer repetitions, smaller ceiling shapes (smoke test)");
  return [args] { return run_moe_fp8_bench(*args); };
}

}  // namespace braid::bench
