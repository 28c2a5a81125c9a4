// The Hopper grouped GEMM's launchers, one .cu per dtype (grouped_gemm_sm90_{bf16,f16}.cu). Each
// returns false, launching nothing, when the tensors do not suit the kernel (see
// grouped_gemm_sm90.cuh); the caller then takes the simple kernel.
#pragma once

#include <cuda_runtime.h>

#include "braid/tensor.h"

namespace braid::cuda::grouped_gemm {

// Whether the Hopper kernels run here (sm_90a, and BRAID_GROUPED_GEMM_SM90 is not 0); the FP8
// grouped GEMM asks too.
bool use_sm90();

bool launch_sm90_bf16(const Tensor& x, const Tensor& w, const Tensor& offsets, bool swiglu,
                      const Tensor& y, cudaStream_t stream);
bool launch_sm90_f16(const Tensor& x, const Tensor& w, const Tensor& offsets, bool swiglu,
                     const Tensor& y, cudaStream_t stream);

}  // namespace braid::cuda::grouped_gemm
