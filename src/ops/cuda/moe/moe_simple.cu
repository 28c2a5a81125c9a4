// Mixture of experts, the simple kernels: the top-k softmax router. (moe_experts, the decode
// experts, is in moe_experts.cu.)
//
// moe_route_topk_softmax: one warp per token. Each lane holds up to 16 of the (at most 512)
// logits in registers, expert e at lane e % 32, slot e / 32 (as many slots as E needs); the warp
// computes the softmax's maximum and sum (router_softmax.cuh, shared with the grouped router's
// softmax mode), then runs k rounds of "largest remaining logit, lowest index among equals": two
// warp redux instructions on order-preserving integer keys, and a rescan by the winning lane
// only. Lane j keeps round j's choice and writes it.
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pdl.cuh"
#include "ops/cuda/moe/router_softmax.cuh"

namespace braid::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;

// ---- router ----------------------------------------------------------------------------------

struct RouteArgs {
  const void* logits;
  float* weights;
  int32_t* ids;
  int64_t tokens, logits_stride;
  int experts, k;
  bool renormalize;
};

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

// kSlots logits per lane (expert lane + 32 i in slot i): the smallest power of two covering E.
template <typename T, int kSlots>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) moe_route_kernel(RouteArgs a) {
  pdl::wait_then_release();
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (t >= a.tokens) return;  // whole warps leave; no block barriers below
  const T* row = static_cast<const T*>(a.logits) + t * a.logits_stride;

  float x[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + 32 * i;
    x[i] = e < a.experts ? to_float(row[e]) : -INFINITY;
  }
  // The softmax's maximum and sum, as moe_route_softmax_grouped computes them (router_softmax.cuh).
  const float m = router::softmax_max(x);
  const float sum = router::softmax_sum(x, m, lane, a.experts);
  uint32_t key[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) key[i] = lane + 32 * i < a.experts ? order_key(x[i]) : 0u;

  // Each lane keeps its best remaining (key, expert); a round takes the warp's largest key
  // (redux), the lowest expert among equal keys (redux), and only the winning lane rescans.
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
  for (int j = 0; j < a.k; ++j) {
    const uint32_t top = __reduce_max_sync(0xffffffffu, best);
    const int winner = __reduce_min_sync(0xffffffffu, best == top ? best_e : 0x7fffffff);
    if (lane == j) {
      my_id = winner;
      // The winner's logit is its key's float (a NaN logit came back as -inf; sum is NaN then).
      my_weight = router::softmax_p(key_value(top), m, sum);
    }
    if ((winner & 31) == lane) {
#pragma unroll
      for (int i = 0; i < kSlots; ++i)
        if (lane + 32 * i == winner) key[i] = 0u;
      rescan();
    }
  }
  if (a.renormalize) my_weight /= warp_sum(lane < a.k ? my_weight : 0.0f);
  if (lane < a.k) {
    a.weights[t * a.k + lane] = my_weight;
    a.ids[t * a.k + lane] = my_id;
  }
}

}  // namespace

void moe_route_topk_softmax(const Tensor& logits, int k, bool renormalize,
                            const Tensor& topk_weights, const Tensor& topk_ids, Stream stream) {
  RouteArgs a{logits.data, topk_weights.ptr<float>(), topk_ids.ptr<int32_t>(),
              logits.shape[0], logits.row_stride(), static_cast<int>(logits.shape[1]), k,
              renormalize};
  const unsigned blocks = static_cast<unsigned>((a.tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  auto s = static_cast<cudaStream_t>(stream.handle);
  dispatch_float_type(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    const int slots = (a.experts + 31) / 32;
    if (slots <= 1)
      launch_programmatic(moe_route_kernel<T, 1>, blocks, kWarpsPerBlock * 32, 0, s, a);
    else if (slots <= 2)
      launch_programmatic(moe_route_kernel<T, 2>, blocks, kWarpsPerBlock * 32, 0, s, a);
    else if (slots <= 4)
      launch_programmatic(moe_route_kernel<T, 4>, blocks, kWarpsPerBlock * 32, 0, s, a);
    else if (slots <= 8)
      launch_programmatic(moe_route_kernel<T, 8>, blocks, kWarpsPerBlock * 32, 0, s, a);
    else
      launch_programmatic(moe_route_kernel<T, 16>, blocks, kWarpsPerBlock * 32, 0, s, a);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
