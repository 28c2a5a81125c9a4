// The registry of suites (suites/registry.h): the table `bench NAME`, `bench --list` and
// `bench all` read, what `bench all` runs, every command's options, and a build without CUDA
// saying which suites need it.
#include <CLI/CLI.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "bench/suites/registry.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "test_util.h"

namespace braid::bench {
namespace {

const Suite& suite(const std::string& name) {
  for (const Suite& s : suites())
    if (s.name == name) return s;
  throw Error(ErrorKind::invalid_argument, "no suite " + name);
}

TEST(BenchRegistry, NamesAndOutputFilesAreUnique) {
  std::set<std::string> names, files;
  for (const Suite& s : suites()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_FALSE(s.summary.empty()) << s.name;
    for (const AllRun& r : s.all) {
      EXPECT_TRUE(files.insert(r.file).second) << r.file;
      EXPECT_FALSE(r.group.empty()) << r.file;
    }
  }
  for (const char* name : {"ceilings", "kernels", "attention", "attention-decode", "gemv", "router",
                           "moe", "moe-fp8", "decode", "prefill", "throughput", "serve"})
    EXPECT_TRUE(names.count(name)) << name;
}

TEST(BenchRegistry, BenchAllRunsEverySuiteItDidInTheSameOrder) {
  std::vector<std::string> runs;
  for (const Suite& s : suites())
    for (const AllRun& r : s.all) {
      std::string line = r.group + " " + r.file + ": " + s.name;
      for (const std::string& a : r.args) line += " " + a;
      runs.push_back(line);
    }
  const std::vector<std::string> expected = {
      "ceilings ceilings: ceilings",
      "kernels kernels: kernels",
      "attention attention: attention",
      "attention attention_decode: attention-decode",
      "attention attention_mla: attention-mla",
      "kernels gemv: gemv",
      "moe router: router",
      "moe router_grouped: router --router grouped",
      "moe moe: moe",
      "moe moe_fp8: moe-fp8",
      "decode decode_llama-3.2-1b: decode --shape llama-3.2-1b --breakdown",
      "decode decode_llama-3.1-8b: decode --shape llama-3.1-8b --breakdown",
      "decode decode_qwen3-30b-a3b: decode --shape qwen3-30b-a3b --breakdown",
      "prefill prefill: prefill",
  };
  EXPECT_EQ(runs, expected);
}

TEST(BenchRegistry, EveryCommandTakesTheArgumentsBenchAllGivesIt) {
  for (const Suite& s : suites()) {
    if (!s.command) continue;  // a GPU suite in a build without CUDA
    for (const AllRun& r : s.all) {
      SCOPED_TRACE(s.name + " " + r.file);
      CLI::App cmd;
      const SuiteRun run = s.command(cmd);  // holds what the options write; parsed, never run
      std::vector<std::string> args = r.args;
      args.push_back("--quick");
      std::reverse(args.begin(), args.end());
      EXPECT_NO_THROW(cmd.parse(args));
    }
  }
}

TEST(BenchRegistry, AttentionMlaNamesAShapeFilterThatKeepsNothing) {
  const Suite& s = suite("attention-mla");
  if (!s.command) GTEST_SKIP() << "a build without CUDA";
  CLI::App cmd;
  const SuiteRun run = s.command(cmd);
  cmd.parse("--quick --batch 128 --heads 16", false);
  // Named before a GPU is looked for: the same error with or without one.
  test::expect_error([&] { run(); }, ErrorKind::invalid_argument,
                     {"bench attention-mla", "--batch 128 --heads 16"});
  CLI::App bad;
  (void)s.command(bad);
  EXPECT_THROW(bad.parse("--heads -1", false), CLI::ValidationError);
}

TEST(BenchRegistry, EveryCommandTakesTheOutputOptions) {
  CLI::App app;
  int exit_code = 0;
  for (const Suite& s : suites()) {
    SCOPED_TRACE(s.name);
    CLI::App* cmd = add_suite_command(app, s, exit_code);
    if (!s.command) continue;
    for (const char* opt : {"--json", "--csv", "--md"})
      EXPECT_NO_THROW(cmd->get_option(opt)) << opt;
  }
}

TEST(BenchRegistry, ListNamesEverySuiteAndWhereItRuns) {
  const std::string list = suite_list();
  for (const Suite& s : suites()) {
    EXPECT_NE(list.find(s.name), std::string::npos) << s.name;
    EXPECT_NE(list.find(s.summary), std::string::npos) << s.name;
  }
  EXPECT_NE(list.find("moe: router, moe: router_grouped"), std::string::npos) << list;
}

TEST(BenchRegistry, SuitesWithoutAGpuRunInEveryBuild) {
  for (const char* name : {"kernels", "throughput", "serve"})
    EXPECT_NE(suite(name).command, nullptr) << name;
  EXPECT_FALSE(suite("throughput").needs_cuda);
  EXPECT_FALSE(suite("serve").needs_cuda);
  // `bench kernels --list` needs no GPU, in any build.
  EXPECT_EQ(run_suite(suite("kernels"), {"--list", "--quick", "--only", "rms_norm"}), 0);
}

TEST(BenchRegistry, ABuildWithoutCudaSaysWhichSuitesNeedIt) {
  if (BRAID_WITH_CUDA) GTEST_SKIP() << "this build has CUDA";
  for (const Suite& s : suites()) {
    SCOPED_TRACE(s.name);
    if (!s.needs_cuda) continue;
    if (s.name != "kernels") EXPECT_EQ(s.command, nullptr);
    EXPECT_EQ(run_suite(s, {}), 2);
  }
  AllOptions all;
  EXPECT_EQ(run_all(all), 2);
}

TEST(BenchRegistry, BenchAllNamesAnUnknownGroup) {
  if (!BRAID_WITH_CUDA) GTEST_SKIP() << "a build without CUDA says so first";
  AllOptions all;
  all.only = {"nope"};
  test::expect_error(
      [&] { run_all(all); }, ErrorKind::invalid_argument,
      {"unknown suite 'nope'", "ceilings, kernels, attention, moe, decode, prefill"});
}

}  // namespace
}  // namespace braid::bench
