// Inputs of the FP8 MoE benchmarks: normal random tensors and fp8 block quantization, written
// here (not with the ops under test, so a broken moe_fp8_quantize cannot also break the inputs it
// is checked on). Each function takes contiguous CPU or CUDA tensors: a kernel on CUDA (on
// `stream`), host loops on the CPU (the tests drive the benchmark's wiring there at small shapes).
//
// Block quantization, the DeepSeek-V3 format of ops.h's "FP8 block scale" section: per block,
//   s = amax|v| / 448 (1 for an all-zero block),  q = e4m3(v / s), rounded to nearest even and
//   saturated; value = q * s.
#pragma once

#include <cstdint>

#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::bench {

// t (f32 or bf16) = mean + stddev * N(0, 1), a pure function of (seed, element index).
void fill_normal(const Tensor& t, uint64_t seed, float mean, float stddev, Stream stream = {});

// t (f8e4m3) = e4m3(stddev * N(0, 1)), no scale: operands for the fp8 GEMM ceiling.
void fill_fp8_normal(const Tensor& t, uint64_t seed, float stddev, Stream stream = {});

// Weights in 128 x 128 blocks:
//   src   [E, N, K] f32/bf16 (or [N, K], E = 1), contiguous; N % 128 == 0, K % 128 == 0
//   q     src's shape, f8e4m3, contiguous
//   scale [E, N / 128, K / 128] f32, contiguous ([N / 128, K / 128] for a 2-d src)
void quantize_weight_blocks(const Tensor& src, const Tensor& q, const Tensor& scale,
                            Stream stream = {});

// Weights drawn and quantized in one pass (seed 003's 1.4 GB need no fp32 copy): the values
// stddev * N(0, 1) of element index i = (e * N + n) * K + k, quantized as above. q and scale as
// quantize_weight_blocks's.
void random_weight_blocks(const Tensor& q, const Tensor& scale, uint64_t seed, float stddev,
                          Stream stream = {});

// Activations in 1 x 128 blocks, the scales transposed (seed 003's hidden_states_scale):
//   src   [M, K] f32/bf16, contiguous; K % 128 == 0
//   q     [M, K] f8e4m3, contiguous
//   scale [K / 128, M] f32, contiguous: scale[b, m] belongs to row m's columns [128 b, 128 b + 128)
void quantize_activation_blocks(const Tensor& src, const Tensor& q, const Tensor& scale,
                                Stream stream = {});

}  // namespace braid::bench
