// Random weights of a model shape, for benchmarks that need no checkpoint: small uniform values
// (norm weights near 1) so that activations stay finite through any number of layers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace braid::bench {

// Fills a contiguous f32/bf16/f16 tensor with values uniform in [lo, hi], a function of `seed`:
// fill_uniform (harness/cuda/kernels.h) on CUDA, a host generator (mt19937_64) on the CPU.
void fill_random(const Tensor& t, uint64_t seed, float lo, float hi);

// On a CUDA device the values are drawn by a kernel; on the CPU by the host. With `named`, each
// Hugging Face tensor name and where its values live (views into the weights) are recorded, so
// that a CPU reference can be built from the same values.
model::Weights random_weights(const model::ModelConfig& config, Device device, DType dtype,
                              std::vector<std::pair<std::string, Tensor>>* named = nullptr);

}  // namespace braid::bench
