// The GEMV kernel (gemv.cu's design: mma.sync over 16 activation rows, 16 rows of w per block,
// k split over 8 warps) with a small op fused into it, so a decode step launches one kernel where
// it launched two or three:
//   - prologue rms_norm: the activations are normalised (rms_norm's rounding) while loaded; every
//     block computes the rows' sums of squares itself (m * k elements, from L2);
//   - prologue swiglu: the activations are silu(gate) * up (silu_mul's rounding) while loaded;
//   - epilogue add: the result, rounded to the dtype, is added to the residual element and the
//     sum, rounded again, written back (the residual stream's two roundings).
// Callers (cuda_fused_gemm.cpp) check gemv_fused_applicable first and otherwise run the primitive
// ops. Arguments arrive checked by the ops in src/ops/fused_gemm.cpp.
#pragma once

#include <cstdint>

#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::cuda {

// True when the fused kernel can read `a` as m rows of k product columns, the activation tensor
// holding `cols` columns per row (k, or 2k for swiglu's [gate | up]): CUDA f16/bf16, 1 <= m <= 16,
// k % 8 == 0, a and w 16-byte aligned, a's row stride a multiple of 16 bytes (any when m = 1).
bool gemv_fused_applicable(const Tensor& a, int64_t k, const Tensor& w);

// out = gemm(rms_norm(x, norm_weight, eps), w, bias); out in x's dtype or f32. norm_weight must
// be 16-byte aligned too.
void gemv_rms_norm(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                   const Tensor& bias, const Tensor& out, Stream stream);
// ids = argmax(rms_norm(a, norm_weight, eps) @ w^T, -1) on the f32 sums, or argmax(a @ w^T, -1)
// when norm_weight is undefined (greedy decoding's head), with no logits written: the GEMV leaves
// one key per row and 16 columns in `keys` (gemv_argmax_keys(m, n) 8-byte slots, 8-byte
// aligned), a one-block-per-row kernel reduces them.
int64_t gemv_argmax_keys(int64_t m, int64_t n);
void gemv_argmax(const Tensor& a, const Tensor& norm_weight, float eps, const Tensor& w,
                 const Tensor& ids, void* keys, Stream stream);
// residual = to_dtype(residual + to_dtype(a @ w^T + bias)).
void gemv_add(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& residual,
              Stream stream);
// residual = to_dtype(residual + to_dtype(to_dtype(silu(gate) * up) @ w^T)).
void gemv_swiglu_add(const Tensor& gate_up, const Tensor& w, const Tensor& residual,
                     Stream stream);

}  // namespace braid::cuda
