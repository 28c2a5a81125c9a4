// `braidinfer info`: what this build is and which GPU it sees.
#include <fmt/core.h>

#include <memory>
#include <string>

#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda_only.h"
#include "braid/buffer.h"
#include "commands.h"

namespace braid::cli {

void add_info_command(CLI::App& app, int& exit_code) {
  CLI::App* info = app.add_subcommand("info", "Print the build and the CUDA device");
  auto device = std::make_shared<int>(0);
  info->add_option("--device", *device, "CUDA device index")->capture_default_str();
  info->callback([device, &exit_code] {
    fmt::print("braidinfer 0.1.0, {}\n", BRAID_WITH_CUDA ? "built with CUDA" : "built without CUDA");
    const auto query_device = BRAID_CUDA_ONLY(bench::query_device);
    if (!query_device) return;
    std::string reason;
    if (auto d = query_device(*device, &reason)) {
      fmt::print("{}", bench::describe_device(*d));
    } else {
      fmt::print("{}\n", reason);
    }
    exit_code = 0;  // describing an absent GPU is still a successful answer
  });
}

}  // namespace braid::cli
