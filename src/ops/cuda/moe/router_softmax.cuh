// The softmax routers' probabilities on the device: one definition shared by
// moe_route_topk_softmax's kernel (moe_simple.cu) and the grouped router's softmax mode
// (moe_route_grouped.cu, moe_route_softmax_grouped), so that the two ops' p are the same bits.
// A warp holds one token's logits, expert e at lane e % 32, slot e / 32 (-inf past the experts):
//   m   = the warp's maximum (fmaxf, so a NaN logit is skipped, as the CPU's fmax does);
//   sum = each lane's expf(x - m) over its slots in slot order, then warp_sum over the lanes;
//   p   = expf(x - m) / sum.
// The compiler fuses expf's final multiply into the lane sum's adds (fma.rn), so the sum is not
// quite the sum of the rounded expf values; the same expressions here give both kernels the same
// fusion. The CPU reference (cpu::router_softmax) sums in fp64 in expert order and divides in
// fp64: the backends' p agree to a few ulp, not bit for bit.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/common.cuh"

namespace braid::cuda::router {

template <int kSlots>
__device__ __forceinline__ float softmax_max(const float (&x)[kSlots]) {
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) m = fmaxf(m, x[i]);
  return warp_max(m);
}

template <int kSlots>
__device__ __forceinline__ float softmax_sum(const float (&x)[kSlots], float m, int lane,
                                             int experts) {
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kSlots; ++i)
    if (lane + 32 * i < experts) sum += expf(x[i] - m);  // a NaN logit makes sum NaN
  return warp_sum(sum);
}

__device__ __forceinline__ float softmax_p(float x, float m, float sum) {
  return expf(x - m) / sum;
}

}  // namespace braid::cuda::router
