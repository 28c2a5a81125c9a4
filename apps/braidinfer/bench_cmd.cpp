// `braidinfer bench ...`: one subcommand per suite of the registry (src/bench/suites/registry.cpp),
// `bench all` and `bench --list`. Every suite's options and run live with the suite.
#include <fmt/core.h>

#include <memory>

#include "bench/suites/registry.h"
#include "commands.h"

namespace braid::cli {

void add_bench_commands(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(0, 1);
  auto list = std::make_shared<bool>(false);
  bench->add_flag("--list", *list,
                  "List the suites: where each runs, what `bench all` runs of it, and what it "
                  "measures");
  for (const bench::Suite& s : bench::suites()) bench::add_suite_command(*bench, s, exit_code);

  auto all = std::make_shared<bench::AllOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "all", "Every suite in turn (ceilings, kernels, attention, moe, decode, prefill), each "
             "writing JSON, CSV and Markdown into --out");
  cmd->add_option("--out", all->out_dir, "Folder for the results")->capture_default_str();
  cmd->add_flag("--quick", all->quick, "Every suite's --quick (smoke test)");
  cmd->add_option("--only", all->only, "Only these suites (comma-separated)")->delimiter(',');
  cmd->add_option("--skip", all->skip, "Skip these suites (comma-separated)")->delimiter(',');
  cmd->callback([all, &exit_code] { exit_code = bench::run_all(*all); });

  bench->callback([bench, list, &exit_code] {
    if (*list) {
      fmt::print("{}", bench::suite_list());
      exit_code = 0;
    } else if (bench->get_subcommands().empty()) {
      throw CLI::RequiredError::Subcommand(1);
    }
  });
}

}  // namespace braid::cli
