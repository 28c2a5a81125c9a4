// The fused decode products' argument checks (fused_gemm.cpp), shared with gemv_chain
// (gemv_chain.cpp), whose stages are those products: each checks what its op checks, under the
// name `op`, and returns the device of the op's tensors.
#pragma once

#include "braid/ops.h"

namespace braid::ops::fused_check {

Device rms_norm_gemm(const char* op, const Tensor& x, const Tensor& norm_weight, float eps,
                     const Weight& w, const Tensor& bias, const Tensor& out, const Tensor& normed);
Device gemm_add(const char* op, const Tensor& a, const Weight& w, const Tensor& bias,
                const Tensor& residual, const Tensor& scratch);
Device swiglu_gemm_add(const char* op, const Tensor& gate_up, const Weight& w,
                       const Tensor& residual, const Tensor& act, const Tensor& scratch);

}  // namespace braid::ops::fused_check
