// `braidinfer bench attention-mla`: ops::attention_mla (DeepSeek's multi-head latent attention,
// absorbed, over a paged latent cache) on decode shapes of DeepSeek-V3 (128 heads) and
// DeepSeek-V2-Lite (16 heads), r 512, dr 64, bf16, with the copy bandwidth of the same run as the
// ceiling.
#pragma once

#include "bench/harness/suite.h"

namespace braid::bench {

// --quick.
SuiteRun attention_mla_command(CLI::App& cmd);  // suites/cuda/attention_mla.cpp

}  // namespace braid::bench
