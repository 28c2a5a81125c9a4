// What every benchmark suite plugs into. A suite is a row of the registry (suites/registry.cpp):
// its name, a help line, whether it measures on the GPU, its command (the suite's own options and
// the run that uses them), and the runs `bench all` makes of it. A run hands back a SuiteResult;
// the harness prints it and writes the --json, --csv and --md files every suite takes, so no
// suite (and no command in apps/) repeats that.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/harness/report.h"

// Only the files that declare options include CLI11 (<CLI/CLI.hpp>): its header-only validators
// and formatters cost each file that includes it ~9 s of compile time.
namespace CLI {
class App;
}

namespace braid::bench {

// What a run hands back: what it prints, what each output file holds, and how the command ends.
struct SuiteResult {
  bool measured = true;  // false: nothing ran (no usable GPU); only `message` is said, no file
  std::string text;      // stdout
  nlohmann::json json;   // --json (null: the run has none, as `bench kernels --list`)
  std::string csv, md;   // --csv, --md (empty: none)
  int exit_code = 0;     // 1: a check (or a request) failed; 2: nothing could be measured
  std::string message;   // said on stderr last (why exit_code is not 0)
};

// The result of a run kept as a Report: the device and "git COMMIT, DATE" (then `header_note`),
// the table, then `below_table`; --json is to_json(run) with the suite's own top-level `sections`
// added, --csv and --md the rows.
SuiteResult report_result(const Report& run, const std::string& below_table,
                          const nlohmann::json& sections = nlohmann::json::object(),
                          const std::string& header_note = "");
// Nothing measured: `message` on stderr, exit code 2.
SuiteResult not_measured(std::string message);
// Marks `r` failed: exit code 1 and `message` on stderr after everything is printed and written.
void fail(SuiteResult& r, std::string message);
// fail(r, "COMMAND: FAILED of TOTAL WHAT") when `failed` > 0.
void fail_if(SuiteResult& r, const std::string& command, size_t failed, size_t total,
             const std::string& what);

// A suite's command line: adds the suite's own options to `cmd` and returns what runs the suite
// on them once the line is parsed. The returned run owns the values the options write: it must
// outlive every parse of `cmd`.
using SuiteRun = std::function<SuiteResult()>;
using SuiteCommand = SuiteRun (*)(CLI::App& cmd);

// One run `bench all` makes of a suite: the name of its output files (NAME.json, .csv, .md), the
// suite's arguments, and the group `bench all --only / --skip` select it by.
struct AllRun {
  std::string file;
  std::vector<std::string> args;
  std::string group;
};

struct Suite {
  std::string name;      // `braidinfer bench NAME`
  std::string summary;   // its help line
  bool needs_cuda = true;
  SuiteCommand command;  // null where this build lacks it: a GPU suite in a build without CUDA
  std::vector<AllRun> all;
};

// Adds `bench NAME` to `bench`: the suite's options and --json, --csv, --md; its callback runs
// the suite, prints the result, writes the files and sets exit_code. A suite without a command
// takes any arguments and says that this build has no CUDA support (exit code 2).
CLI::App* add_suite_command(CLI::App& bench, const Suite& suite, int& exit_code);

// Runs `braidinfer bench NAME ARGS...` in this process (what `bench all` does for each run);
// returns its exit code: 2 for arguments the suite rejects, 1 for an error it threw (both said on
// stderr).
int run_suite(const Suite& suite, const std::vector<std::string>& args);

}  // namespace braid::bench
