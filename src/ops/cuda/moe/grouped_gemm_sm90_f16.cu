// The Hopper grouped GEMM for f16 (both epilogues), in its own translation unit for build time.
#include "ops/cuda/moe/grouped_gemm_sm90.cuh"
#include "ops/cuda/moe/grouped_gemm_sm90.h"

namespace braid::cuda::grouped_gemm {

bool launch_sm90_f16(const Tensor& x, const Tensor& w, const Tensor& offsets, bool swiglu,
                     const Tensor& y, cudaStream_t stream) {
  return swiglu ? launch<__half, true>(x, w, offsets, y, stream)
                : launch<__half, false>(x, w, offsets, y, stream);
}

}  // namespace braid::cuda::grouped_gemm
