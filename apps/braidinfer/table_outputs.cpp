#include "table_outputs.h"

#include <fmt/core.h>

namespace braid::cli {

void add_table_output_options(CLI::App* cmd, TablePaths& paths) {
  cmd->add_option("--csv", paths.csv, "Write the rows as CSV to this file");
  cmd->add_option("--md", paths.md, "Write the rows as a Markdown table to this file");
}

void write_table_outputs(const bench::Report& run, const TablePaths& paths) {
  if (!paths.csv.empty()) {
    bench::write_text(bench::to_csv(run), paths.csv);
    fmt::print("wrote {}\n", paths.csv);
  }
  if (!paths.md.empty()) {
    bench::write_text(bench::to_markdown(run), paths.md);
    fmt::print("wrote {}\n", paths.md);
  }
}

}  // namespace braid::cli
