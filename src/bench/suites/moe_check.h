// `bench moe`'s correctness check: the layer's output on a sample of tokens against the CPU
// reference op (ops::moe_experts on the host, the specification of the experts' arithmetic),
// computed from the same bf16 inputs and the same routing the layer chose. The big shapes are far
// too slow to check whole on the CPU (seed 001 at 32x2048 is 35 TFLOP); 64 tokens take seconds.
#pragma once

#include <cstdint>

#include "bench/suites/moe.h"
#include "bench/suites/moe_layer.h"
#include "braid/buffer.h"

namespace braid::bench {

// Host copies of the expert weights (once per model: seed 001's are 8.7 GB).
struct MoeHostWeights {
  OwnedTensor gate_up, down;
};
MoeHostWeights copy_weights_to_host(const MoeWeights& w);

// Checks b.out (written by a forward pass of `s`, on any device) on moe_sample_tokens(T, samples,
// seed): against the CPU reference, and the device's own ops::moe_experts on the same rows
// against the same reference. The CPU reference runs on every core, a slice of the rows each.
MoeCheck check_moe_layer(const MoeShape& s, const MoeWeights& w, const MoeHostWeights& host,
                         const MoeBuffers& b, int samples, uint64_t seed);

}  // namespace braid::bench
