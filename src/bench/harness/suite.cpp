#include "bench/harness/suite.h"

#include <CLI/CLI.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <exception>
#include <memory>

namespace braid::bench {

namespace {

struct OutputPaths {
  std::string json, csv, md;
};

void write_output(const std::string& text, const std::string& path) {
  if (path.empty()) return;
  write_text(text, path);
  fmt::print("wrote {}\n", path);
}

// Prints the result, writes the files asked for, says why it failed last; the exit code.
int emit(const SuiteResult& r, const OutputPaths& out) {
  if (r.measured) {
    fmt::print("{}", r.text);
    if (!r.json.is_null()) write_output(r.json.dump(2) + "\n", out.json);
    if (!r.csv.empty()) write_output(r.csv, out.csv);
    if (!r.md.empty()) write_output(r.md, out.md);
  }
  if (!r.message.empty()) fmt::print(stderr, "{}\n", r.message);
  return r.exit_code;
}

}  // namespace

SuiteResult report_result(const Report& run, const std::string& below_table,
                          const nlohmann::json& sections, const std::string& header_note) {
  SuiteResult r;
  if (run.has_device) r.text += describe_device(run.device);
  r.text += fmt::format("git {}, {}{}\n\n", run.git_commit, run.date_utc, header_note);
  r.text += format_table(run) + "\n";
  r.text += below_table;
  r.json = to_json(run);
  for (const auto& [key, value] : sections.items()) r.json[key] = value;
  r.csv = to_csv(run);
  r.md = to_markdown(run);
  return r;
}

SuiteResult not_measured(std::string message) {
  SuiteResult r;
  r.measured = false;
  r.exit_code = 2;
  r.message = std::move(message);
  return r;
}

void fail(SuiteResult& r, std::string message) {
  r.exit_code = 1;
  r.message = std::move(message);
}

void fail_if(SuiteResult& r, const std::string& command, size_t failed, size_t total,
             const std::string& what) {
  if (failed > 0) fail(r, fmt::format("{}: {} of {} {}", command, failed, total, what));
}

CLI::App* add_suite_command(CLI::App& bench, const Suite& suite, int& exit_code) {
  CLI::App* cmd = bench.add_subcommand(suite.name, suite.summary);
  if (!suite.command) {
    cmd->allow_extras();
    cmd->callback([name = "braidinfer bench " + suite.name, &exit_code] {
      fmt::print(stderr, "{}: this build has no CUDA support\n", name);
      exit_code = 2;
    });
    return cmd;
  }
  SuiteRun run = suite.command(*cmd);
  auto out = std::make_shared<OutputPaths>();
  cmd->add_option("--json", out->json, "Write the run as JSON to this file");
  cmd->add_option("--csv", out->csv, "Write the rows as CSV to this file");
  cmd->add_option("--md", out->md, "Write the rows as a Markdown table to this file");
  cmd->callback([run = std::move(run), out, &exit_code] { exit_code = emit(run(), *out); });
  return cmd;
}

int run_suite(const Suite& suite, const std::vector<std::string>& args) {
  CLI::App app{"braidinfer"};
  int exit_code = 0;
  add_suite_command(*app.add_subcommand("bench"), suite, exit_code);
  std::vector<std::string> argv = {"bench", suite.name};
  argv.insert(argv.end(), args.begin(), args.end());
  std::reverse(argv.begin(), argv.end());  // CLI11 takes a vector of arguments last to first
  try {
    app.parse(argv);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "braidinfer bench all: bad arguments for '{}': {}\n", suite.name, e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "braidinfer bench all: {} failed: {}\n", suite.name, e.what());
    return 1;
  }
  return exit_code;
}

}  // namespace braid::bench
