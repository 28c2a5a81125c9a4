// What every suite plugs into (harness/suite.h): a run's result printed and written by the
// harness, --json/--csv/--md on every suite command, the exit codes, and a suite this build lacks.
#include <CLI/CLI.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "bench/harness/cuda_only.h"
#include "bench/harness/suite.h"
#include "braid/error.h"
#include "test_util.h"

namespace braid::bench {
namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Report small_run() {
  Report run;
  run.suite = "synthetic";
  run.git_commit = "abc123";
  run.date_utc = "2026-01-01T00:00:00Z";
  ResultRow r;
  r.name = "copy_kernel";
  r.params = "1 MiB";
  r.timing = "graph x10";
  r.stats.median_us = r.stats.min_us = r.stats.max_us = 10;
  r.stats.count = 1;
  r.bytes = 2 << 20;
  r.bound = Bound::memory;
  run.rows.push_back(r);
  return run;
}

// A suite whose run hands back `result` (or throws `error` when set), with one option of its own.
SuiteResult g_result;
std::string g_error;
int g_option = 0;

SuiteRun fake_command(CLI::App& cmd) {
  cmd.add_option("--option", g_option, "An option of the suite");
  return [] {
    if (!g_error.empty()) throw Error(ErrorKind::invalid_argument, g_error);
    return g_result;
  };
}

class BenchSuite : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("braid_suite_test_" + std::to_string(test::fresh_seed()));
    std::filesystem::create_directories(dir_);
    g_result = SuiteResult{};
    g_error.clear();
    g_option = 0;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<std::string> outputs() const {
    return {"--json", (dir_ / "r.json").string(), "--csv", (dir_ / "r.csv").string(), "--md",
            (dir_ / "r.md").string()};
  }
  std::filesystem::path dir_;
  const Suite suite_{"fake", "A suite for the tests", false, &fake_command, {}};
};

TEST_F(BenchSuite, ReportResultHoldsTheHeaderTableSectionsAndBothTables) {
  Report run = small_run();
  const SuiteResult r = report_result(run, "below\n", {{"extra", {{"k", 1}}}}, "; note");
  EXPECT_NE(r.text.find("git abc123, 2026-01-01T00:00:00Z; note\n\n"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("copy_kernel"), std::string::npos);
  EXPECT_EQ(r.text.substr(r.text.size() - 6), "below\n");
  EXPECT_EQ(r.json["schema"], to_json(run)["schema"]);
  EXPECT_EQ(r.json["extra"]["k"], 1);
  EXPECT_EQ(r.json["rows"], to_json(run)["rows"]);
  EXPECT_EQ(r.csv, to_csv(run));
  EXPECT_EQ(r.md, to_markdown(run));
  EXPECT_TRUE(r.measured);
  EXPECT_EQ(r.exit_code, 0);
}

TEST_F(BenchSuite, EverySuiteCommandWritesTheFilesAskedFor) {
  g_result = report_result(small_run(), "");
  std::vector<std::string> args = outputs();
  args.insert(args.end(), {"--option", "7"});
  EXPECT_EQ(run_suite(suite_, args), 0);
  EXPECT_EQ(g_option, 7);
  EXPECT_EQ(nlohmann::json::parse(read_file(dir_ / "r.json")), g_result.json);
  EXPECT_EQ(read_file(dir_ / "r.json"), g_result.json.dump(2) + "\n");
  EXPECT_EQ(read_file(dir_ / "r.csv"), g_result.csv);
  EXPECT_EQ(read_file(dir_ / "r.md"), g_result.md);
}

TEST_F(BenchSuite, AFailedCheckStillWritesEverythingAndExitsOne) {
  g_result = report_result(small_run(), "");
  fail(g_result, "fake: 1 of 1 cases FAILED");
  EXPECT_EQ(run_suite(suite_, outputs()), 1);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "r.json"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "r.md"));
}

TEST_F(BenchSuite, NothingMeasuredWritesNothing) {
  g_result = not_measured("fake: no CUDA device");
  EXPECT_FALSE(g_result.measured);
  EXPECT_EQ(run_suite(suite_, outputs()), 2);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "r.json"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "r.csv"));
}

TEST_F(BenchSuite, AResultWithoutATableWritesNoTable) {
  g_result.text = "a list\n";  // as `bench kernels --list`: no JSON, no rows
  EXPECT_EQ(run_suite(suite_, outputs()), 0);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "r.json"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "r.csv"));
}

TEST_F(BenchSuite, BadArgumentsAndErrorsHaveTheirExitCodes) {
  EXPECT_EQ(run_suite(suite_, {"--no-such-option"}), 2);
  g_error = "fake: bad";
  EXPECT_EQ(run_suite(suite_, {}), 1);
}

TEST_F(BenchSuite, ASuiteThisBuildLacksTakesAnyArgumentsAndSaysSo) {
  const Suite lacking{"gpu-only", "Needs a GPU", true, nullptr, {}};
  EXPECT_EQ(run_suite(lacking, {"--tokens", "4", "--json", (dir_ / "r.json").string()}), 2);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "r.json"));
}

TEST(BenchCudaOnly, NamesTheCudaHalfOnlyWhereItIsBuilt) {
  const auto f = BRAID_CUDA_ONLY(needs_cuda);  // any declared function will do
  EXPECT_EQ(f != nullptr, bool(BRAID_WITH_CUDA));
  test::expect_error([] { needs_cuda("bench thing"); }, ErrorKind::unsupported,
                     {"bench thing", "no CUDA support"});
  int (*null_fn)(int) = nullptr;
  test::expect_error([&] { cuda_only(null_fn, "bench thing"); }, ErrorKind::unsupported,
                     {"bench thing: this build of braidinfer has no CUDA support"});
}

}  // namespace
}  // namespace braid::bench
