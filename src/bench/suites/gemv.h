// `braidinfer bench gemv`: the GEMV kernel (gemm's path for m <= 16) against cuBLASLt on the
// projections of Qwen2.5-0.5B, Llama-3.2-1B and Llama-2-7B, and the fused decode ops against the
// primitive ops they replace, with the copy bandwidth of the same run as the ceiling.
#pragma once

#include "bench/harness/suite.h"

namespace braid::bench {

// --quick; --sweep also times other launch shapes of the kernel (tuning); --fp8 also times the
// fused kernel on fp8 e4m3 weights with 128 x 128 block scales (each shape, and Llama-3.1-8B's).
SuiteRun gemv_command(CLI::App& cmd);  // suites/cuda/gemv.cpp

}  // namespace braid::bench
