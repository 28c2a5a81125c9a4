// `braidinfer bench all`: every suite, one after the other in this process, each writing its JSON,
// CSV and Markdown into one folder (tools/report.py turns the folder into a report).
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "braid/buffer.h"
#include "braid/error.h"
#include "commands.h"

namespace braid::cli {

namespace {

struct Suite {
  std::string file;               // output name in the folder
  std::vector<std::string> args;  // after "bench"
  std::string group;              // what --only / --skip name
};

// The suites in the order they run: the ceilings first, the long end-to-end ones last.
std::vector<Suite> suites() {
  return {
      {"ceilings", {"ceilings"}, "ceilings"},
      {"kernels", {"kernels"}, "kernels"},
      {"attention", {"attention"}, "attention"},
      {"attention_decode", {"attention-decode"}, "attention"},
      {"gemv", {"gemv"}, "kernels"},
      {"router", {"router"}, "moe"},
      {"router_grouped", {"router", "--router", "grouped"}, "moe"},
      {"moe", {"moe"}, "moe"},
      {"moe_fp8", {"moe-fp8"}, "moe"},
      {"decode_llama-3.2-1b", {"decode", "--shape", "llama-3.2-1b", "--breakdown"}, "decode"},
      {"decode_llama-3.1-8b", {"decode", "--shape", "llama-3.1-8b", "--breakdown"}, "decode"},
      {"decode_qwen3-30b-a3b", {"decode", "--shape", "qwen3-30b-a3b", "--breakdown"}, "decode"},
      {"prefill", {"prefill"}, "prefill"},
  };
}

struct AllArgs {
  std::string out_dir = "bench-results";
  bool quick = false;
  std::vector<std::string> only, skip;
};

// Runs `braidinfer bench ARGS...` in this process; returns its exit code (1 for an error it threw).
int run_bench(const std::vector<std::string>& args) {
  CLI::App app{"braidinfer"};
  int exit_code = 0;
  add_bench_commands(app, exit_code);
  std::vector<std::string> argv = {"bench"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::reverse(argv.begin(), argv.end());  // CLI11 takes a vector of arguments last to first
  try {
    app.parse(argv);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "braidinfer bench all: bad arguments for '{}': {}\n", args.front(), e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "braidinfer bench all: {} failed: {}\n", args.front(), e.what());
    return 1;
  }
  return exit_code;
}

int run_all(const AllArgs& a) {
  std::vector<std::string> groups;  // in suites() order, each once
  for (const Suite& s : suites())
    if (std::find(groups.begin(), groups.end(), s.group) == groups.end()) groups.push_back(s.group);
  for (const auto* list : {&a.only, &a.skip})
    for (const std::string& g : *list)
      if (std::find(groups.begin(), groups.end(), g) == groups.end())
        throw Error(ErrorKind::invalid_argument,
                    fmt::format("bench all: unknown suite '{}' (known: {})", g,
                                fmt::join(groups, ", ")));
  if (!cuda_available()) {
    fmt::print(stderr, "braidinfer bench all: no CUDA device is visible (nothing to measure)\n");
    return 2;
  }
  std::filesystem::create_directories(a.out_dir);
  std::vector<Suite> chosen;
  for (const Suite& s : suites()) {
    const bool wanted = a.only.empty() || std::count(a.only.begin(), a.only.end(), s.group);
    const bool skipped = std::count(a.skip.begin(), a.skip.end(), s.group) > 0;
    if (wanted && !skipped) chosen.push_back(s);
  }
  struct Outcome {
    std::string file;
    int exit_code;
    double seconds;
  };
  std::vector<Outcome> outcomes;
  const auto start = std::chrono::steady_clock::now();
  auto seconds_since = [](auto t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (size_t i = 0; i < chosen.size(); ++i) {
    const Suite& s = chosen[i];
    fmt::print(stderr, "\n=== [{}/{}] bench {} ({:.0f} s elapsed) ===\n", i + 1, chosen.size(),
               fmt::join(s.args, " "), seconds_since(start));
    fmt::print("\n=== bench {} ===\n", fmt::join(s.args, " "));
    std::fflush(stdout);
    std::vector<std::string> args = s.args;
    const std::string base = (std::filesystem::path(a.out_dir) / s.file).string();
    for (const char* ext : {"json", "csv", "md"}) {
      args.push_back(std::string("--") + ext);
      args.push_back(base + "." + ext);
    }
    if (a.quick) args.push_back("--quick");
    const auto t0 = std::chrono::steady_clock::now();
    const int code = run_bench(args);
    outcomes.push_back({s.file, code, seconds_since(t0)});
    std::fflush(stdout);
  }
  fmt::print("\n=== bench all: {} suites in {:.0f} s, results in {} ===\n", outcomes.size(),
             seconds_since(start), a.out_dir);
  int failed = 0;
  for (const Outcome& o : outcomes) {
    fmt::print("  {:<24} {:>7.1f} s  {}\n", o.file, o.seconds,
               o.exit_code == 0 ? "ok" : fmt::format("FAILED (exit {})", o.exit_code));
    failed += o.exit_code != 0;
  }
  return failed ? 1 : 0;
}

}  // namespace

void add_bench_all_command(CLI::App* bench, int& exit_code) {
  auto a = std::make_shared<AllArgs>();
  CLI::App* cmd = bench->add_subcommand(
      "all", "Every suite in turn (ceilings, kernels, attention, moe, decode, prefill), each "
             "writing JSON, CSV and Markdown into --out");
  cmd->add_option("--out", a->out_dir, "Folder for the results")->capture_default_str();
  cmd->add_flag("--quick", a->quick, "Every suite's --quick (smoke test)");
  cmd->add_option("--only", a->only, "Only these suites (comma-separated)")->delimiter(',');
  cmd->add_option("--skip", a->skip, "Skip these suites (comma-separated)")->delimiter(',');
  set_cuda_callback(cmd, "braidinfer bench all", exit_code, [a] { return run_all(*a); });
}

}  // namespace braid::cli
