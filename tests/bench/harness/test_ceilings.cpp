// The ceilings benchmark: its plan and row arithmetic (CPU, CI), and a --quick run on a GPU.
#include <gtest/gtest.h>

#include "bench/harness/cuda/ceilings.h"
#include "bench/harness/cuda_only.h"
#include "braid/buffer.h"
#include "test_util.h"

namespace braid::bench {
namespace {

TEST(BenchCeilings, FullPlanMatchesTheBrief) {
  const CeilingsPlan p = ceilings_plan(false);
  EXPECT_EQ(p.copy_bytes, size_t{1} << 30);
  EXPECT_GE(p.copy_timing.reps, 20);
  EXPECT_GE(p.copy_timing.warmup, 1);
  ASSERT_EQ(p.gemms.size(), 2u);
  EXPECT_EQ(p.gemms[0].m, 8192);
  EXPECT_EQ(p.gemms[0].n, 8192);
  EXPECT_EQ(p.gemms[0].k, 8192);
  EXPECT_EQ(p.gemms[1].m, 8192);
  EXPECT_EQ(p.gemms[1].n, 11008);
  EXPECT_EQ(p.gemms[1].k, 4096);
  EXPECT_GE(p.gemm_timing.reps, 20);
  EXPECT_EQ(p.gemv.m, 1);
  EXPECT_EQ(p.gemv.n, 11008);
  EXPECT_EQ(p.gemv.k, 4096);
  EXPECT_GE(p.gemv_min_sets, 3);
  EXPECT_GE(p.gemv_timing.reps, 20);
  EXPECT_EQ(p.launch_alone.mode, TimingMode::per_launch);
  EXPECT_GE(p.launch_alone.reps, 1000);
  EXPECT_GE(p.launch_alone.warmup, 1);
  EXPECT_EQ(p.launch_back_to_back.mode, TimingMode::back_to_back);
  EXPECT_GE(p.launch_back_to_back.batch, 1000);
  EXPECT_EQ(p.launch_graph.mode, TimingMode::graph);
  EXPECT_GE(p.launch_graph.batch, 1000);
  for (const TimingConfig* c : {&p.copy_timing, &p.gemm_timing, &p.gemv_timing, &p.launch_alone,
                                &p.launch_back_to_back, &p.launch_graph})
    EXPECT_NO_THROW(validate(*c));
}

TEST(BenchCeilings, Fp8PlanTakesTheBestOfTwoBigShapes) {
  const CeilingsPlan p = ceilings_plan(false);
  ASSERT_EQ(p.fp8_gemms.size(), 2u);
  EXPECT_EQ(p.fp8_gemms[0].m, 8192);
  EXPECT_EQ(p.fp8_gemms[0].n, 8192);
  EXPECT_EQ(p.fp8_gemms[0].k, 8192);
  EXPECT_EQ(p.fp8_gemms[1].n, 4096);  // seed 003's first expert GEMM: N = 2I, K = H
  EXPECT_EQ(p.fp8_gemms[1].k, 7168);
  for (const GemmShape& s : p.fp8_gemms) EXPECT_EQ(s.k % 16, 0);  // cuBLASLt fp8 needs it
  ASSERT_EQ(ceilings_plan(true).fp8_gemms.size(), 1u);
  EXPECT_LT(ceilings_plan(true).fp8_gemms[0].m, 8192);
}

TEST(BenchCeilings, QuickPlanIsSmallerAndValid) {
  const CeilingsPlan full = ceilings_plan(false), quick = ceilings_plan(true);
  EXPECT_LT(quick.copy_bytes, full.copy_bytes);
  EXPECT_LT(quick.launch_alone.reps, full.launch_alone.reps);
  EXPECT_LT(quick.gemms.at(0).m * quick.gemms[0].n * quick.gemms[0].k,
            full.gemms.at(0).m * full.gemms[0].n * full.gemms[0].k);
  for (const TimingConfig* c : {&quick.copy_timing, &quick.gemm_timing, &quick.gemv_timing,
                                &quick.launch_alone, &quick.launch_back_to_back,
                                &quick.launch_graph})
    EXPECT_NO_THROW(validate(*c));
}

Stats median_only(double us) {
  Stats s;
  s.median_us = s.min_us = s.max_us = s.mean_us = us;
  s.count = 20;
  return s;
}

TEST(BenchCeilings, GemmAndGemvRowsCountFlopsAndBytes) {
  const ResultRow g = gemm_row({8192, 11008, 4096, "H100: 678"}, median_only(1089.0), "b2b");
  EXPECT_EQ(g.name, "gemm_bf16");
  EXPECT_EQ(g.params, "m=8192 n=11008 k=4096");
  EXPECT_DOUBLE_EQ(g.flops, 2.0 * 8192 * 11008 * 4096);
  EXPECT_DOUBLE_EQ(g.bytes, 2.0 * (8192.0 * 4096 + 11008.0 * 4096 + 8192.0 * 11008));
  EXPECT_EQ(g.bound, Bound::compute);
  EXPECT_EQ(g.note, "H100: 678");
  EXPECT_NEAR(*achieved_tflops(g), 678.0, 1.0);  // the anchor's own time gives its own rate

  const ResultRow v = gemv_row({1, 11008, 4096, ""}, median_only(48.0), "b2b", 3);
  EXPECT_EQ(v.name, "gemv_bf16");
  EXPECT_EQ(v.params, "11008x4096 weights, 3 copies");
  EXPECT_EQ(v.bound, Bound::memory);
  EXPECT_DOUBLE_EQ(v.bytes, 2.0 * (4096 + 11008.0 * 4096 + 11008));
  EXPECT_NEAR(*achieved_gbps(v), 1880.0, 5.0);  // ANCHORS: 48.0 us, 1.88 TB/s
}

TEST(BenchCeilings, Fp8GemmRowsCountOneBytePerOperandAndFailuresHaveNoRate) {
  const ResultRow r = fp8_gemm_row({8192, 8192, 8192, "peer"}, median_only(800.0), "b2b");
  EXPECT_EQ(r.name, kFp8GemmRow);
  EXPECT_EQ(r.bound, Bound::compute_fp8);
  EXPECT_DOUBLE_EQ(r.flops, 2.0 * 8192 * 8192 * 8192);
  EXPECT_DOUBLE_EQ(r.bytes, 8192.0 * 8192 * (1 + 1 + 2));
  EXPECT_NEAR(*achieved_tflops(r), 1374.4, 0.1);

  const ResultRow f = fp8_gemm_failed_row({8192, 4096, 7168, ""}, "cuBLASLt has no algorithm");
  EXPECT_FALSE(achieved_tflops(f).has_value());
  EXPECT_NE(f.note.find("cuBLASLt has no algorithm"), std::string::npos);
  EXPECT_EQ(ceilings_from_rows({f}).fp8_gemm_tflops, 0.0);  // not measured, not a made-up number
  const Ceilings c = ceilings_from_rows({f, r});
  EXPECT_NEAR(c.fp8_gemm_tflops, 1374.4, 0.1);
  EXPECT_EQ(c.gemm_tflops, 0.0);  // an fp8 row never stands in for the bf16 ceiling
  // % of ceiling of an fp8 row is read against the fp8 ceiling.
  Ceilings both = c;
  both.gemm_tflops = 700;
  EXPECT_NEAR(*percent_of_ceiling(r, both), 100.0, 1e-9);
}

Report measured_run() {
  Report run;
  run.has_device = true;
  run.device.name = "Test GPU";
  auto row = [](const char* name, const char* timing, double us, double bytes, double flops,
                Bound b) {
    ResultRow r;
    r.name = name;
    r.timing = timing;
    r.stats = median_only(us);
    r.bytes = bytes;
    r.flops = flops;
    r.bound = b;
    return r;
  };
  run.rows = {row("copy_memcpy", "back_to_back x5", 800, 2e9, 0, Bound::memory),   // 2500 GB/s
              row("copy_kernel", "back_to_back x5", 700, 2.1e9, 0, Bound::memory), // 3000 GB/s
              row("gemm_bf16", "back_to_back x5", 1000, 1e9, 7e11, Bound::compute),  // 700
              row("gemm_bf16", "back_to_back x5", 1000, 1e9, 6e11, Bound::compute),  // 600
              row("gemv_bf16", "back_to_back x30", 50, 9e7, 9e7, Bound::memory),     // 1800 GB/s
              row("empty_kernel", "per_launch", 4.5, 0, 0, Bound::none),
              row("empty_kernel", "back_to_back x1000", 2.25, 0, 0, Bound::none),
              row("empty_kernel", "graph x1000", 1.125, 0, 0, Bound::none),
              row("minimal_rw_kernel", "per_launch", 4.75, 0, 0, Bound::none)};
  run.ceilings = ceilings_from_rows(run.rows);
  return run;
}

TEST(BenchCeilings, CeilingsAreTheBestCopyAndTheBestGemm) {
  const Report run = measured_run();
  EXPECT_NEAR(run.ceilings.copy_gbps, 3000.0, 1e-9);
  EXPECT_NEAR(run.ceilings.gemm_tflops, 700.0, 1e-9);
  EXPECT_EQ(ceilings_from_rows({}).copy_gbps, 0.0);
}

TEST(BenchCeilings, SummaryStatesTheFp8CeilingOrWhyItIsMissing) {
  Report run = measured_run();
  run.rows.push_back(fp8_gemm_row({1000, 1000, 1000, ""}, median_only(1.0), "b2b"));  // 2000 TF/s
  run.ceilings = ceilings_from_rows(run.rows);
  EXPECT_NE(ceilings_summary(run).find("fp8 e4m3 GEMM        2000.0 TFLOP/s (2.86x bf16)"),
            std::string::npos)
      << ceilings_summary(run);
  Report failed = measured_run();
  failed.rows.push_back(fp8_gemm_failed_row({64, 64, 64, ""}, "no algorithm here"));
  failed.ceilings = ceilings_from_rows(failed.rows);
  const std::string s = ceilings_summary(failed);
  EXPECT_NE(s.find("fp8 e4m3 GEMM        -"), std::string::npos) << s;
  EXPECT_NE(s.find("no algorithm here"), std::string::npos) << s;
}

TEST(BenchCeilings, SummaryStatesCeilingsAndLaunchCosts) {
  const std::string s = ceilings_summary(measured_run());
  for (const char* frag : {"on Test GPU", "3.00 TB/s", "700.0 TFLOP/s", "1.80 TB/s",
                           "(60% of copy)", "alone 4.500 us", "back-to-back 2.250 us",
                           "in a graph 1.125 us", "alone 4.750 us", "back-to-back -"})
    EXPECT_NE(s.find(frag), std::string::npos) << "\"" << frag << "\" not in:\n" << s;
}

TEST(BenchCeilings, WithoutADeviceItSaysSoInsteadOfCrashing) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present: the GPU test covers this";
  // run_ceilings where this build has it (a build without CUDA has none, and says so).
  const auto run = [] { cuda_only(BRAID_CUDA_ONLY(run_ceilings), "bench ceilings")({}); };
  test::expect_error(run, ErrorKind::unsupported, {"bench ceilings"});
}

#if BRAID_WITH_CUDA

TEST(BenchCeilingsGpu, QuickRunMeasuresEveryRow) {
  BRAID_REQUIRE_CUDA();
  CeilingsOptions opts;
  opts.quick = true;
  int seen = 0;
  opts.on_row = [&](const ResultRow&) { ++seen; };
  const Report run = run_ceilings(opts);
  ASSERT_TRUE(run.has_device);
  EXPECT_GT(run.device.sm_count, 0);
  EXPECT_GT(run.device.l2_bytes, 0u);
  // 2 copies, 1 GEMM, 1 GEMV, 1 fp8 GEMM, 2 kernels x 3 modes.
  EXPECT_EQ(run.rows.size(), 11u);
  EXPECT_EQ(seen, static_cast<int>(run.rows.size()));
  for (const ResultRow& r : run.rows) {
    SCOPED_TRACE(r.name + " " + r.timing);
    EXPECT_GT(r.stats.median_us, 0.0);
    EXPECT_LE(r.stats.min_us, r.stats.median_us);
    EXPECT_LE(r.stats.median_us, r.stats.max_us);
    if (r.bound == Bound::memory) EXPECT_GT(*achieved_gbps(r), 1.0);
    if (r.bound == Bound::compute) EXPECT_GT(*achieved_tflops(r), 0.1);
  }
  EXPECT_GT(run.ceilings.copy_gbps, 0.0);
  EXPECT_GT(run.ceilings.gemm_tflops, 0.0);
  // Hopper's cuBLASLt runs fp8 e4m3 "TN": the quick shape must have a rate.
  EXPECT_GT(run.ceilings.fp8_gemm_tflops, 0.0);
  EXPECT_EQ(to_json(report_from_json(to_json(run))), to_json(run));
}

#endif  // BRAID_WITH_CUDA

}  // namespace
}  // namespace braid::bench
