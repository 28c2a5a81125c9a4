// Results model: rates, JSON, table (CPU only, runs in CI) on a synthetic run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <unistd.h>

#include "bench/harness/report.h"
#include "test_util.h"

namespace braid::bench {
namespace {

Stats stats(double median, double lo, double hi, int n = 20) {
  Stats s;
  s.median_us = median;
  s.min_us = lo;
  s.max_us = hi;
  s.mean_us = (lo + hi) / 2;
  s.count = n;
  return s;
}

DeviceInfo h100() {
  DeviceInfo d;
  d.index = 0;
  d.name = "NVIDIA H100 80GB HBM3";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.memory_bytes = 85'520'809'984ull;
  d.l2_bytes = 52'428'800;
  d.sm_clock_mhz = 1980;
  d.memory_clock_mhz = 2619;
  d.memory_bus_bits = 5120;
  d.driver_version = 13000;
  d.runtime_version = 13000;
  d.cublas_version = 130100;
  return d;
}

// copy: 2 GiB moved in 700 us; GEMM 8192^3 in 1400 us; an empty kernel.
Report synthetic_run() {
  Report run;
  run.suite = "ceilings";
  run.git_commit = "0123456789ab";
  run.date_utc = "2026-11-22T10:04:05Z";
  run.has_device = true;
  run.device = h100();
  run.ceilings.copy_gbps = 3000.0;
  run.ceilings.gemm_tflops = 800.0;
  run.rows.push_back({"copy_kernel", "1.00 GiB", "back_to_back x5", stats(700.0, 690.0, 720.5),
                      2.0 * (1 << 30), 0, Bound::memory, "H100: 3.00 TB/s"});
  run.rows.push_back({"gemm_bf16", "m=8192 n=8192 k=8192", "back_to_back x5",
                      stats(1400.0, 1390.0, 1500.0), 3.0 * 2 * 8192.0 * 8192, 2.0 * 8192.0 * 8192 * 8192,
                      Bound::compute, ""});
  run.rows.push_back({"empty_kernel", "<<<1, 1>>>", "graph x1000", stats(1.0234, 0.98, 1.5, 20),
                      0, 0, Bound::none, ""});
  return run;
}

TEST(BenchReport, RatesComeFromTheMedian) {
  Report run = synthetic_run();
  EXPECT_NEAR(*achieved_gbps(run.rows[0]), 2.0 * (1 << 30) / 700e-6 / 1e9, 1e-9);
  EXPECT_FALSE(achieved_tflops(run.rows[0]).has_value());
  EXPECT_NEAR(*achieved_tflops(run.rows[1]), 2.0 * 8192.0 * 8192 * 8192 / 1400e-6 / 1e12, 1e-9);
  EXPECT_FALSE(achieved_gbps(run.rows[2]).has_value());
  EXPECT_FALSE(achieved_tflops(run.rows[2]).has_value());
}

TEST(BenchReport, PercentOfCeilingFollowsTheBound) {
  Report run = synthetic_run();
  EXPECT_NEAR(*percent_of_ceiling(run.rows[0], run.ceilings),
              100.0 * *achieved_gbps(run.rows[0]) / 3000.0, 1e-9);
  EXPECT_NEAR(*percent_of_ceiling(run.rows[1], run.ceilings),
              100.0 * *achieved_tflops(run.rows[1]) / 800.0, 1e-9);
  EXPECT_FALSE(percent_of_ceiling(run.rows[2], run.ceilings).has_value());
  EXPECT_FALSE(percent_of_ceiling(run.rows[0], Ceilings{}).has_value());  // not measured
}

TEST(BenchReport, DeviceDescription) {
  DeviceInfo d = h100();
  d.kernel_driver = "580.159.04";
  EXPECT_NEAR(reported_peak_gbps(d), 2 * 2619e6 * 640 / 1e9, 1e-6);  // 3352 GB/s
  EXPECT_EQ(cuda_version_string(13000), "13.0");
  EXPECT_EQ(cuda_version_string(12080), "12.8");
  EXPECT_EQ(cublas_version_string(130100), "13.1.0");
  EXPECT_EQ(cublas_version_string(120803), "12.8.3");
  const std::string s = describe_device(d);
  for (const char* frag : {"NVIDIA H100 80GB HBM3", "compute capability 9.0", "132 SMs",
                           "L2 50.0 MiB", "5120 bit", "2619 MHz", "3352 GB/s", "1980 MHz",
                           "driver 580.159.04 (CUDA 13.0)", "runtime 13.0", "cuBLASLt 13.1.0"})
    EXPECT_NE(s.find(frag), std::string::npos) << "\"" << frag << "\" not in:\n" << s;
}

TEST(BenchReport, JsonHoldsEveryField) {
  const Report run = synthetic_run();
  const nlohmann::json j = to_json(run);
  EXPECT_EQ(j["schema"], "braidinfer.bench.run/1");
  EXPECT_EQ(j["suite"], "ceilings");
  EXPECT_EQ(j["git_commit"], "0123456789ab");
  EXPECT_EQ(j["date_utc"], "2026-11-22T10:04:05Z");
  const auto& d = j["device"];
  EXPECT_EQ(d["name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d["sm_count"], 132);
  EXPECT_EQ(d["compute_capability"], "9.0");
  EXPECT_EQ(d["l2_bytes"], 52'428'800);
  EXPECT_EQ(d["memory_bytes"], 85'520'809'984ull);
  EXPECT_EQ(d["sm_clock_mhz"], 1980);
  EXPECT_EQ(d["memory_clock_mhz"], 2619);
  EXPECT_EQ(d["driver_version"], "13.0");
  EXPECT_EQ(d["runtime_version"], "13.0");
  EXPECT_EQ(d["cublas_version"], "13.1.0");
  EXPECT_DOUBLE_EQ(j["ceilings"]["copy_gbps"].get<double>(), 3000.0);
  ASSERT_EQ(j["rows"].size(), 3u);
  const auto& copy = j["rows"][0];
  EXPECT_EQ(copy["name"], "copy_kernel");
  EXPECT_EQ(copy["timing"], "back_to_back x5");
  EXPECT_EQ(copy["samples"], 20);
  EXPECT_DOUBLE_EQ(copy["median_us"].get<double>(), 700.0);
  EXPECT_DOUBLE_EQ(copy["max_us"].get<double>(), 720.5);
  EXPECT_EQ(copy["bound"], "memory");
  EXPECT_NEAR(copy["gbps"].get<double>(), *achieved_gbps(run.rows[0]), 1e-9);
  EXPECT_TRUE(copy["tflops"].is_null());
  EXPECT_NEAR(copy["percent_of_ceiling"].get<double>(), 102.26, 0.01);
  EXPECT_EQ(copy["note"], "H100: 3.00 TB/s");
  const auto& empty = j["rows"][2];
  EXPECT_TRUE(empty["gbps"].is_null());
  EXPECT_TRUE(empty["tflops"].is_null());
  EXPECT_TRUE(empty["percent_of_ceiling"].is_null());
}

TEST(BenchReport, Fp8RowsAndCeilingRoundTrip) {
  Report run = synthetic_run();
  run.ceilings.fp8_gemm_tflops = 1400.0;
  run.rows.push_back({"gemm_fp8_e4m3", "m=8192 n=8192 k=8192", "back_to_back x5",
                      stats(700.0, 690.0, 720.0), 4.0 * 8192.0 * 8192, 2.0 * 8192.0 * 8192 * 8192,
                      Bound::compute_fp8, ""});
  const nlohmann::json j = to_json(run);
  EXPECT_DOUBLE_EQ(j["ceilings"]["fp8_gemm_tflops"].get<double>(), 1400.0);
  EXPECT_EQ(j["rows"].back()["bound"], "compute_fp8");
  // 1571 TFLOP/s against the fp8 ceiling, not the bf16 one.
  EXPECT_NEAR(j["rows"].back()["percent_of_ceiling"].get<double>(),
              100.0 * 2.0 * 8192.0 * 8192 * 8192 / 700.0 / 1e6 / 1400.0, 1e-6);
  const Report back = report_from_json(j);
  EXPECT_EQ(back.ceilings.fp8_gemm_tflops, 1400.0);
  EXPECT_EQ(back.rows.back().bound, Bound::compute_fp8);
  EXPECT_EQ(to_json(back), j);
  // Results from before the fp8 ceiling: the field is absent, read as "not measured".
  nlohmann::json old = j;
  old["ceilings"].erase("fp8_gemm_tflops");
  EXPECT_EQ(report_from_json(old).ceilings.fp8_gemm_tflops, 0.0);
  // fp8_ceilings puts the fp8 rate in the GEMM slot: the ridge of fp8 work.
  EXPECT_DOUBLE_EQ(ridge_flop_per_byte(fp8_ceilings(run.ceilings)), 1400.0 * 1e3 / 3000.0);
}

TEST(BenchReport, JsonWithoutDeviceOrCeilingsUsesNull) {
  Report run;
  run.suite = "x";
  const nlohmann::json j = to_json(run);
  EXPECT_TRUE(j["device"].is_null());
  EXPECT_TRUE(j["ceilings"]["copy_gbps"].is_null());
  EXPECT_TRUE(j["ceilings"]["gemm_tflops"].is_null());
  EXPECT_TRUE(j["rows"].is_array());
  const Report back = report_from_json(j);
  EXPECT_FALSE(back.has_device);
  EXPECT_EQ(back.ceilings.copy_gbps, 0.0);
  EXPECT_TRUE(back.rows.empty());
}

TEST(BenchReport, JsonRoundTripsThroughAFile) {
  const Report run = synthetic_run();
  const std::string path = testing::TempDir() + "braid_bench_report_test.json";
  write_json(run, path);
  std::ifstream f(path);
  ASSERT_TRUE(f.good());
  const Report back = report_from_json(nlohmann::json::parse(f));
  std::remove(path.c_str());
  EXPECT_EQ(back.suite, run.suite);
  EXPECT_EQ(back.git_commit, run.git_commit);
  EXPECT_EQ(back.date_utc, run.date_utc);
  ASSERT_TRUE(back.has_device);
  EXPECT_EQ(back.device.name, run.device.name);
  EXPECT_EQ(back.device.memory_bytes, run.device.memory_bytes);
  EXPECT_EQ(back.device.cc_major, 9);
  EXPECT_EQ(back.device.cublas_version, 130100);
  EXPECT_EQ(back.ceilings.gemm_tflops, 800.0);
  ASSERT_EQ(back.rows.size(), run.rows.size());
  for (size_t i = 0; i < run.rows.size(); ++i) {
    EXPECT_EQ(back.rows[i].name, run.rows[i].name);
    EXPECT_EQ(back.rows[i].params, run.rows[i].params);
    EXPECT_EQ(back.rows[i].timing, run.rows[i].timing);
    EXPECT_EQ(back.rows[i].stats.count, run.rows[i].stats.count);
    EXPECT_EQ(back.rows[i].stats.median_us, run.rows[i].stats.median_us);
    EXPECT_EQ(back.rows[i].stats.mean_us, run.rows[i].stats.mean_us);
    EXPECT_EQ(back.rows[i].bytes, run.rows[i].bytes);
    EXPECT_EQ(back.rows[i].flops, run.rows[i].flops);
    EXPECT_EQ(back.rows[i].bound, run.rows[i].bound);
    EXPECT_EQ(back.rows[i].note, run.rows[i].note);
  }
  // The text written is the same JSON again.
  EXPECT_EQ(to_json(back), to_json(run));
}

TEST(BenchReport, ReadingBadJsonNamesTheField) {
  nlohmann::json j = to_json(synthetic_run());
  nlohmann::json missing = j;
  missing["rows"][1].erase("median_us");
  test::expect_error([&] { report_from_json(missing); }, ErrorKind::io,
                     {"rows[1].median_us", "expected a value", "got nothing"});
  nlohmann::json wrong = j;
  wrong["device"]["sm_count"] = "many";
  test::expect_error([&] { report_from_json(wrong); }, ErrorKind::io,
                     {"device.sm_count", "expected an integer", "got string"});
  nlohmann::json schema = j;
  schema["schema"] = "something/2";
  test::expect_error([&] { report_from_json(schema); }, ErrorKind::io, {"schema", "something/2"});
  nlohmann::json bound = j;
  bound["rows"][0]["bound"] = "latency";
  test::expect_error([&] { report_from_json(bound); }, ErrorKind::io, {"rows[0].bound", "latency"});
  test::expect_error([] { report_from_json(nlohmann::json::array()); }, ErrorKind::io,
                     {"(top level)", "expected an object"});
}

TEST(BenchReport, WriteJsonToAnImpossiblePathFails) {
  test::expect_error([] { write_json(synthetic_run(), "/nonexistent-dir/x/y.json"); },
                     ErrorKind::io, {"/nonexistent-dir/x/y.json"});
}

TEST(BenchReport, NumberFormats) {
  EXPECT_EQ(format_us(1.02345), "1.023");
  EXPECT_EQ(format_us(48.04), "48.04");
  EXPECT_EQ(format_us(1089.26), "1089.3");
  EXPECT_EQ(format_rate(0.4567), "0.457");
  EXPECT_EQ(format_rate(12.345), "12.35");  // binary 12.345 lies just above 12.345
  EXPECT_EQ(format_rate(712.34), "712.3");
  EXPECT_EQ(format_rate(3067.8), "3068");
  EXPECT_EQ(format_bytes(1 << 30), "1.00 GiB");
  EXPECT_EQ(format_bytes(90177536), "86.0 MiB");
  EXPECT_EQ(format_bytes(2048), "2.0 KiB");
  EXPECT_EQ(format_bytes(512), "512 B");
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(BenchReport, TableHasAHeaderARuleAndOneAlignedLinePerRow) {
  const Report run = synthetic_run();
  const std::string table = format_table(run);
  const auto lines = lines_of(table);
  ASSERT_EQ(lines.size(), 2 + run.rows.size()) << table;
  EXPECT_EQ(lines[0].rfind("name", 0), 0u);
  for (const char* h : {"params", "timing", "median us", "min us", "max us", "GB/s", "TFLOP/s",
                        "% ceil", "note"})
    EXPECT_NE(lines[0].find(h), std::string::npos) << h;
  EXPECT_EQ(lines[1].find_first_not_of("- "), std::string::npos) << lines[1];
  // Right-aligned numeric columns end where their header ends.
  const size_t median_end = lines[0].find("median us") + std::string("median us").size();
  EXPECT_EQ(lines[2].substr(median_end - 6, 6), "700.00") << table;
  EXPECT_EQ(lines[3].substr(median_end - 6, 6), "1400.0") << table;
  EXPECT_EQ(lines[4].substr(median_end - 5, 5), "1.023") << table;
  const size_t gbps_end = lines[0].find("GB/s") + 4;
  EXPECT_EQ(lines[2].substr(gbps_end - 4, 4), "3068") << table;  // 2 GiB / 700 us
  EXPECT_EQ(lines[4].substr(gbps_end - 1, 1), "-") << table;
  const size_t tflops_end = lines[0].find("TFLOP/s") + 7;
  EXPECT_EQ(lines[3].substr(tflops_end - 5, 5), "785.4") << table;  // 2*8192^3 / 1400 us
  const size_t pct_end = lines[0].find("% ceil") + 6;
  EXPECT_EQ(lines[2].substr(pct_end - 5, 5), "102.3") << table;
  EXPECT_EQ(lines[3].substr(pct_end - 4, 4), "98.2") << table;
  EXPECT_NE(lines[2].find("H100: 3.00 TB/s"), std::string::npos);
  for (const auto& l : lines) EXPECT_NE(l.back(), ' ') << "trailing space: " << l;
}

TEST(BenchReport, UtcNowIsIso8601) {
  EXPECT_TRUE(std::regex_match(utc_now(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << utc_now();
}

TEST(BenchReport, GitCommitPrefersTheEnvironmentAndNeverFails) {
  ::setenv("BRAID_GIT_COMMIT", "feedbeef", 1);
  EXPECT_EQ(git_commit(), "feedbeef");
  ::unsetenv("BRAID_GIT_COMMIT");
  const std::string c = git_commit();  // a hash (maybe +dirty) inside a checkout, else "unknown"
  EXPECT_TRUE(c == "unknown" || std::regex_match(c, std::regex(R"([0-9a-f]{7,40}(\+dirty)?)")))
      << c;
}

TEST(BenchReport, BuildStampIsTheFirstLineOfCommit) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("braid_build_stamp_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(build_stamp(dir).has_value()) << "no COMMIT file";
  std::ofstream(dir / "COMMIT") << "  \n";
  EXPECT_FALSE(build_stamp(dir).has_value()) << "a blank line";
  std::ofstream(dir / "COMMIT") << "f8dbb3a1c2d3+dirty \nsecond line\n";
  EXPECT_EQ(build_stamp(dir).value_or(""), "f8dbb3a1c2d3+dirty");
  std::filesystem::remove_all(dir);
}

TEST(Report, RooflineClassAgainstTheRidgeOfTheRun) {
  const Ceilings c{3000, 750};  // ridge 250 FLOP/B
  EXPECT_DOUBLE_EQ(ridge_flop_per_byte(c), 250);
  EXPECT_EQ(roofline_class(1000, 1, c), Roofline::compute);
  EXPECT_EQ(roofline_class(250, 1, c), Roofline::balanced);
  EXPECT_EQ(roofline_class(130, 1, c), Roofline::balanced);
  EXPECT_EQ(roofline_class(100, 1, c), Roofline::memory);
  EXPECT_EQ(roofline_class(0, 100, c), Roofline::memory);
  EXPECT_EQ(roofline_class(100, 1, Ceilings{}), Roofline::balanced);
  EXPECT_EQ(roofline_bound(250, 1, c), Bound::compute);
  EXPECT_EQ(roofline_bound(249, 1, c), Bound::memory);
  EXPECT_EQ(roofline_bound(0, 1, c), Bound::memory);
  EXPECT_STREQ(roofline_name(Roofline::balanced), "balanced");
}

Accuracy accuracy_of(double max_abs, double mean_abs, double max_rel, double rel_l2) {
  Accuracy a;
  a.reference = "cpu fp64";
  a.error.elements = 1000;
  a.error.max_abs = max_abs;
  a.error.mean_abs = mean_abs;
  a.error.max_rel = max_rel;
  a.error.rel_l2 = rel_l2;
  a.rel_l2_tolerance = 1e-2;
  return a;
}

TEST(BenchReport, RowRooflineUsesTheFp8RidgeForFp8Rows) {
  Ceilings c{3000, 750};  // bf16 ridge 250 FLOP/B
  c.fp8_gemm_tflops = 1500;  // fp8 ridge 500 FLOP/B
  ResultRow r;
  r.flops = 1000;
  r.bytes = 3;  // 333 FLOP/B: compute against bf16 ridge / 2 .. 2 ridge is balanced
  r.bound = Bound::compute;
  EXPECT_EQ(row_roofline(r, c), Roofline::balanced);
  r.flops = 2000;  // 667: above 2 x 250
  EXPECT_EQ(row_roofline(r, c), Roofline::compute);
  r.bound = Bound::compute_fp8;  // 667 is within 2x of the fp8 ridge 500
  EXPECT_EQ(row_roofline(r, c), Roofline::balanced);
  r.flops = 0;
  r.bytes = 0;
  EXPECT_FALSE(row_roofline(r, c).has_value());  // a launch-cost row has no class
  r.flops = 10;
  EXPECT_EQ(row_roofline(r, c), Roofline::compute);  // FLOPs and no bytes
}

TEST(BenchReport, AccuracyPassesOnTheRelativeL2ErrorAndNeverWithNaN) {
  EXPECT_TRUE(accuracy_of(1e-3, 1e-4, 1e-2, 5e-3).passed());
  EXPECT_FALSE(accuracy_of(1e-3, 1e-4, 1e-2, 2e-2).passed());
  EXPECT_FALSE(accuracy_of(std::nan(""), 1e-4, 1e-2, 5e-3).passed());
  Accuracy scan_failed = accuracy_of(1e-3, 1e-4, 1e-2, 5e-3);
  scan_failed.other_checks_passed = false;  // e.g. a NaN outside the compared sample
  EXPECT_FALSE(scan_failed.passed());
  EXPECT_DOUBLE_EQ(rel_l2_tolerance_for(4), 1e-5);
  EXPECT_DOUBLE_EQ(rel_l2_tolerance_for(2), 1e-2);
}

TEST(BenchReport, AccuracyAndRooflineRoundTripThroughJson) {
  Report run = synthetic_run();
  run.rows[1].accuracy = accuracy_of(2e-3, 3e-4, 4e-2, 5e-3);
  run.rows[0].accuracy = accuracy_of(std::nan(""), std::nan(""), std::nan(""), std::nan(""));
  const nlohmann::json j = to_json(run);
  EXPECT_EQ(j["rows"][1]["roofline"], "compute");  // 8192 / 3 FLOP/B against a ridge of 267
  EXPECT_EQ(j["rows"][0]["roofline"], "memory");
  EXPECT_TRUE(j["rows"][2]["roofline"].is_null());
  EXPECT_TRUE(j["rows"][2]["accuracy"].is_null());
  EXPECT_EQ(j["rows"][1]["accuracy"]["passed"], true);
  EXPECT_EQ(j["rows"][0]["accuracy"]["passed"], false);
  EXPECT_TRUE(j["rows"][0]["accuracy"]["max_abs"].is_null());  // NaN is written as null
  const Report back = report_from_json(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.rows[1].accuracy.has_value());
  EXPECT_DOUBLE_EQ(back.rows[1].accuracy->error.max_abs, 2e-3);
  EXPECT_DOUBLE_EQ(back.rows[1].accuracy->error.max_rel, 4e-2);
  EXPECT_EQ(back.rows[1].accuracy->reference, "cpu fp64");
  EXPECT_TRUE(std::isnan(back.rows[0].accuracy->error.max_abs));
  run.rows[1].accuracy->other_checks_passed = false;
  const Report back2 = report_from_json(to_json(run));
  EXPECT_FALSE(back2.rows[1].accuracy->other_checks_passed);
  EXPECT_FALSE(back2.rows[1].accuracy->passed());
  EXPECT_FALSE(back.rows[2].accuracy.has_value());
  // Results written before rows carried accuracy read as "not checked".
  nlohmann::json old = j;
  for (auto& r : old["rows"]) r.erase("accuracy");
  EXPECT_FALSE(report_from_json(old).rows[1].accuracy.has_value());
}

TEST(BenchReport, TableShowsRooflineAndAccuracyColumns) {
  Report run = synthetic_run();
  run.rows[1].accuracy = accuracy_of(2e-3, 3e-4, 4e-2, 5e-3);
  run.rows[0].accuracy = accuracy_of(1e-1, 1e-2, 1.0, 0.5);
  const auto lines = lines_of(format_table(run));
  for (const char* h : {"roofline", "max abs", "mean abs", "max rel", "check"})
    EXPECT_NE(lines[0].find(h), std::string::npos) << h;
  EXPECT_NE(lines[3].find("compute"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("2.00e-03"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find(" ok"), std::string::npos) << lines[3];
  EXPECT_NE(lines[2].find("FAIL"), std::string::npos) << lines[2];
  EXPECT_EQ(lines[4].find("FAIL"), std::string::npos) << lines[4];
}

TEST(BenchReport, CsvHasOneRecordPerRowAndQuotesWhatNeedsIt) {
  Report run = synthetic_run();
  run.rows[0].note = "a, \"quoted\" note";
  run.rows[1].accuracy = accuracy_of(2e-3, 3e-4, 4e-2, 5e-3);
  const auto lines = lines_of(to_csv(run));
  ASSERT_EQ(lines.size(), 1 + run.rows.size());
  EXPECT_EQ(lines[0].rfind("suite,git_commit,device,name,params,timing,samples,median_us", 0), 0u);
  EXPECT_NE(lines[1].find("\"a, \"\"quoted\"\" note\""), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find(",700,"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find(",compute,0.002,0.0003,0.04,0.005,ok,"), std::string::npos) << lines[2];
  // Every record has as many fields as the header (the quoted note holds one comma).
  auto fields = [](const std::string& l) {
    size_t n = 1;
    bool quoted = false;
    for (char ch : l) {
      if (ch == '"') quoted = !quoted;
      if (ch == ',' && !quoted) ++n;
    }
    return n;
  };
  for (const auto& l : lines) EXPECT_EQ(fields(l), fields(lines[0])) << l;
}

TEST(BenchReport, MarkdownHasTheDeviceCeilingsAndATable) {
  Report run = synthetic_run();
  run.rows[0].note = "a|b";
  const std::string md = to_markdown(run);
  EXPECT_NE(md.find("# braidinfer bench ceilings"), std::string::npos);
  EXPECT_NE(md.find("NVIDIA H100 80GB HBM3"), std::string::npos);
  EXPECT_NE(md.find("copy 3000 GB/s, bf16 GEMM 800.0 TFLOP/s, fp8 GEMM not measured"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| name | params |"), std::string::npos);
  EXPECT_NE(md.find("a\\|b"), std::string::npos);  // a pipe in a cell is escaped
  size_t table_lines = 0;
  for (const auto& l : lines_of(md)) table_lines += !l.empty() && l[0] == '|';
  EXPECT_EQ(table_lines, 2 + run.rows.size());
}

}  // namespace
}  // namespace braid::bench
