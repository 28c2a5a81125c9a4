// `braidinfer bench prefill`: seed 001's end-to-end tables (one forward over a batch of prompts).
#include <fmt/core.h>

#include <memory>
#include <string>
#include <vector>

#include "bench/suites/prefill.h"
#include "bench/harness/report.h"
#include "braid/buffer.h"
#include "commands.h"
#include "table_outputs.h"

namespace braid::cli {

void add_bench_prefill_command(CLI::App* bench, int& exit_code) {
  struct Args {
    bench::PrefillOptions options;
    std::string json_path;
    TablePaths tables;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = bench->add_subcommand(
      "prefill", "Seed 001's end-to-end prefill: small/medium/large models, ms and tokens/s");
  cmd->add_option("--model", a->options.models, "small, medium and/or large (default: all)")
      ->delimiter(',');
  cmd->add_option("--batch", a->options.batch, "One batch size instead of the seed's pairs");
  cmd->add_option("--seq-len", a->options.seq_len, "One prompt length instead of the seed's pairs");
  cmd->add_option("--device", a->options.device, "CUDA device index")->capture_default_str();
  cmd->add_flag("--quick", a->options.quick, "Fewer repetitions, smaller ceiling shapes");
  cmd->add_option("--json", a->json_path, "Write the run as JSON to this file");
  add_table_output_options(cmd, a->tables);
  set_cuda_callback(cmd, "braidinfer bench prefill", exit_code, [a] {
    for (const std::string& m : a->options.models) bench::prefill_model(m);  // names a bad model
    if (!cuda_available()) {
      fmt::print(stderr, "braidinfer bench prefill: no CUDA device is visible (nothing to measure)\n");
      return 2;
    }
    const bench::Report run = bench::run_prefill(a->options);
    fmt::print("{}", bench::describe_device(run.device));
    fmt::print("git {}, {}\n\n", run.git_commit, run.date_utc);
    fmt::print("{}\n", bench::format_table(run));
    fmt::print("{}", bench::prefill_summary(run));
    if (!a->json_path.empty()) {
      bench::write_json(run, a->json_path);
      fmt::print("wrote {}\n", a->json_path);
    }
    write_table_outputs(run, a->tables);
    return 0;
  });
}

}  // namespace braid::cli
