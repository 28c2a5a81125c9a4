// `braidinfer profile`: its options; the run is bench/profile/command.h.
#include <fmt/core.h>

#include <memory>
#include <string>

#include "bench/harness/cuda_only.h"
#include "bench/profile/command.h"
#include "bench/suites/decode.h"
#include "commands.h"

namespace braid::cli {

void add_profile_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<bench::ProfileCommandOptions>();
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
  cmd->callback([a, &exit_code] {
    const auto run = BRAID_CUDA_ONLY(bench::run_profile_command);
    if (!run) {
      fmt::print(stderr, "braidinfer profile: this build has no CUDA support\n");
      exit_code = 2;
      return;
    }
    exit_code = run(*a);
  });
}

}  // namespace braid::cli
