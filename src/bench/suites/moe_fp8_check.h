// `bench moe-fp8`'s correctness checks, on the host, on a sample of tokens (each token of an MoE
// layer is independent given its routing, so the sampled rows' inputs are all a reference needs):
//   seed003  ops::moe_fp8_block_scale on the CPU (the library's fp32 reference), and the
//            definition written out here (dequantized fp8 inputs, fp64 sums, the intermediate C
//            unrounded, routed by ops::moe_route_grouped on the CPU): two fp32 references;
//   seed001  fp64 arithmetic on the bf16 weights and x (the layer FP8 approximates), and on the
//            fp8 weights and the fp8-quantized x (the FP8 layer's own roundings), both routed as
//            the layer on the GPU routed them.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/suites/moe_check.h"
#include "bench/suites/moe_fp8.h"
#include "bench/suites/moe_fp8_layer.h"
#include "braid/buffer.h"

namespace braid::bench {

// Expert weight matrices [E, N, K] on the host, read as fp64 row dot products.
class HostExpertWeights {
 public:
  virtual ~HostExpertWeights() = default;
  virtual int64_t rows() const = 0;  // N
  virtual int64_t cols() const = 0;  // K
  // sum over k of W[e][n][k] * v[k], in fp64.
  virtual double dot(int64_t e, int64_t n, const double* v) const = 0;
};

// bf16 (or f32) w [E, N, K], contiguous host tensor.
class DenseHostWeights : public HostExpertWeights {
 public:
  explicit DenseHostWeights(const Tensor& w);
  int64_t rows() const override { return w_.shape[1]; }
  int64_t cols() const override { return w_.shape[2]; }
  double dot(int64_t e, int64_t n, const double* v) const override;

 private:
  Tensor w_;
};

// fp8 e4m3 q [E, N, K] with 128 x 128 block scales [E, N / 128, K / 128], contiguous host tensors:
// W = q * scale of its block.
class Fp8HostWeights : public HostExpertWeights {
 public:
  Fp8HostWeights(const Tensor& q, const Tensor& scale);
  int64_t rows() const override { return q_.shape[1]; }
  int64_t cols() const override { return q_.shape[2]; }
  double dot(int64_t e, int64_t n, const double* v) const override;

 private:
  Tensor q_, scale_;
  float lut_[256];
};

// One SwiGLU expert in fp64: g = W1[e][gate rows] @ a, u = W1[e][up rows] @ a, c = silu(g) * u,
// out = W2[e] @ c. gate_last: W1's gate rows are its second half (seed 003, DeepSeek's fp8
// checkpoints); otherwise its first (seed 001, Hugging Face). a has w1.cols() values, out
// w2.rows().
void host_swiglu_expert(const HostExpertWeights& w1, const HostExpertWeights& w2, int64_t e,
                        bool gate_last, const double* a, double* out);

// x quantized as moe_fp8_quantize's first term (1 x 128 blocks, s = amax / 448) and dequantized:
// the activations an fp8 layer actually multiplies. x.size() % 128 == 0.
std::vector<double> fp8_round_trip_row(const std::vector<float>& x);

// ---- seed003 ----

struct DsHostWeights {
  OwnedTensor w1, w1_scale, w2, w2_scale;
};
DsHostWeights copy_ds_weights_to_host(const DsWeights& w);

// The sampled tokens of one input set (moe_sample_tokens(T, samples, seed)), their inputs on the
// host, and two fp32 references for them, computed once per input set (every terms value is
// checked against them):
//   out     the definition written out here: routing by ops::moe_route_grouped on the CPU,
//           dequantized inputs, fp64 sums, C unrounded ([rows * H]);
//   cpu_op  ops::moe_fp8_block_scale on the CPU (the library's reference; its CPU path keeps C
//           in fp32 whatever intermediate_terms says), bf16 [rows, H].
struct DsReference {
  std::vector<int64_t> rows;
  OwnedTensor logits, hidden, hidden_scale, bias;  // host: [n, Eg], [n, H], [H / 128, n], [Eg]
  std::vector<double> out;
  OwnedTensor cpu_op;
};
DsReference ds_reference(const DsModel& m, const DsInputs& in, const DsHostWeights& w, int samples,
                         uint64_t seed);

// b.op_out's sampled rows against both references (errors and flashinfer-bench's rule); b.out
// (the pipeline of public ops) against b.op_out on every row.
Fp8DsCheck check_ds_case(const DsBuffers& b, const DsReference& ref);

// ---- seed001 in FP8 ----

struct Fp8LayerHostWeights {
  OwnedTensor gate_up, gate_up_scale, down, down_scale;
};
Fp8LayerHostWeights copy_fp8_layer_weights_to_host(const Fp8LayerWeights& w);

// b8.out (the FP8 layer) and b.out (bench moe's bf16 layer, when `bf16_written`) on
// moe_sample_tokens(T, samples, seed), routed as b.topk_ids / b.topk_weights say.
Fp8LayerCheck check_fp8_layer(const MoeShape& s, const MoeHostWeights& bf16,
                              const Fp8LayerHostWeights& fp8, const MoeBuffers& b,
                              const Fp8LayerBuffers& b8, bool bf16_written, int samples,
                              uint64_t seed);

}  // namespace braid::bench
