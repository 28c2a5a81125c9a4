// `bench prefill` on the GPU: seed 001's models with random bf16 weights, one forward pass over
// each batch of prompts.
#include "bench/suites/prefill.h"

#include <CLI/CLI.hpp>

#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <memory>
#include <string>

#include "bench/harness/cuda/ceilings.h"
#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda/model_setup.h"
#include "bench/harness/cuda/timer.h"
#include "braid/error.h"
#include "core/cuda_check.h"
#include "model/forward.h"

namespace braid::bench {

namespace {

// The CPU reference forward runs fp64 dot products on one core: it checks the cases up to about
// the small model's 1 x 128 prompt (2.2e10 FLOPs, seconds), not the larger ones.
constexpr double kCpuCheckMaxFlops = 3e10;

}  // namespace

Report run_prefill(const PrefillOptions& o) {
  if ((o.batch > 0) != (o.seq_len > 0))
    throw Error(ErrorKind::invalid_argument, "bench prefill: give both --batch and --seq-len, or neither");
  std::vector<PrefillModel> models;
  if (o.models.empty()) models = prefill_models();
  for (const std::string& name : o.models) models.push_back(prefill_model(name));
  if (o.batch > 0)
    for (PrefillModel& m : models) m.cases = {{o.batch, o.seq_len, 0.0}};
  for (const PrefillModel& m : models)
    for (const PrefillCase& pc : m.cases)
      if (pc.seq_len > m.config.max_position_embeddings)
        throw Error(ErrorKind::invalid_argument,
                    fmt::format("bench prefill: {} tokens per sequence, the {} model has {} positions",
                                pc.seq_len, m.name, m.config.max_position_embeddings));
  if (!cuda_available()) throw Error(ErrorKind::unsupported, "bench prefill: no CUDA device is visible");

  const DeviceInfo info = require_device(o.device, "bench prefill");
  Report run = start_report("prefill", info);
  run.ceilings =
      measure_ceilings(o.quick, o.device, true, false, [&](ResultRow r) { run.rows.push_back(r); });

  size_t done = 0, total = 0;
  for (const PrefillModel& m : models) total += m.cases.size();
  for (const PrefillModel& m : models) {
    ModelSetupOptions so;
    so.shape = m.config;
    so.label = m.name;
    so.device = o.device;
    for (const PrefillCase& pc : m.cases) {
      so.sequences = std::max(so.sequences, pc.batch);
      so.context = std::max(so.context, pc.seq_len);
      so.max_step_tokens = std::max(so.max_step_tokens, pc.batch * pc.seq_len);
    }
    fmt::print(stderr, "  building the {} model ({} layers, hidden {}, {} heads, random weights)\n",
               m.name, m.config.num_layers, m.config.hidden_size, m.config.num_heads);
    auto mut = setup_model(so);
    OwnedTensor logits(DType::f32, {1, m.config.vocab_size}, Device::cuda(o.device));
    for (const PrefillCase& pc : m.cases) {
      fmt::print(stderr, "[{}/{}] prefill {} batch {} seq {}\n", ++done, total, m.name, pc.batch,
                 pc.seq_len);
      const StepBatch step_in = make_step_batch(*mut, pc.batch, 0, pc.seq_len, /*decode=*/false);
      const LaunchFn step = [&](int, Stream s) {
        model::forward(mut->config, mut->weights, *mut->cache, *mut->workspace, step_in.inputs,
                       step_in.tokens, /*all_logits=*/false, logits.view(), s);
      };
      step(0, {});  // plans every GEMM shape before timing
      BRAID_CUDA_CHECK(cudaDeviceSynchronize());
      const double tokens = double(pc.batch) * pc.seq_len;
      // Aim at about a second of samples per case, at least 3.
      const int reps = o.quick ? 3 : std::clamp(int(2e5 / std::max(1.0, tokens)), 5, 30);
      TimingConfig timing{TimingMode::back_to_back, 1, 1, reps, 1};
      ResultRow row{"prefill_forward",
                    fmt::format("{} batch {} seq {}", m.name, pc.batch, pc.seq_len),
                    timing_label(timing),
                    time_launches(step, timing),
                    prefill_bytes(m.config, pc.batch, pc.seq_len, 2),
                    prefill_flops(m.config, pc.batch, pc.seq_len),
                    Bound::compute,
                    ""};
      if (pc.batch == 1 && row.flops <= kCpuCheckMaxFlops) {
        fmt::print(stderr, "  checking the last token's logits against the CPU forward...\n");
        row.accuracy = check_last_logits(*mut, logits.view(), 0, pc.seq_len);
      }
      const double ms = row.stats.median_us / 1e3;
      row.note = fmt::format("{:.0f} tokens/s", tokens / (ms / 1e3));
      if (pc.seed_h100_ms > 0)
        row.note += fmt::format("; seed 001 H100 {:.1f} ms ({:.2f}x)", pc.seed_h100_ms,
                                pc.seed_h100_ms / ms);
      record_row(run, std::move(row));
    }
  }
  return run;
}

SuiteRun prefill_command(CLI::App& cmd) {
  auto o = std::make_shared<PrefillOptions>();
  cmd.add_option("--model", o->models, "small, medium and/or large (default: all)")->delimiter(',');
  cmd.add_option("--batch", o->batch, "One batch size instead of the seed's pairs");
  cmd.add_option("--seq-len", o->seq_len, "One prompt length instead of the seed's pairs");
  cmd.add_option("--device", o->device, "CUDA device index")->capture_default_str();
  cmd.add_flag("--quick", o->quick, "Fewer repetitions, smaller ceiling shapes");
  return [o] {
    for (const std::string& m : o->models) prefill_model(m);  // names a bad model
    if (!cuda_available())
      return not_measured("braidinfer bench prefill: no CUDA device is visible (nothing to measure)");
    const Report run = run_prefill(*o);
    return report_result(run, prefill_summary(run));
  };
}

}  // namespace braid::bench
