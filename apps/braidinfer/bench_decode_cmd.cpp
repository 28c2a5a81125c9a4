// `braidinfer bench decode`: one decode step of a model shape, eager and as a CUDA graph.
#include <fmt/core.h>

#include <memory>
#include <string>

#include "bench/suites/decode.h"
#include "bench/harness/report.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "commands.h"
#include "table_outputs.h"

namespace braid::cli {

void add_bench_decode_command(CLI::App* bench, int& exit_code) {
  struct Args {
    bench::DecodeOptions options;
    std::string json_path;
    TablePaths tables;
  };
  auto a = std::make_shared<Args>();
  std::string names;
  for (const auto& n : bench::decode_preset_names()) names += (names.empty() ? "" : "|") + n;
  CLI::App* d = bench->add_subcommand("decode", "Time one decode step (ms/token, GB/s, % of floor)");
  auto* shape = d->add_option("--shape", a->options.preset, "Model shape with random weights: " + names);
  auto* model = d->add_option("--model", a->options.model_dir, "A Hugging Face model folder");
  shape->excludes(model);
  d->add_option("--batch", a->options.batch, "Sequences decoded together")->capture_default_str();
  d->add_option("--context", a->options.context, "Tokens in each sequence's KV cache")
      ->capture_default_str();
  d->add_option("--device", a->options.device, "CUDA device index")->capture_default_str();
  d->add_flag("--quick", a->options.quick, "Fewer repetitions");
  d->add_flag("--breakdown", a->options.breakdown,
              "Also time each component of the step (eager, CUDA events between components)");
  d->add_option("--json", a->json_path, "Write the run as JSON to this file");
  add_table_output_options(d, a->tables);
  d->callback([a, &exit_code] {
    if (a->options.preset.empty() && a->options.model_dir.empty())
      throw braid::Error(braid::ErrorKind::invalid_argument, "bench decode: give --shape NAME or --model DIR");
    if (!a->options.preset.empty()) bench::decode_preset(a->options.preset);  // names a bad shape
    if (!BRAID_WITH_CUDA || !cuda_available()) {
      fmt::print(stderr, "braidinfer bench decode: no usable CUDA device (nothing to measure)\n");
      exit_code = 2;
      return;
    }
    const bench::Report run = bench::run_decode(a->options);
    fmt::print("{}", bench::describe_device(run.device));
    fmt::print("git {}, {}; copy ceiling {:.0f} GB/s\n\n", run.git_commit, run.date_utc,
               run.ceilings.copy_gbps);
    fmt::print("{}\n", bench::format_table(run));
    fmt::print("{}", bench::decode_summary(run));
    if (!a->json_path.empty()) {
      bench::write_json(run, a->json_path);
      fmt::print("wrote {}\n", a->json_path);
    }
    write_table_outputs(run, a->tables);
    exit_code = 0;
  });
}

}  // namespace braid::cli
