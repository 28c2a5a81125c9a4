// The softmax routers' probabilities on the device: one definition shared by
// moe_route_topk_softmax's kernel (moe_simple.cu) and the grouped router's softmax mode
// (moe_route_grouped.cu, moe_route_softmax_grouped), so that the two ops' p are the same bits;
// and the top-k choice of moe_route_topk_softmax (topk_softmax_warp).
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

// A float as an unsigned key whose order is the floats' order (NaN taken as -inf, which ranks it
// below every number; -0 taken as +0, its equal); 0 is below every key (a slot already chosen or
// past the experts).
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t bits = __float_as_uint(isnan(v) ? -INFINITY : (v == 0.0f ? 0.0f : v));
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}
__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? key & 0x7fffffffu : ~key);
}

// One token's top-k softmax routing by one warp (moe_route_topk_softmax's contract, ops.h): x
// holds its logits as floats, expert lane + 32 i in slot i (-inf past `experts`). After the
// softmax's maximum and sum, k rounds of "largest remaining logit, lowest index among equals":
// two warp redux instructions on order-preserving keys, and a rescan by the winning lane only.
// Lane j keeps round j's choice and writes weights[j] and ids[j].
template <int kSlots>
__device__ __forceinline__ void topk_softmax_warp(const float (&x)[kSlots], int lane, int experts,
                                                  int k, bool renormalize, float* weights,
                                                  int32_t* ids) {
  const float m = softmax_max(x);
  const float sum = softmax_sum(x, m, lane, experts);
  uint32_t key[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) key[i] = lane + 32 * i < experts ? order_key(x[i]) : 0u;

  // Each lane keeps its best remaining (key, expert); only the round's winner rescans.
  uint32_t best = 0;
  int best_e = 0x7fffffff;
  auto rescan = [&] {
    best = 0;
    best_e = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      if (key[i] > best) {  // strict: the lower slot (lower expert) wins a tie
        best = key[i];
        best_e = lane + 32 * i;
      }
  };
  rescan();
  float my_weight = 0.0f;
  int my_id = 0;
  for (int j = 0; j < k; ++j) {
    const uint32_t top = __reduce_max_sync(0xffffffffu, best);
    const int winner = __reduce_min_sync(0xffffffffu, best == top ? best_e : 0x7fffffff);
    if (lane == j) {
      my_id = winner;
      // The winner's logit is its key's float (a NaN logit came back as -inf; sum is NaN then).
      my_weight = softmax_p(key_value(top), m, sum);
    }
    if ((winner & 31) == lane) {
#pragma unroll
      for (int i = 0; i < kSlots; ++i)
        if (lane + 32 * i == winner) key[i] = 0u;
      rescan();
    }
  }
  if (renormalize) my_weight /= warp_sum(lane < k ? my_weight : 0.0f);
  if (lane < k) {
    weights[lane] = my_weight;
    ids[lane] = my_id;
  }
}

}  // namespace braid::cuda::router
