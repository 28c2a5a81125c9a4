// `braidinfer bench ceilings`: the GPU's own limits (copy bandwidth, bf16 and fp8 GEMM rates, the
// bf16 GEMV rate, kernel launch costs), against which every other suite reads its rows. The
// measurements are the harness's (harness/ceilings.h, harness/cuda/ceilings.h); this suite runs
// them all and prints the summary.
#pragma once

#include "bench/harness/suite.h"

namespace braid::bench {

SuiteRun ceilings_command(CLI::App& cmd);  // suites/cuda/ceilings.cpp

}  // namespace braid::bench
