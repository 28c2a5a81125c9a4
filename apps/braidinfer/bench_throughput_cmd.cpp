// `braidinfer bench throughput`: the serving engine offline, N prompts at once, against the
// step-time floor of the same run's ceilings.
#include <fmt/core.h>

#include <memory>
#include <string>

#include "bench/suites/throughput.h"
#include "braid/buffer.h"
#include "commands.h"
#include "table_outputs.h"

namespace braid::cli {

void add_bench_throughput_command(CLI::App* bench, int& exit_code) {
  struct Args {
    bench::ThroughputOptions options;
    std::string device = "auto";
    bool enforce_eager = false, no_prefix_caching = false;
    std::string json_path;
    TablePaths tables;
  };
  auto a = std::make_shared<Args>();
  bench::ThroughputOptions& o = a->options;
  CLI::App* cmd = bench->add_subcommand(
      "throughput", "The serving engine offline: N random prompts at once, tokens/s against the step-time floor");
  auto* model = cmd->add_option("--model", o.model_dir, "Hugging Face model folder");
  auto* shape = cmd->add_option("--shape", o.shape, "A named model shape with random weights (CUDA)");
  model->excludes(shape);
  cmd->add_option("--input-len", o.input_len, "Prompt tokens")->capture_default_str();
  cmd->add_option("--output-len", o.output_len, "Generated tokens per prompt")->capture_default_str();
  cmd->add_option("--num-prompts", o.num_prompts, "Prompts")->capture_default_str();
  cmd->add_option("--range-ratio", o.range_ratio, "Lengths uniform in [len (1-r), len (1+r)]");
  cmd->add_option("--seed", o.seed, "Prompt seed")->capture_default_str();
  cmd->add_option("--device", a->device, "cpu, cuda or auto")->capture_default_str();
  cmd->add_option("--max-model-len", o.engine.max_model_len, "Context length");
  cmd->add_option("--max-num-seqs", o.engine.max_num_seqs, "Sequences in a batch at most")
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", o.engine.max_num_batched_tokens, "Tokens per step at most")
      ->capture_default_str();
  cmd->add_option("--gpu-memory-utilization", o.engine.gpu_memory_utilization,
                  "Share of the free GPU memory for the KV cache")
      ->capture_default_str();
  cmd->add_option("--num-kv-pages", o.engine.num_kv_pages, "KV cache pages (overrides the share)");
  cmd->add_flag("--enforce-eager", a->enforce_eager, "No CUDA graphs");
  cmd->add_flag("--no-enable-prefix-caching", a->no_prefix_caching, "Prefix caching off");
  cmd->add_flag("--quick-ceilings", o.quick_ceilings, "Smaller ceiling measurements");
  cmd->add_option("--json", a->json_path, "Write the run as JSON to this file");
  add_table_output_options(cmd, a->tables);
  cmd->callback([a, &exit_code] {
    bench::ThroughputOptions& o = a->options;
    o.engine.device = device_from_option(a->device, "bench throughput");
    o.engine.cuda_graphs = !a->enforce_eager;
    o.engine.enable_prefix_caching = !a->no_prefix_caching;
    if (o.engine.max_model_len == 0)
      o.engine.max_model_len = static_cast<int>(o.input_len * (1 + o.range_ratio)) +
                               static_cast<int>(o.output_len * (1 + o.range_ratio)) + 1;
    const bench::ThroughputRun run = bench::run_throughput(o);
    if (run.report.has_device) fmt::print("{}", bench::describe_device(run.report.device));
    fmt::print("git {}, {}\n\n", run.report.git_commit, run.report.date_utc);
    fmt::print("{}\n", bench::format_table(run.report));
    fmt::print("{}", run.summary);
    if (!a->json_path.empty()) {
      bench::write_json(run.report, a->json_path);
      fmt::print("wrote {}\n", a->json_path);
    }
    write_table_outputs(run.report, a->tables);
    exit_code = 0;
  });
}

}  // namespace braid::cli
