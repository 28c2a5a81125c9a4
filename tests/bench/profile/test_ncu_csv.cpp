// bench/profile/ncu_csv.h and bench/profile/ncu_run.h: Nsight Compute's CSV as `ncu --csv --page raw` prints it
// (a sample written in the format an H100 run printed: ncu's messages first, quoted fields, a
// units line, thousands separators), the folding per kernel, seed 004's roofline classes, and the
// ncu command line.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "bench/profile/ncu_csv.h"
#include "bench/profile/ncu_run.h"
#include "braid/error.h"

namespace braid::bench {
namespace {

// Three launches of two kernels; the GEMV was profiled twice. Columns as ncu prints them: the
// launch's identity, then metric names (each rollup it reports), sorted.
const char* kSample =
    "==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling "
    "results may be inconsistent.\n"
    "==PROF== Connected to process 581 (/usr/local/bin/braidinfer)\n"
    "==PROF== Disconnected from process 581\n"
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\","
    "\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"dram__bytes.sum\","
    "\"dram__throughput.avg.pct_of_peak_sustained_elapsed\","
    "\"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed\","
    "\"gpu__time_duration.sum\",\"l1tex__t_sector_hit_rate.pct\",\"lts__t_sector_hit_rate.pct\","
    "\"sm__cycles_elapsed.avg.per_second\",\"sm__ops_path_tensor_src_bf16_dst_fp32.sum\","
    "\"sm__ops_path_tensor_src_fp16.sum\",\"sm__ops_path_tensor_src_fp8.sum\","
    "\"sm__ops_path_tensor_src_tf32_dst_fp32.sum\","
    "\"sm__sass_thread_inst_executed_op_fadd_pred_on.sum\","
    "\"sm__sass_thread_inst_executed_op_ffma_pred_on.sum\","
    "\"sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained\","
    "\"sm__sass_thread_inst_executed_op_fmul_pred_on.sum\","
    "\"sm__throughput.avg.pct_of_peak_sustained_elapsed\","
    "\"sm__warps_active.avg.pct_of_peak_sustained_active\"\n"
    "\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"byte\",\"%\",\"%\",\"ns\",\"%\",\"%\","
    "\"hz\",\"\",\"\",\"\",\"\",\"inst\",\"inst\",\"inst/cycle\",\"inst\",\"%\",\"%\"\n"
    "\"0\",\"581\",\"braidinfer\",\"127.0.0.1\",\"_ZN5braid3ops4gemvEv\",\"1\",\"13\",\"(256, 1, 1)\","
    "\"(132, 1, 1)\",\"0\",\"9.0\",\"12,228,864\",\"80.50\",\"82.25\",\"4,300\",\"45.02\",\"60.00\","
    "\"1,962,743,717.87\",\"0\",\"0\",\"0\",\"0\",\"1,000\",\"2,000,000\",\"16,896\",\"500\",\"20.25\","
    "\"50.60\"\n"
    "\"1\",\"581\",\"braidinfer\",\"127.0.0.1\",\"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT\",\"1\","
    "\"13\",\"(384, 1, 1)\",\"(132, 1, 1)\",\"0\",\"9.0\",\"178,677,504\",\"30.16\",\"69.79\","
    "\"176,768\",\"0\",\"74.74\",\"1,593,925,285.39\",\"137,438,953,472\",\"0\",\"0\",\"0\",\"0\","
    "\"0\",\"16,896\",\"0\",\"90.22\",\"14.64\"\n"
    "\"2\",\"581\",\"braidinfer\",\"127.0.0.1\",\"_ZN5braid3ops4gemvEv\",\"1\",\"13\",\"(256, 1, 1)\","
    "\"(132, 1, 1)\",\"0\",\"9.0\",\"12,337,408\",\"79.50\",\"81.75\",\"4,100\",\"44.98\",\"62.00\","
    "\"1,962,364,829.42\",\"0\",\"0\",\"0\",\"0\",\"1,000\",\"2,000,000\",\"16,896\",\"500\",\"19.75\","
    "\"50.40\"\n";

TEST(NcuCsv, SplitsQuotedFields) {
  EXPECT_EQ(split_csv_line("\"a\",\"(256, 1, 1)\",\"1,980,000\""),
            (std::vector<std::string>{"a", "(256, 1, 1)", "1,980,000"}));
  EXPECT_EQ(split_csv_line("\"say \"\"hi\"\"\",,x\r"), (std::vector<std::string>{"say \"hi\"", "", "x"}));
  EXPECT_EQ(split_csv_line(""), (std::vector<std::string>{""}));
}

TEST(NcuCsv, Numbers) {
  EXPECT_EQ(parse_ncu_number("1,980,000"), 1980000.0);
  EXPECT_EQ(parse_ncu_number("1980000"), 1980000.0);
  EXPECT_EQ(parse_ncu_number("62.50"), 62.5);
  EXPECT_EQ(parse_ncu_number("1,962,743,717.87"), 1962743717.87);
  EXPECT_EQ(parse_ncu_number(" -3 "), -3.0);
  EXPECT_EQ(parse_ncu_number("1e+06"), 1e6);
  EXPECT_FALSE(parse_ncu_number(""));
  EXPECT_FALSE(parse_ncu_number("n/a"));
  EXPECT_FALSE(parse_ncu_number("PolicySpread"));
  EXPECT_FALSE(parse_ncu_number("12abc"));
}

TEST(NcuCsv, Units) {
  EXPECT_EQ(to_base_unit(4.3, "usecond"), 4300.0);
  EXPECT_EQ(to_base_unit(4.3, "us"), 4300.0);
  EXPECT_EQ(to_base_unit(2, "msecond"), 2e6);
  EXPECT_EQ(to_base_unit(1.5, "Mbyte"), 1.5e6);
  EXPECT_EQ(to_base_unit(1.5, "Ghz"), 1.5e9);
  EXPECT_EQ(to_base_unit(80.5, "%"), 80.5);
  EXPECT_EQ(to_base_unit(7, "inst"), 7.0);
}

TEST(NcuCsv, ParsesTheRawPage) {
  const NcuTable t = parse_ncu_csv(kSample);
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.header.size(), t.units.size());
  EXPECT_EQ(t.column("Kernel Name"), 4);
  EXPECT_EQ(t.column("Block Size"), 7);
  EXPECT_EQ(t.rows[0][7], "(256, 1, 1)");
  EXPECT_EQ(t.units[static_cast<size_t>(t.column("gpu__time_duration.sum"))], "ns");
  EXPECT_EQ(t.column("no such metric"), -1);
}

TEST(NcuCsv, NoTableIsAnErrorQuotingNcu) {
  const std::string none =
      "==PROF== Connected to process 787 (/usr/local/bin/braidinfer)\n"
      "==PROF== Disconnected from process 787\n"
      "==WARNING== No kernels were profiled.\n"
      "Available Kernels:\n1. gemv\n";
  try {
    parse_ncu_csv(none);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("No kernels were profiled"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("1. gemv"), std::string::npos);
  }
  EXPECT_THROW(parse_ncu_csv(""), Error);
  // A row cut short.
  EXPECT_THROW(parse_ncu_csv("\"ID\",\"Kernel Name\",\"x\"\n\"\",\"\",\"\"\n\"0\",\"k\"\n"), Error);
  // A header with no units line.
  EXPECT_THROW(parse_ncu_csv("\"ID\",\"Kernel Name\",\"x\"\n"), Error);
}

TEST(NcuCsv, FoldsLaunchesPerKernel) {
  const auto kernels = fold_ncu_table(parse_ncu_csv(kSample));
  ASSERT_EQ(kernels.size(), 2u);
  const NcuKernelMetrics& gemv = kernels[0];
  EXPECT_EQ(gemv.kernel, "_ZN5braid3ops4gemvEv");
  EXPECT_EQ(gemv.launches, 2);
  EXPECT_DOUBLE_EQ(*gemv.sm_pct, 20.0);
  EXPECT_DOUBLE_EQ(*gemv.dram_pct, 80.0);
  EXPECT_DOUBLE_EQ(*gemv.memory_pct, 82.0);
  EXPECT_DOUBLE_EQ(*gemv.occupancy_pct, 50.5);
  EXPECT_DOUBLE_EQ(*gemv.l1_hit_pct, 45.0);
  EXPECT_DOUBLE_EQ(*gemv.l2_hit_pct, 61.0);
  EXPECT_DOUBLE_EQ(*gemv.duration_us, 4.2);
  EXPECT_DOUBLE_EQ(*gemv.dram_bytes, (12228864.0 + 12337408.0) / 2);
  EXPECT_DOUBLE_EQ(*gemv.fp32_flops, 1000 + 500 + 2 * 2000000.0);
  EXPECT_DOUBLE_EQ(*gemv.tensor_flops, 0.0);
  EXPECT_DOUBLE_EQ(*gemv.flops(), 4001500.0);
  EXPECT_NEAR(*gemv.fp32_peak_flops_per_s, 2 * 16896 * (1962743717.87 + 1962364829.42) / 2, 1);
  EXPECT_NEAR(*gemv.intensity(), 4001500.0 / *gemv.dram_bytes, 1e-12);

  const NcuKernelMetrics& gemm = kernels[1];
  EXPECT_EQ(gemm.launches, 1);
  EXPECT_DOUBLE_EQ(*gemm.tensor_flops, 137438953472.0);
  EXPECT_DOUBLE_EQ(*gemm.fp8_tensor_flops, 0.0);
  EXPECT_DOUBLE_EQ(*gemm.duration_us, 176.768);
  EXPECT_TRUE(missing_ncu_metrics(parse_ncu_csv(kSample)).empty());
}

TEST(NcuCsv, MissingMetricsAreReportedNotInvented) {
  const std::string small =
      "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n"
      "\"\",\"\",\"usecond\"\n"
      "\"0\",\"k\",\"1.5\"\n";
  const NcuTable t = parse_ncu_csv(small);
  const auto kernels = fold_ncu_table(t);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_DOUBLE_EQ(*kernels[0].duration_us, 1.5);
  EXPECT_FALSE(kernels[0].sm_pct);
  EXPECT_FALSE(kernels[0].flops());
  EXPECT_FALSE(kernels[0].intensity());
  const auto missing = missing_ncu_metrics(t);
  EXPECT_EQ(missing.size(), ncu_metric_names().size() - 1);
  EXPECT_EQ(std::set<std::string>(missing.begin(), missing.end()).count("gpu__time_duration.sum"), 0u);
}

TEST(NcuCsv, MetricList) {
  const std::string list = ncu_metric_list();
  for (const char* m : {"sm__throughput.avg.pct_of_peak_sustained_elapsed",
                        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
                        "sm__warps_active.avg.pct_of_peak_sustained_active",
                        "l1tex__t_sector_hit_rate.pct", "lts__t_sector_hit_rate.pct",
                        "gpu__time_duration.sum", "dram__bytes.sum"})
    EXPECT_NE(list.find(m), std::string::npos) << m;
  EXPECT_EQ(list.find(' '), std::string::npos);
}

NcuKernelMetrics kernel_with(double sm, double mem, double flops, double bytes) {
  NcuKernelMetrics m;
  m.sm_pct = sm;
  m.memory_pct = mem;
  m.fp32_flops = flops;
  m.dram_bytes = bytes;
  return m;
}

TEST(NcuCsv, Seed004Classes) {
  const double ridge = 20;
  EXPECT_EQ(classify_kernel(kernel_with(10, 80, 1e6, 1e6), ridge), KernelBound::memory);
  EXPECT_EQ(classify_kernel(kernel_with(90, 30, 1e9, 1e6), ridge), KernelBound::compute);
  // Below the ridge but memory not meaningfully above SM: balanced.
  EXPECT_EQ(classify_kernel(kernel_with(15, 20, 1e6, 1e6), ridge), KernelBound::balanced);
  // Above the ridge but SM not meaningfully above memory: balanced.
  EXPECT_EQ(classify_kernel(kernel_with(50, 45, 1e9, 1e6), ridge), KernelBound::balanced);
  // Below the ridge with SM far above memory (integer work): neither, balanced.
  EXPECT_EQ(classify_kernel(kernel_with(80, 10, 0, 1e6), ridge), KernelBound::balanced);
  // No DRAM bytes: infinite intensity.
  EXPECT_TRUE(std::isinf(*kernel_with(90, 20, 1e6, 0).intensity()));
  EXPECT_EQ(classify_kernel(kernel_with(90, 20, 1e6, 0), ridge), KernelBound::compute);
  // Unknown without a ridge or a throughput.
  EXPECT_EQ(classify_kernel(kernel_with(10, 80, 1e6, 1e6), 0), KernelBound::unknown);
  NcuKernelMetrics no_sm = kernel_with(10, 80, 1e6, 1e6);
  no_sm.sm_pct.reset();
  EXPECT_EQ(classify_kernel(no_sm, ridge), KernelBound::unknown);
  EXPECT_STREQ(kernel_bound_name(KernelBound::compute), "compute-bound");
}

TEST(NcuCsv, RidgePerKernel) {
  Ceilings c;
  c.copy_gbps = 3000;
  c.gemm_tflops = 600;
  c.fp8_gemm_tflops = 1200;
  NcuKernelMetrics fp32 = kernel_with(10, 80, 1e6, 1e6);
  fp32.fp32_peak_flops_per_s = 60e12;
  EXPECT_DOUBLE_EQ(kernel_ridge(fp32, c), 20.0);
  NcuKernelMetrics tensor = fp32;
  tensor.tensor_flops = 1e9;
  EXPECT_DOUBLE_EQ(kernel_ridge(tensor, c), 200.0);
  NcuKernelMetrics fp8 = tensor;
  fp8.fp8_tensor_flops = 1e9;
  EXPECT_DOUBLE_EQ(kernel_ridge(fp8, c), 400.0);
  EXPECT_EQ(kernel_ridge(fp32, Ceilings{}), 0.0);

  std::vector<NcuKernelMetrics> ks = {fp32};
  classify_kernels(ks, c);
  EXPECT_DOUBLE_EQ(ks[0].ridge, 20.0);
  EXPECT_EQ(ks[0].bound, KernelBound::memory);
}

TEST(NcuRun, KernelFilter) {
  EXPECT_EQ(ncu_kernel_filter("gemv"), "regex:(gemv)");
  EXPECT_EQ(ncu_kernel_filter("gemv,attention.*"), "regex:(gemv)|(attention.*)");
  EXPECT_THROW(ncu_kernel_filter(""), Error);
  EXPECT_THROW(ncu_kernel_filter("a,,b"), Error);
  EXPECT_THROW(ncu_kernel_filter("a,"), Error);
}

TEST(NcuRun, Command) {
  NcuRequest r;
  r.ncu = "/opt/ncu";
  r.kernel_regexes = "gemv";
  r.launch_count = 7;
  r.log_file = "/tmp/log.csv";
  r.program = "/usr/bin/braidinfer";
  r.program_args = {"profile", "--shape", "tiny", "--ncu-child"};
  const auto argv = ncu_command(r);
  ASSERT_GE(argv.size(), 10u);
  EXPECT_EQ(argv[0], "/opt/ncu");
  auto after = [&](const std::string& flag) {
    for (size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == flag) return argv[i + 1];
    return std::string("(absent)");
  };
  EXPECT_EQ(after("--clock-control"), "none");
  EXPECT_EQ(after("--profile-from-start"), "off");
  EXPECT_EQ(after("--kernel-name"), "regex:(gemv)");
  EXPECT_EQ(after("--launch-count"), "7");
  EXPECT_EQ(after("--page"), "raw");
  EXPECT_EQ(after("--print-units"), "base");
  EXPECT_EQ(after("--print-kernel-base"), "mangled");
  EXPECT_EQ(after("--metrics"), ncu_metric_list());
  EXPECT_EQ(after("--log-file"), "/tmp/log.csv");
  // The program and its arguments come last.
  const std::vector<std::string> tail(argv.end() - 5, argv.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"/usr/bin/braidinfer", "profile", "--shape", "tiny",
                                            "--ncu-child"}));
  EXPECT_EQ(shell_line({"ncu", "--kernel-name", "regex:(a)|(b)", "it's"}),
            "ncu --kernel-name 'regex:(a)|(b)' 'it'\\''s'");
}

