// `braidinfer bench attention-decode`: ops::attention_decode over a paged KV cache on the decode
// shapes of ANCHORS.md (32 query heads, 8 KV heads, head_dim 128, bf16, pages of 16 tokens in
// shuffled order), with the copy bandwidth of the same run as the ceiling.
#pragma once

#include "bench/harness/suite.h"

namespace braid::bench {

// --quick; --splits N,... also times the CUDA kernels at these split counts (tuning).
SuiteRun attention_decode_command(CLI::App& cmd);  // suites/cuda/attention_decode.cpp

}  // namespace braid::bench
