// `braidinfer profile`: a CUPTI activity trace of one prefill and N decode steps, as per-kernel and
// per-component tables, launch gaps and a Chrome trace; with --ncu, Nsight Compute's figures and
// a roofline class for the kernels a regex picks.
#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/harness/ceilings.h"
#include "bench/suites/decode.h"
#include "bench/profile/ncu_run.h"
#include "bench/profile/profile.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "commands.h"

namespace braid::cli {

namespace {

struct ProfileArgs {
  bench::ProfileOptions options;
  std::string trace_path, json_path, md_path;
  std::string ncu_regexes;
  std::string ncu_phase = "decode";
  int ncu_launch_count = 100;
  int top = 25;
  bool ncu_child = false;  // this process runs under ncu for its parent
};

void validate(const ProfileArgs& a) {
  const auto& o = a.options;
  if (o.preset.empty() == o.model_dir.empty())
    throw Error(ErrorKind::invalid_argument, "profile: give --shape NAME or --model DIR");
  if (!o.preset.empty()) bench::decode_preset(o.preset);  // names the known shapes
  if (o.prompt_tokens < 1 || o.steps < 1)
    throw Error(ErrorKind::invalid_argument, "profile: --prompt-tokens and --steps must be >= 1");
  if (a.ncu_phase != "decode" && a.ncu_phase != "prefill")
    throw Error(ErrorKind::invalid_argument,
                fmt::format("profile: --ncu-phase must be decode or prefill, got '{}'", a.ncu_phase));
  if (a.ncu_launch_count < 1)
    throw Error(ErrorKind::invalid_argument, "profile: --ncu-launch-count must be >= 1");
  if (!a.ncu_regexes.empty()) bench::ncu_kernel_filter(a.ncu_regexes);  // empty items
}

// The arguments of the child that runs under ncu: the same model and sizes, one decode step,
// no outputs.
std::vector<std::string> child_args(const ProfileArgs& a) {
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

// Copy and GEMM ceilings of this GPU (quick sizes): the ridge points of the roofline classes.
bench::Ceilings measure_ridge_ceilings(int device, bool fp8) {
  std::vector<bench::ResultRow> rows;
  auto add = [&](bench::ResultRow r) { rows.push_back(std::move(r)); };
  bench::measure_copy_ceiling(true, device, add);
  bench::measure_gemm_ceiling(true, device, add);
  if (fp8) bench::measure_fp8_gemm_ceiling(true, device, add);
  return bench::ceilings_from_rows(rows);
}

bench::NcuSummary run_ncu_pass(const ProfileArgs& a, const std::string& ncu,
                               bench::ProfileAnalysis& analysis) {
  bench::NcuRequest request;
  request.ncu = ncu;
  request.kernel_regexes = a.ncu_regexes;
  request.launch_count = a.ncu_launch_count;
  request.log_file = temp_log_path();
  request.program = bench::self_executable();
  request.program_args = child_args(a);
  fmt::print(stderr, "profile: running Nsight Compute on the {} kernels matching '{}':\n  {}\n",
             a.ncu_phase, a.ncu_regexes, bench::shell_line(bench::ncu_command(request)));
  bench::NcuOutcome outcome = bench::run_ncu(request);
  std::remove(request.log_file.c_str());
  bool fp8 = false;
  for (const auto& k : outcome.kernels) fp8 = fp8 || k.fp8_tensor_flops.value_or(0) > 0;
  fmt::print(stderr, "profile: ncu profiled {} kernel{}; measuring the copy and GEMM ceilings for "
                     "the roofline...\n",
             outcome.kernels.size(), outcome.kernels.size() == 1 ? "" : "s");
  bench::NcuSummary summary;
  summary.ran = true;
  summary.phase = a.ncu_phase;
  summary.command = outcome.command;
  summary.missing_metrics = outcome.missing_metrics;
  summary.ceilings = measure_ridge_ceilings(a.options.device, fp8);
  bench::classify_kernels(outcome.kernels, summary.ceilings);
  bench::fold_ncu_results(analysis, outcome.kernels);
  return summary;
}

int run_profile_command(const ProfileArgs& a) {
  validate(a);
  if (!cuda_available()) {
    fmt::print(stderr, "braidinfer profile: no CUDA device is visible (nothing to profile)\n");
    return 2;
  }
  if (a.ncu_child) {
    bench::run_profile_for_ncu(a.options, a.ncu_phase);
    return 0;
  }
  const std::string ncu = a.ncu_regexes.empty() ? "" : bench::find_ncu();  // fail before the run
  fmt::print(stderr, "profile: loading the model, warming up, recording a prefill of {} tokens "
                     "and {} decode steps{}...\n",
             a.options.prompt_tokens, a.options.steps, a.options.graph ? " (graph replays)" : "");
  const bench::ProfileRun run = bench::run_profile(a.options);
  bench::ProfileAnalysis analysis = bench::analyze_profile(run.trace);
  bench::NcuSummary ncu_summary;
  if (!ncu.empty()) ncu_summary = run_ncu_pass(a, ncu, analysis);

  fmt::print("{}", bench::format_profile(run.setup, analysis, ncu_summary, a.top));
  if (!a.json_path.empty()) {
    bench::write_text(bench::profile_to_json(run.setup, analysis, ncu_summary).dump(2) + "\n",
                      a.json_path);
    fmt::print("wrote {}\n", a.json_path);
  }
  if (!a.md_path.empty()) {
    bench::write_text(bench::profile_to_markdown(run.setup, analysis, ncu_summary), a.md_path);
    fmt::print("wrote {}\n", a.md_path);
  }
  if (!a.trace_path.empty()) {
    bench::write_text(bench::chrome_trace(run.trace, analysis).dump() + "\n", a.trace_path);
    fmt::print("wrote {} (open in https://ui.perfetto.dev or chrome://tracing)\n", a.trace_path);
  }
  if (analysis.unattributed > 0 || analysis.dropped_records > 0)
    fmt::print(stderr,
               "profile: warning: {} activities could not be attributed to a phase and {} records "
               "were dropped: the tables undercount\n",
               analysis.unattributed, analysis.dropped_records);
  return 0;
}

}  // namespace

void add_profile_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ProfileArgs>();
  std::string names;
  for (const auto& n : bench::decode_preset_names()) names += (names.empty() ? "" : "|") + n;
  CLI::App* cmd = app.add_subcommand(
      "profile",
      "CUPTI trace of one prefill and N decode steps: kernels, components, launch gaps, Chrome "
      "trace; --ncu adds Nsight Compute metrics and roofline classes");
  cmd->footer(
      "Decode steps run eagerly by default; --graph replays them from one CUDA graph, which "
      "times the kernels as a graph launches them but leaves them without a component (the "
      "per-component table needs eager steps). Ranges are also NVTX push/pop ranges for nsys.");
  auto* shape = cmd->add_option("--shape", a->options.preset, "Model shape with random weights: " + names);
  auto* model = cmd->add_option("--model", a->options.model_dir, "A Hugging Face model folder");
  shape->excludes(model);
  cmd->add_option("--prompt-tokens", a->options.prompt_tokens, "Tokens in the prefill")
      ->capture_default_str();
  cmd->add_option("--steps", a->options.steps, "Decode steps recorded (batch 1, greedy)")
      ->capture_default_str();
  cmd->add_flag("--graph", a->options.graph, "Replay the decode steps from a CUDA graph");
  cmd->add_option("--trace", a->trace_path, "Write a Chrome trace JSON (Perfetto, chrome://tracing)");
  cmd->add_option("--json", a->json_path, "Write the report as JSON");
  cmd->add_option("--md", a->md_path, "Write the report as Markdown");
  cmd->add_option("--top", a->top, "Kernel rows per phase in the terminal table")
      ->capture_default_str();
  cmd->add_option("--ncu", a->ncu_regexes,
                  "Also run Nsight Compute on kernels whose function name matches one of these "
                  "comma-separated regexes (ncu: $NCU, PATH, /usr/local/cuda/bin/ncu)");
  cmd->add_option("--ncu-phase", a->ncu_phase, "Phase ncu profiles: decode (one step) or prefill")
      ->capture_default_str();
  cmd->add_option("--ncu-launch-count", a->ncu_launch_count, "Kernel launches ncu profiles at most")
      ->capture_default_str();
  cmd->add_option("--device", a->options.device, "CUDA device index")->capture_default_str();
  cmd->add_flag("--ncu-child", a->ncu_child, "(internal) the run under ncu")->group("");
  set_cuda_callback(cmd, "braidinfer profile", exit_code, [a] { return run_profile_command(*a); });
}

}  // namespace braid::cli
