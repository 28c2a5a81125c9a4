// `braidinfer bench kernels`: every op of include/braid/ops.h on the GPU over shape sweeps from
// the models braidinfer runs, each row timed (back to back over rotating input sets), read against
// the copy, bf16 GEMM and fp8 GEMM ceilings of the same run, and checked against the op's CPU
// reference on the same inputs (bench/kernel_suite.h). Exits 1 when any case failed its check or
// could not be measured, after printing and writing everything.
//   --list   the case list, bytes and FLOPs, without a GPU
//   --only   a comma list of op names ("gemm,rms_norm")
#include <fmt/core.h>

#include <memory>
#include <string>

#include "bench/suites/kernels.h"
#include "bench/harness/report.h"
#include "braid/buffer.h"
#include "commands.h"
#include "table_outputs.h"

namespace braid::cli {

namespace {

constexpr const char* kCmd = "braidinfer bench kernels";

struct KernelsArgs {
  bench::KernelSuiteOptions suite;
  std::string json_path;
  TablePaths tables;
  bool list = false;
};

int list_cases(const KernelsArgs& args) {
  const auto cases = bench::select_kernel_cases(bench::kernel_cases(args.suite.quick), args.suite.only);
  fmt::print("{}", bench::kernel_case_list(cases));
  return 0;
}

int run_kernels(const KernelsArgs& args) {
  if (!BRAID_WITH_CUDA) {
    fmt::print(stderr, "{}: this build has no CUDA support (--list works without it)\n", kCmd);
    return 2;
  }
  if (!cuda_available()) {
    fmt::print(stderr, "{}: no CUDA device is visible (nothing to measure; --list works)\n", kCmd);
    return 2;
  }
  fmt::print(stderr, "{}{}: measuring...\n", kCmd, args.suite.quick ? " --quick" : "");
  const bench::Report run = bench::run_kernel_suite(args.suite);
  fmt::print("{}", bench::describe_device(run.device));
  fmt::print("git {}, {}\n\n", run.git_commit, run.date_utc);
  fmt::print("{}\n", bench::format_table(run));
  fmt::print(
      "bytes = every input read once + every output written once (MoE: the experts that get "
      "tokens); FLOPs 2mnk for products, none for elementwise ops.\n"
      "check = the output against the op's CPU reference on the same inputs (sampled rows on big "
      "shapes, see the JSON's accuracy.reference), rel L2 within the dtype's tolerance "
      "(exact for ids and copies).\n"
      "ceilings of this run: copy {:.2f} TB/s, bf16 GEMM {:.1f} TFLOP/s, fp8 GEMM {:.1f} TFLOP/s\n",
      run.ceilings.copy_gbps / 1000, run.ceilings.gemm_tflops, run.ceilings.fp8_gemm_tflops);
  if (!args.json_path.empty()) {
    bench::write_json(run, args.json_path);
    fmt::print("wrote {}\n", args.json_path);
  }
  write_table_outputs(run, args.tables);
  const int failed = bench::kernel_suite_failures(run);
  if (failed > 0) {
    fmt::print(stderr, "{}: {} case{} FAILED (check column FAIL, or FAILED in the note)\n", kCmd,
               failed, failed == 1 ? "" : "s");
    return 1;
  }
  return 0;
}

}  // namespace

void add_bench_kernels_command(CLI::App* bench, int& exit_code) {
  auto args = std::make_shared<KernelsArgs>();
  CLI::App* cmd = bench->add_subcommand(
      "kernels",
      "Every op (norms, RoPE, GEMMs, attention, MoE, FP8) over model shapes: time, GB/s, "
      "TFLOP/s, % of ceiling, and a check against the CPU reference on every row");
  cmd->add_flag("--quick", args->suite.quick, "A few cases per op family (smoke test, < 30 s)");
  cmd->add_option("--only", args->suite.only, "Comma list of op names to run (default: all)");
  cmd->add_option("--device", args->suite.device, "CUDA device index")->capture_default_str();
  cmd->add_option("--json", args->json_path, "Write the run as JSON to this file");
  add_table_output_options(cmd, args->tables);
  cmd->add_flag("--list", args->list, "Print the cases (bytes, FLOPs, tolerance) and exit; no GPU");
  // Not set_cuda_callback: --list must work in a build without CUDA.
  cmd->callback([args, &exit_code] { exit_code = args->list ? list_cases(*args) : run_kernels(*args); });
}

}  // namespace braid::cli
