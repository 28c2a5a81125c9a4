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
  router::topk_softmax_warp(x, lane, a.experts, a.k, a.renormalize, a.weights + t * a.k,
                            a.ids + t * a.k);
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
