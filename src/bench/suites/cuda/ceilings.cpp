#include "bench/suites/ceilings.h"

#include <CLI/CLI.hpp>

#include <fmt/core.h>

#include <memory>

#include "bench/harness/cuda/ceilings.h"
#include "braid/buffer.h"

namespace braid::bench {

SuiteRun ceilings_command(CLI::App& cmd) {
  auto o = std::make_shared<CeilingsOptions>();
  cmd.add_flag("--quick", o->quick, "Smaller sizes and fewer repetitions (smoke test)");
  cmd.add_option("--device", o->device, "CUDA device index")->capture_default_str();
  return [o] {
    if (!cuda_available())
      return not_measured(
          "braidinfer bench ceilings: no CUDA device is visible (nothing to measure)");
    CeilingsOptions opts = *o;
    opts.on_row = [](const ResultRow& r) {
      fmt::print(stderr, "  measured {} {} [{}]: {} us\n", r.name, r.params, r.timing,
                 format_us(r.stats.median_us));
    };
    fmt::print(stderr, "braidinfer bench ceilings{}: measuring...\n", opts.quick ? " --quick" : "");
    const Report run = run_ceilings(opts);
    return report_result(run, ceilings_summary(run));
  };
}

}  // namespace braid::bench
