// --csv FILE and --md FILE for every bench command: the run's rows in the two table formats
// beside the terminal table (--json, which some suites extend with their own sections, stays with
// each command).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "bench/harness/report.h"

namespace braid::cli {

struct TablePaths {
  std::string csv, md;
};

void add_table_output_options(CLI::App* cmd, TablePaths& paths);
// Writes the files asked for and says so on stdout.
void write_table_outputs(const bench::Report& run, const TablePaths& paths);

}  // namespace braid::cli
