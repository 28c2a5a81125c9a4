// `braidinfer bench ...`: benchmark suites. `bench ceilings` measures the GPU's own limits.
#include <fmt/core.h>

#include <memory>
#include <string>

#include "bench/harness/ceilings.h"
#include "bench/harness/report.h"
#include "braid/buffer.h"
#include "commands.h"
#include "table_outputs.h"

namespace braid::cli {

namespace {

struct CeilingsArgs {
  std::string json_path;
  TablePaths tables;
  bool quick = false;
  int device = 0;
};

int run_ceilings_command(const CeilingsArgs& args) {
  if (!BRAID_WITH_CUDA) {
    fmt::print(stderr, "braidinfer bench ceilings: this build of braidinfer has no CUDA support\n");
    return 2;
  }
  if (!cuda_available()) {
    fmt::print(stderr, "braidinfer bench ceilings: no CUDA device is visible (nothing to measure)\n");
    return 2;
  }
  bench::CeilingsOptions opts;
  opts.quick = args.quick;
  opts.device = args.device;
  opts.on_row = [](const bench::ResultRow& r) {
    fmt::print(stderr, "  measured {} {} [{}]: {} us\n", r.name, r.params, r.timing,
               bench::format_us(r.stats.median_us));
  };
  fmt::print(stderr, "braidinfer bench ceilings{}: measuring...\n", args.quick ? " --quick" : "");
  const bench::Report run = bench::run_ceilings(opts);
  fmt::print("{}", bench::describe_device(run.device));
  fmt::print("git {}, {}\n\n", run.git_commit, run.date_utc);
  fmt::print("{}\n", bench::format_table(run));
  fmt::print("{}", bench::ceilings_summary(run));
  if (!args.json_path.empty()) {
    bench::write_json(run, args.json_path);
    fmt::print("wrote {}\n", args.json_path);
  }
  write_table_outputs(run, args.tables);
  return 0;
}

}  // namespace

void set_cuda_callback(CLI::App* cmd, const char* name, int& exit_code, std::function<int()> run) {
  cmd->callback([name, &exit_code, run = std::move(run)] {
    if (!BRAID_WITH_CUDA) {
      fmt::print(stderr, "{}: this build has no CUDA support\n", name);
      exit_code = 2;
      return;
    }
    exit_code = run();
  });
}

void add_bench_commands(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  add_bench_decode_command(bench, exit_code);
  add_bench_attention_command(bench, exit_code);
  add_bench_attention_decode_command(bench, exit_code);
  add_bench_gemv_command(bench, exit_code);
  add_bench_router_command(bench, exit_code);
  add_bench_moe_command(bench, exit_code);
  add_bench_moe_fp8_command(bench, exit_code);
  add_bench_kernels_command(bench, exit_code);
  add_bench_prefill_command(bench, exit_code);
  add_bench_all_command(bench, exit_code);
  add_bench_throughput_command(bench, exit_code);
  add_bench_serve_command(bench, exit_code);

  auto args = std::make_shared<CeilingsArgs>();
  CLI::App* ceilings = bench->add_subcommand(
      "ceilings",
      "Measure copy bandwidth, bf16 GEMM/GEMV and fp8 GEMM rates and kernel launch costs");
  ceilings->add_option("--json", args->json_path, "Write the run as JSON to this file");
  add_table_output_options(ceilings, args->tables);
  ceilings->add_flag("--quick", args->quick, "Smaller sizes and fewer repetitions (smoke test)");
  ceilings->add_option("--device", args->device, "CUDA device index")->capture_default_str();
  ceilings->callback([args, &exit_code] { exit_code = run_ceilings_command(*args); });
}

}  // namespace braid::cli