TEST(NcuRun, FindsNcu) {
  std::set<std::string> files;
  auto exists = [&](const std::string& p) { return files.count(p) > 0; };
  EXPECT_THROW(find_ncu_in("", "/usr/bin:/bin", exists), Error);
  files = {"/usr/local/cuda/bin/ncu"};
  EXPECT_EQ(find_ncu_in("", "/usr/bin:/bin", exists), "/usr/local/cuda/bin/ncu");
  files.insert("/opt/nsight/ncu");
  EXPECT_EQ(find_ncu_in("", "/usr/bin::/opt/nsight", exists), "/opt/nsight/ncu");
  files.insert("/home/me/ncu");
  EXPECT_EQ(find_ncu_in("/home/me/ncu", "/opt/nsight", exists), "/home/me/ncu");
  try {
    find_ncu_in("/nowhere/ncu", "/opt/nsight", exists);
    FAIL() << "a bad $NCU must not fall back silently";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("/nowhere/ncu"), std::string::npos);
  }
}

TEST(NcuRun, RunsCommands) {
  EXPECT_EQ(run_command({"true"}), 0);
  EXPECT_EQ(run_command({"false"}), 1);
  EXPECT_EQ(run_command({"/nonexistent/program"}), 127);
  EXPECT_FALSE(self_executable().empty());
  EXPECT_THROW(read_text_file("/nonexistent/file"), Error);
}

}  // namespace
}  // namespace braid::bench
