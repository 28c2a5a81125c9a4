// The fused decode ops on CUDA: one fused GEMV kernel (gemv_fused.cu) when it applies, otherwise
// the primitive ops in sequence through the caller's scratch tensors (nothing is allocated, so
// both paths are graph-capturable). Arguments arrive checked by src/ops/fused_gemm.cpp.
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemv/gemv_fused.h"

namespace braid::cuda {

namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void rms_norm_gemm(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                   const Tensor& bias, const Tensor& out, const Tensor& normed, Stream stream) {
  if (gemv_fused_applicable(x, x.size(1), w) && aligned16(norm_weight.data))
    return gemv_rms_norm(x, norm_weight, eps, w, bias, out, stream);
  rms_norm(x, norm_weight, eps, normed, stream);
  gemm(normed, w, bias, out, stream);
}

void gemm_add(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& residual,
              const Tensor& scratch, Stream stream) {
  if (gemv_fused_applicable(a, a.size(1), w)) return gemv_add(a, w, bias, residual, stream);
  gemm(a, w, bias, scratch, stream);
  add_inplace(scratch, residual, stream);
}

void swiglu_gemm_add(const Tensor& gate_up, const Tensor& w, const Tensor& residual,
                     const Tensor& act, const Tensor& scratch, Stream stream) {
  if (gemv_fused_applicable(gate_up, gate_up.size(1) / 2, w))
    return gemv_swiglu_add(gate_up, w, residual, stream);
  silu_mul(gate_up, act, stream);
  gemm(act, w, Tensor{}, scratch, stream);
  add_inplace(scratch, residual, stream);
}

}  // namespace braid::cuda
