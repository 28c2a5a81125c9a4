// `braidinfer profile` on the GPU: the recording, the ncu pass and the report (profile/command.h).
#include "bench/profile/command.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/harness/cuda/ceilings.h"
#include "bench/profile/ncu_run.h"
#include "bench/suites/decode.h"
#include "braid/buffer.h"
#include "braid/error.h"

namespace braid::bench {

namespace {

void validate(const ProfileCommandOptions& a) {
  const auto& o = a.options;
  if (o.preset.empty() == o.model_dir.empty())
    throw Error(ErrorKind::invalid_argument, "profile: give --shape NAME or --model DIR");
  if (!o.preset.empty()) decode_preset(o.preset);  // names the known shapes
  if (o.prompt_tokens < 1 || o.steps < 1)
    throw Error(ErrorKind::invalid_argument, "profile: --prompt-tokens and --steps must be >= 1");
  if (a.ncu_phase != "decode" && a.ncu_phase != "prefill")
    throw Error(ErrorKind::invalid_argument,
                fmt::format("profile: --ncu-phase must be decode or prefill, got '{}'",
                            a.ncu_phase));
  if (a.ncu_launch_count < 1)
    throw Error(ErrorKind::invalid_argument, "profile: --ncu-launch-count must be >= 1");
  if (!a.ncu_regexes.empty()) ncu_kernel_filter(a.ncu_regexes);  // empty items
}

// The arguments of the child that runs under ncu: the same model and sizes, one decode step,
// no outputs.
std::vector<std::string> child_args(const ProfileCommandOptions& a) {
  const auto& o = a.options;
  std::vector<std::string> args = {"profile"};
  if (!o.preset.empty()) args.insert(args.end(), {"--shape", o.preset});
  else args.insert(args.end(), {"--model", o.model_dir});
  args.insert(args.end(), {"--prompt-tokens", fmt::format("{}", o.prompt_tokens), "--steps", "1",
                           "--device", fmt::format("{}", o.device), "--ncu-phase", a.ncu_phase,
                           "--ncu-child"});
  return args;
}

// A fresh file name for ncu's log.
std::string temp_log_path() {
  std::string path = "/tmp/braidinfer-ncu-XXXXXX.csv";
  const int fd = mkstemps(path.data(), 4);
  if (fd < 0) throw Error(ErrorKind::io, "profile --ncu: cannot create a temporary file in /tmp");
  close(fd);
  return path;
}

NcuSummary run_ncu_pass(const ProfileCommandOptions& a, const std::string& ncu,
                               ProfileAnalysis& analysis) {
  NcuRequest request;
  request.ncu = ncu;
  request.kernel_regexes = a.ncu_regexes;
  request.launch_count = a.ncu_launch_count;
  request.log_file = temp_log_path();
  request.program = self_executable();
  request.program_args = child_args(a);
  fmt::print(stderr, "profile: running Nsight Compute on the {} kernels matching '{}':\n  {}\n",
             a.ncu_phase, a.ncu_regexes, shell_line(ncu_command(request)));
  NcuOutcome outcome = run_ncu(request);
  std::remove(request.log_file.c_str());
  bool fp8 = false;
  for (const auto& k : outcome.kernels) fp8 = fp8 || k.fp8_tensor_flops.value_or(0) > 0;
  fmt::print(stderr, "profile: ncu profiled {} kernel{}; measuring the copy and GEMM ceilings for "
                     "the roofline...\n",
             outcome.kernels.size(), outcome.kernels.size() == 1 ? "" : "s");
  NcuSummary summary;
  summary.ran = true;
  summary.phase = a.ncu_phase;
  summary.command = outcome.command;
  summary.missing_metrics = outcome.missing_metrics;
  summary.ceilings = measure_ceilings(true, a.options.device, true, fp8, [](ResultRow) {});
  classify_kernels(outcome.kernels, summary.ceilings);
  fold_ncu_results(analysis, outcome.kernels);
  return summary;
}

}  // namespace

int run_profile_command(const ProfileCommandOptions& a) {
  validate(a);
  if (!cuda_available()) {
    fmt::print(stderr, "braidinfer profile: no CUDA device is visible (nothing to profile)\n");
    return 2;
  }
  if (a.ncu_child) {
    run_profile_for_ncu(a.options, a.ncu_phase);
    return 0;
  }
  const std::string ncu = a.ncu_regexes.empty() ? "" : find_ncu();  // fail before the run
  fmt::print(stderr, "profile: loading the model, warming up, recording a prefill of {} tokens "
                     "and {} decode steps{}...\n",
             a.options.prompt_tokens, a.options.steps, a.options.graph ? " (graph replays)" : "");
  const ProfileRun run = run_profile(a.options);
  ProfileAnalysis analysis = analyze_profile(run.trace);
  NcuSummary ncu_summary;
  if (!ncu.empty()) ncu_summary = run_ncu_pass(a, ncu, analysis);

  fmt::print("{}", format_profile(run.setup, analysis, ncu_summary, a.top));
  if (!a.json_path.empty()) {
    write_text(profile_to_json(run.setup, analysis, ncu_summary).dump(2) + "\n",
                      a.json_path);
    fmt::print("wrote {}\n", a.json_path);
  }
  if (!a.md_path.empty()) {
    write_text(profile_to_markdown(run.setup, analysis, ncu_summary), a.md_path);
    fmt::print("wrote {}\n", a.md_path);
  }
  if (!a.trace_path.empty()) {
    write_text(chrome_trace(run.trace, analysis).dump() + "\n", a.trace_path);
    fmt::print("wrote {} (open in https://ui.perfetto.dev or chrome://tracing)\n", a.trace_path);
  }
  if (analysis.unattributed > 0 || analysis.dropped_records > 0)
    fmt::print(stderr,
               "profile: warning: {} activities could not be attributed to a phase and {} records "
               "were dropped: the tables undercount\n",
               analysis.unattributed, analysis.dropped_records);
  return 0;
}


}  // namespace braid::bench
