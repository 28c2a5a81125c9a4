// The commands of the braidinfer CLI, one file each. Each adds its subcommand to the app; the
// callback of the one the user picked stores its exit status in `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace braid::cli {

void add_info_command(CLI::App& app, int& exit_code);
void add_bench_commands(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_profile_command(CLI::App& app, int& exit_code);
void add_serve_command(CLI::App& app, int& exit_code);

}  // namespace braid::cli
