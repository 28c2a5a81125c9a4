// `braidinfer bench gemv`: the GEMV kernel (gemm's path for m <= 16) against cuBLASLt on the
// projections of Qwen2.5-0.5B, Llama-3.2-1B and Llama-2-7B, and the fused decode ops against the
// primitive ops they replace, with the copy bandwidth of the same run as the ceiling.
#pragma once

#include "bench/harness/suite.h"

namespace braid::bench {

// --quick; --sweep also times other launch shapes of the kernel (tuning).
SuiteRun gemv_command(CLI::App& cmd);  // suites/cuda/gemv.cpp

}  // namespace braid::bench
