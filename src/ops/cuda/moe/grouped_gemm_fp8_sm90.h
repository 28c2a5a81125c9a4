// The Hopper FP8 grouped GEMM's launchers, one .cu per epilogue (grouped_gemm_fp8_sm90_*.cu).
// Each returns false, launching nothing, when the tensors do not suit the kernel (see
// grouped_gemm_fp8_sm90.cuh); the caller then takes the simple kernel.
#pragma once

#include <cuda_runtime.h>

#include "braid/tensor.h"

namespace braid::cuda::grouped_gemm_fp8 {

// activation none, y f32 / bf16
bool launch_sm90_f32(const Tensor& x, const Tensor& x_scale, const Tensor& w, const Tensor& w_scale,
                     const Tensor& offsets, const Tensor& y, cudaStream_t stream);
bool launch_sm90_bf16(const Tensor& x, const Tensor& x_scale, const Tensor& w, const Tensor& w_scale,
                      const Tensor& offsets, const Tensor& y, cudaStream_t stream);
// SwiGLU, y f32, or y fp8 terms with y_scale
bool launch_sm90_swiglu_f32(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                            const Tensor& w_scale, const Tensor& offsets, bool gate_first,
                            const Tensor& y, cudaStream_t stream);
bool launch_sm90_swiglu_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                            const Tensor& w_scale, const Tensor& offsets, bool gate_first,
                            const Tensor& y, const Tensor& y_scale, cudaStream_t stream);

}  // namespace braid::cuda::grouped_gemm_fp8
