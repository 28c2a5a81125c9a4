// Reference for moe_fp8_block_scale (see ops.h): seed 003's definition as it reads, token by token.
// Values are dequantized to fp32 exactly as the definition does it (fp8 * scale, one fp32
// product); the GEMM sums and the weighted sum over experts run in fp64 and are rounded to fp32
// (G1, O) and to bf16 (the output) once, so this is at least as accurate as the definition's own
// fp32 torch code. The SwiGLU output C stays fp32: options.intermediate_terms is how the CUDA path
// approximates C, and this is what it is judged against.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

namespace {

constexpr int64_t kBlock = ops::kFp8Block;

struct Fp8Table {
  float value[256];
  Fp8Table() {
    for (int b = 0; b < 256; ++b) value[b] = f8e4m3_to_float(static_cast<uint8_t>(b));
  }
};

// out[n] = fp32(sum_c a[c] * dequant(w)[n, c]) for a weight matrix w [N, K] with one scale per
// 128 x 128 block (scales [N / 128, K / 128]); the dequantized weight is the fp32 product.
void matvec(const Fp8Table& fp8, const float* a, const uint8_t* w, const float* scales, int64_t n,
            int64_t k, float* out) {
  const int64_t k_blocks = k / kBlock;
  for (int64_t row = 0; row < n; ++row) {
    const uint8_t* w_row = w + row * k;
    const float* s_row = scales + (row / kBlock) * k_blocks;
    double acc = 0;
    for (int64_t b = 0; b < k_blocks; ++b)
      for (int64_t c = b * kBlock; c < (b + 1) * kBlock; ++c)
        acc += static_cast<double>(a[c]) * static_cast<double>(fp8.value[w_row[c]] * s_row[b]);
    out[row] = static_cast<float>(acc);
  }
}

}  // namespace

void moe_fp8_block_scale(const Tensor& routing_logits, const Tensor& routing_bias,
                         const Tensor& hidden_states, const Tensor& hidden_states_scale,
                         const Tensor& gemm1_weights, const Tensor& gemm1_weights_scale,
                         const Tensor& gemm2_weights, const Tensor& gemm2_weights_scale,
                         int local_expert_offset, float routed_scaling_factor,
                         const ops::MoeFp8Options& options, const Tensor& output) {
  const int64_t tokens = routing_logits.shape[0], hidden = hidden_states.shape[1];
  const int64_t experts = gemm1_weights.shape[0], inter = gemm1_weights.shape[1] / 2;
  const int k = options.top_k;
  static const Fp8Table fp8;

  // Routing over all E_global experts (global ids), with the checked CPU router.
  std::vector<float> topk_weights(static_cast<size_t>(tokens * k));
  std::vector<int32_t> topk_ids(static_cast<size_t>(tokens * k));
  moe_route_grouped(routing_logits, routing_bias, options.n_group, options.topk_group, k,
                    routed_scaling_factor,
                    Tensor(topk_weights.data(), DType::f32, Device::cpu(), {tokens, k}),
                    Tensor(topk_ids.data(), DType::i32, Device::cpu(), {tokens, k}));

  const uint8_t* x = hidden_states.ptr<uint8_t>();
  const float* x_scale = hidden_states_scale.ptr<float>();
  const uint8_t* w1 = gemm1_weights.ptr<uint8_t>();
  const float* w1_scale = gemm1_weights_scale.ptr<float>();
  const uint8_t* w2 = gemm2_weights.ptr<uint8_t>();
  const float* w2_scale = gemm2_weights_scale.ptr<float>();
  const int64_t h_blocks = hidden / kBlock, i_blocks = inter / kBlock;

  std::vector<float> a(static_cast<size_t>(hidden)), g1(static_cast<size_t>(2 * inter)),
      c(static_cast<size_t>(inter)), o(static_cast<size_t>(hidden));
  std::vector<double> acc(static_cast<size_t>(hidden));
  for (int64_t t = 0; t < tokens; ++t) {
    // A = hidden_states[t] * scale, the scale transposed: scale[b, t] covers columns of block b.
    const uint8_t* x_row = x + t * hidden_states.row_stride();
    for (int64_t col = 0; col < hidden; ++col)
      a[col] = fp8.value[x_row[col]] * x_scale[(col / kBlock) * hidden_states_scale.row_stride() + t];

    std::fill(acc.begin(), acc.end(), 0.0);
    for (int j = 0; j < k; ++j) {
      // Only the local experts are computed; any other choice contributes nothing here.
      const int64_t e = int64_t{topk_ids[t * k + j]} - local_expert_offset;
      if (e < 0 || e >= experts) continue;
      matvec(fp8, a.data(), w1 + e * 2 * inter * hidden, w1_scale + e * 2 * i_blocks * h_blocks,
             2 * inter, hidden, g1.data());
      // The first I rows are the up projection X1, the last I the gate X2: C = silu(X2) * X1.
      for (int64_t i = 0; i < inter; ++i) {
        const float gate = g1[inter + i];
        c[i] = gate / (1.0f + std::exp(-gate)) * g1[i];
      }
      matvec(fp8, c.data(), w2 + e * hidden * inter, w2_scale + e * h_blocks * i_blocks, hidden,
             inter, o.data());
      const double weight = topk_weights[t * k + j];
      for (int64_t col = 0; col < hidden; ++col) acc[col] += weight * o[col];
    }
    uint16_t* out_row = output.ptr<uint16_t>() + t * output.row_stride();
    for (int64_t col = 0; col < hidden; ++col)
      out_row[col] = float_to_bf16(static_cast<float>(acc[col]));
  }
}

}  // namespace braid::cpu
