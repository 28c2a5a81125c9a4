// braidinfer command line: bench, (later) generate and profile.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "braid/error.h"

int main(int argc, char** argv) {
  CLI::App app{"braidinfer: LLM inference engine and kernel library for NVIDIA Hopper GPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "braidinfer 0.1.0");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
