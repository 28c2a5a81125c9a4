// One instantiation of the Hopper FP8 grouped GEMM (grouped_gemm_fp8_sm90.cuh) per file.
#include "ops/cuda/moe/grouped_gemm_fp8_sm90.cuh"
#include "ops/cuda/moe/grouped_gemm_fp8_sm90.h"

namespace braid::cuda::grouped_gemm_fp8 {

bool launch_sm90_bf16(const Tensor& x, const Tensor& x_scale, const Tensor& w, const Tensor& w_scale,
                      const Tensor& offsets, const Tensor& y, cudaStream_t stream) {
  return launch<Out::bf16, false>(x, x_scale, w, w_scale, offsets, true, y, Tensor{}, stream);
}

}  // namespace braid::cuda::grouped_gemm_fp8
