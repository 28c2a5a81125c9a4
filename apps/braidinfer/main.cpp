// braidinfer command line: generate, serve, info, bench, profile.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <exception>

#include "braid/error.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"braidinfer: LLM inference engine and kernel library for NVIDIA Hopper GPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "braidinfer 0.1.0");
  int exit_code = 0;
  braid::cli::add_info_command(app, exit_code);
  braid::cli::add_bench_commands(app, exit_code);
  braid::cli::add_generate_command(app, exit_code);
  braid::cli::add_profile_command(app, exit_code);
  braid::cli::add_serve_command(app, exit_code);
  try {
    app.parse(argc, argv);  // runs the chosen subcommand's callback
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const braid::Error& e) {
    fmt::print(stderr, "braidinfer: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "braidinfer: unexpected error: {}\n", e.what());
    return 1;
  }
  return exit_code;
}
