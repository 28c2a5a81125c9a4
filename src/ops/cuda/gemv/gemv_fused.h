// The GEMV kernel (gemv.cu's design: mma.sync over 16 activation rows, 16 rows of w per block,
// k split over 8 warps) with a small op fused into it, so a decode step launches one kernel where
// it launched two or three:
//   - prologue rms_norm: the activations are normalised (rms_norm's rounding) while loaded; every
//     block computes the rows' sums of squares itself (m * k elements, from L2);
//   - prologue swiglu: the activations are silu(gate) * up (silu_mul's rounding) while loaded;
//   - epilogue add: the result, rounded to the dtype, is added to the residual element and the
//     sum, rounded again, written back (the residual stream's two roundings).
// Callers (cuda_fused_gemm.cpp) check gemv_fused_applicable first and otherwise run the primitive
// ops. Arguments arrive checked by the ops in src/ops/gemm/fused_gemm.cpp.
//
// FP8 weights (decode of DeepSeek-V3 / Qwen3-FP8 checkpoints): w [n, k] may be f8e4m3 (e4m3fn)
// with f32 scales w_scale, contiguous, either per 128 x 128 block, [ceil(n / 128), k / 128]
// (value = w[r, c] * w_scale[r / 128, c / 128]), or per output channel, [n, 1] (value = w[r, c] *
// w_scale[r, 0]); the layout is read from w_scale's shape, and one that fits neither throws
// braid::Error. The activations a (after the prologue, rounded to their dtype as above) enter
// the product one of two ways (fp8_gemv_activations):
//   - e4m3 (the default): quantized per row and 128 columns as moe_fp8_quantize does with one
//     term (s = amax / 448, q = e4m3(a / s)), as the prompt path's fp8 GEMM and DeepSeek-V3's
//     recipe quantize them; the product is sum over 128-column blocks of s_a * scale(r, c) * sum_c
//     q[., c] * w[r, c] in fp32, on the fp8 tensor cores (gemv_fp8_quantized.cu). Taken where
//     gemv_fp8_quantizes(m, n, k): m rows of k codes fit a block's shared memory, and n is large
//     enough that each block's quantization is shared by 4 or more 16-row tiles (on an H100 or
//     H200, n >= 16,896: Llama-3.1-8B's gate_up, not its qkv, o or down); elsewhere exact, which
//     is faster there.
//   - exact (BRAID_FP8_GEMV=exact in the environment, or set_fp8_gemv_activations): the
//     activations stay f16/bf16, the product is sum_c a[., c] * (w[r, c] * scale(r, c)) in fp32
//     (the order of the sum aside), with every other rounding as for 16-bit weights.
// For 16-bit w (w's dtype is the activations'), w_scale is ignored: pass Tensor{}.
#pragma once

#include <cstdint>

#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::cuda {

// True when the fused kernel can read `a` as m rows of k product columns, the activation tensor
// holding `cols` columns per row (k, or 2k for swiglu's [gate | up]): CUDA f16/bf16, 1 <= m <= 16,
// k % 8 == 0, a and w 16-byte aligned, a's row stride a multiple of 16 bytes (any when m = 1);
// w of a's dtype, or f8e4m3 with k % 128 == 0 (whole scale blocks per warp).
bool gemv_fused_applicable(const Tensor& a, int64_t k, const Tensor& w);

// How the fp8-weight products treat their activations (above); process-wide.
enum class Fp8GemvActivations { e4m3, exact };
Fp8GemvActivations fp8_gemv_activations();
void set_fp8_gemv_activations(Fp8GemvActivations activations);
// True when an fp8-weight product of m activation rows, k columns and n output columns quantizes
// them (above; needs the current CUDA device).
bool gemv_fp8_quantizes(int64_t m, int64_t n, int64_t k);

// out = gemm(rms_norm(x, norm_weight, eps), w, bias); out in x's dtype or f32. norm_weight must
// be 16-byte aligned too. A defined normed (x's shape, rows; 16-bit w only; 16-byte aligned, its
// row stride a multiple of 8 elements) receives rms_norm(x) as well.
void gemv_rms_norm(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                   const Tensor& w_scale, const Tensor& bias, const Tensor& out,
                   const Tensor& normed, Stream stream);
// ids = argmax(rms_norm(a, norm_weight, eps) @ w^T, -1) on the f32 sums, or argmax(a @ w^T, -1)
// when norm_weight is undefined (greedy decoding's head; 16-bit w only), with no logits written: the GEMV leaves
// one key per row and 16 columns in `keys` (gemv_argmax_keys(m, n) 8-byte slots, 8-byte
// aligned), a one-block-per-row kernel reduces them.
int64_t gemv_argmax_keys(int64_t m, int64_t n);
void gemv_argmax(const Tensor& a, const Tensor& norm_weight, float eps, const Tensor& w,
                 const Tensor& ids, void* keys, Stream stream);
// residual = to_dtype(residual + to_dtype(a @ w^T + bias)).
void gemv_add(const Tensor& a, const Tensor& w, const Tensor& w_scale, const Tensor& bias,
              const Tensor& residual, Stream stream);
// residual = to_dtype(residual + to_dtype(to_dtype(silu(gate) * up) @ w^T)).
void gemv_swiglu_add(const Tensor& gate_up, const Tensor& w, const Tensor& w_scale,
                     const Tensor& residual, Stream stream);
// out = a @ w^T (+ bias), rounded once to out's dtype (a's, or f32; bias in out's dtype): the
// decode path of ops::gemm on fp8 weights (16-bit w works too; gemv.cu is gemm's path for those).
void gemv_plain(const Tensor& a, const Tensor& w, const Tensor& w_scale, const Tensor& bias,
                const Tensor& out, Stream stream);

}  // namespace braid::cuda
