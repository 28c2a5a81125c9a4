// One instantiation of the Hopper FP8 grouped GEMM (grouped_gemm_fp8_sm90.cuh) per file.
#include "ops/cuda/moe/grouped_gemm_fp8_sm90.cuh"
#include "ops/cuda/moe/grouped_gemm_fp8_sm90.h"

namespace braid::cuda::grouped_gemm_fp8 {

bool launch_sm90_swiglu_f32(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                            const Tensor& w_scale, const Tensor& offsets, bool gate_first,
                            const Tensor& y, cudaStream_t stream) {
  return launch<Out::f32, true>(x, x_scale, w, w_scale, offsets, gate_first, y, Tensor{}, stream);
}

}  // namespace braid::cuda::grouped_gemm_fp8
