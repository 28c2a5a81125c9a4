// The MoE router of a decode step in one kernel (ops::moe_router_topk_softmax on CUDA, up to
// kMaxTokens tokens): what rms_norm_gemm_keep_normed (the norm, the router's GEMV, the normed rows
// left for the experts) and moe_route_topk_softmax (the top k of the softmax) do in two launches.
//
// Why: in Qwen3-30B-A3B-FP8's graph step (H100, programmatic launch as shipped, `braidinfer
// profile --graph`, each kernel's elapsed time: what it adds after the kernel before ends), the
// router's GEMV added 5.0 us a layer (0.5 MB of weights on 8 blocks of 16 rows: a few dependent
// round trips on 8 SMs) and the routing kernel behind it 3.0 us, for almost no bytes
// (docs/perf/moe_router.md).
//
// Layout: one warp per expert row, kWarps rows a block (16 blocks for 128 experts). Each lane
// loads its 16-byte pieces of the row and (up to 2048 columns) of the norm weight, lane-strided,
// kLoads of each, before the programmatic wait: they arrive while the kernel before finishes
// (launched programmatically only inside ops::ConstantWeights, as the GEMVs are; at 2048 columns
// 239 registers, no spill; the 4096-column instantiation spills 144 bytes). After the wait each
// warp loads a token's row (all its pieces at once), takes its 1 / rms in the fused GEMV's order (the
// same bits), the dot product with the normed row (rms_transform's roundings, fp32 sums), and
// lane 0 stores the logit in the logits' dtype; block 0's first warp also stores the normed rows.
// The block that finishes last (release fence and atomic add on a counter; an acquire fence
// after it) routes the tokens, a warp each, with moe_route_topk_softmax's own warp code
// (router_softmax.cuh) on the logits as stored, and sets the counter back to zero.
//
// First version (rows_inv_rms's loop, then a dot loop whose loads the compiler issued one piece
// at a time): 11 us a layer on Qwen3-30B-A3B-FP8, slower than the two kernels' 8
// (docs/perf/moe_router.md).
//
// The logits are those of rms_norm_gemm up to the order of the fp32 sum (a warp's lanes, then
// the warp), so a logit may differ from the GEMV's in its last bit; the ids and weights are
// exactly moe_route_topk_softmax's of the logits this kernel stored.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <type_traits>

#include "braid/ops.h"
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemv/gemv_fused_device.cuh"
#include "ops/cuda/moe/router_softmax.cuh"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

using gemv_fused::Pack8;
constexpr int kWarps = 8;  // expert rows a block
constexpr int kMaxTokens = 4;
constexpr int kMaxHidden = 4096;  // 16 pieces of 16 bytes a lane
constexpr int kMaxExperts = 256;  // 8 logits a lane in the routing warp

struct RouterArgs {
  const void* x;            // [m, h]
  const void* norm_weight;  // [h]
  const void* w;            // [experts, h]
  void* logits;             // [m, experts], T or f32
  void* normed;             // [m, h]
  float* weights;           // [m, k]
  int32_t* ids;             // [m, k]
  unsigned int* counter;    // zero before and after
  int64_t ldx, ldl, ldn;    // row strides in elements
  int m, h, experts, k;
  float eps;
  bool logits_f32, renormalize;
};

// A logit another block stored in this launch: read from L2 (never a stale L1 line).
template <typename T>
__device__ __forceinline__ float load_logit(const RouterArgs& a, int t, int e) {
  if (a.logits_f32) return __ldcg(static_cast<const float*>(a.logits) + t * a.ldl + e);
  const unsigned short bits =
      __ldcg(reinterpret_cast<const unsigned short*>(static_cast<const T*>(a.logits) + t * a.ldl + e));
  T v;
  memcpy(&v, &bits, sizeof v);
  return to_float(v);
}

template <typename T, int kLoads, int kSlots>
__global__ void __launch_bounds__(kWarps * 32) moe_router_kernel(RouterArgs a) {
  __shared__ bool last;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int e = blockIdx.x * kWarps + warp;
  const int pieces = a.h / 8;  // 16-byte pieces of a row; lane l holds pieces l, l + 32, ...

  // The weights first (the row and the norm weight): nothing an earlier kernel writes. All loads
  // of a row are issued together, so each operand costs one round trip.
  const uint4* w_row = reinterpret_cast<const uint4*>(static_cast<const T*>(a.w) +
                                                      int64_t{min(e, a.experts - 1)} * a.h);
  const uint4* norm_weight = static_cast<const uint4*>(a.norm_weight);
  // Past 2048 columns the norm weight is loaded with x instead (registers: w and x take 128).
  constexpr bool kPreloadNorm = kLoads <= 8;
  uint4 w[kLoads], nw[kPreloadNorm ? kLoads : 1];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const bool live = lane + 32 * i < pieces;
    w[i] = live ? __ldg(w_row + lane + 32 * i) : make_uint4(0, 0, 0, 0);
    if constexpr (kPreloadNorm)
      nw[i] = live ? __ldg(norm_weight + lane + 32 * i) : make_uint4(0, 0, 0, 0);
  }
  pdl::wait();
  pdl::launch_dependents();

  const T* x = static_cast<const T*>(a.x);
  for (int t = 0; t < a.m; ++t) {
    const uint4* x_row = reinterpret_cast<const uint4*>(x + t * a.ldx);
    uint4 xv[kLoads];
#pragma unroll
    for (int i = 0; i < kLoads; ++i)
      xv[i] = lane + 32 * i < pieces ? __ldg(x_row + lane + 32 * i) : make_uint4(0, 0, 0, 0);
    // 1 / rms as gemv_fused::rows_inv_rms takes it (each lane's pieces in order, then the warp
    // sum), so normed below has the fused GEMV's bits; every warp computes it for itself.
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      Pack8<T> v;
      v.u = xv[i];
#pragma unroll
      for (int j = 0; j < 8; ++j) ss += to_float(v.v[j]) * to_float(v.v[j]);
    }
    const float inv_rms = rsqrtf(warp_sum(ss) / static_cast<float>(a.h) + a.eps);
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      Pack8<T> n, wv;
      const bool live = lane + 32 * i < pieces;
      uint4 norm_i;
      if constexpr (kPreloadNorm)
        norm_i = nw[i];
      else
        norm_i = live ? __ldg(norm_weight + lane + 32 * i) : make_uint4(0, 0, 0, 0);
      n.u = gemv_fused::rms_transform<T>(xv[i], norm_i, inv_rms);
      wv.u = w[i];
#pragma unroll
      for (int j = 0; j < 8; ++j) acc += to_float(n.v[j]) * to_float(wv.v[j]);
      // The normed row, for the experts: block 0's warp 0 stores it (the bits used here).
      if (blockIdx.x == 0 && warp == 0 && live)
        reinterpret_cast<uint4*>(static_cast<T*>(a.normed) + t * a.ldn)[lane + 32 * i] = n.u;
    }
    const float v = warp_sum(acc);
    if (lane == 0 && e < a.experts) {
      if (a.logits_f32)
        static_cast<float*>(a.logits)[t * a.ldl + e] = v;
      else
        static_cast<T*>(a.logits)[t * a.ldl + e] = from_float<T>(v);
    }
  }

  // The last block to get here routes: every block's logits are stored before its count.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(a.counter, 1u) == gridDim.x - 1;
    if (last) __threadfence();
  }
  __syncthreads();
  if (!last) return;
  if (warp < a.m) {
    float logit[kSlots];
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int ei = lane + 32 * i;
      logit[i] = ei < a.experts ? load_logit<T>(a, warp, ei) : -INFINITY;
    }
    router::topk_softmax_warp(logit, lane, a.experts, a.k, a.renormalize,
                              a.weights + warp * a.k, a.ids + warp * a.k);
  }
  if (threadIdx.x == 0) *a.counter = 0u;
}

template <typename T, int kLoads>
void launch_slots(const RouterArgs& a, bool programmatic, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((a.experts + kWarps - 1) / kWarps);
  const int slots = (a.experts + 31) / 32;
  if (slots <= 1)
    launch_dependent_if(programmatic, moe_router_kernel<T, kLoads, 1>, blocks, kWarps * 32, 0, s, a);
  else if (slots <= 2)
    launch_dependent_if(programmatic, moe_router_kernel<T, kLoads, 2>, blocks, kWarps * 32, 0, s, a);
  else if (slots <= 4)
    launch_dependent_if(programmatic, moe_router_kernel<T, kLoads, 4>, blocks, kWarps * 32, 0, s, a);
  else
    launch_dependent_if(programmatic, moe_router_kernel<T, kLoads, 8>, blocks, kWarps * 32, 0, s, a);
}

}  // namespace

bool moe_router_fused_takes(const Tensor& x, const Tensor& norm_weight, const Tensor& w,
                            const Tensor& logits, const Tensor& normed) {
  if (x.dtype != DType::bf16 && x.dtype != DType::f16) return false;
  if (w.dtype != x.dtype || !w.is_contiguous()) return false;
  if (logits.dtype != x.dtype && logits.dtype != DType::f32) return false;
  const int64_t m = x.size(0), h = x.size(1), experts = w.size(0);
  if (m < 1 || m > kMaxTokens || h % 8 != 0 || h > kMaxHidden || experts > kMaxExperts) return false;
  // 16-byte loads and stores of x, norm_weight, w and normed rows.
  const int64_t elem = static_cast<int64_t>(dtype_size(x.dtype));
  for (const Tensor* t : {&x, &norm_weight, &w, &normed})
    if (!aligned16(t->data)) return false;
  return m == 1 || ((x.row_stride() * elem) % 16 == 0 && (normed.row_stride() * elem) % 16 == 0);
}

void moe_router_fused(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                      int k, bool renormalize, const Tensor& logits, const Tensor& normed,
                      const Tensor& topk_weights, const Tensor& topk_ids, const Tensor& counter,
                      Stream stream) {
  RouterArgs a{};
  a.x = x.data;
  a.norm_weight = norm_weight.data;
  a.w = w.data;
  a.logits = logits.data;
  a.normed = normed.data;
  a.weights = topk_weights.ptr<float>();
  a.ids = topk_ids.ptr<int32_t>();
  a.counter = static_cast<unsigned int*>(counter.data);
  a.ldx = x.row_stride();
  a.ldl = logits.row_stride();
  a.ldn = normed.row_stride();
  a.m = static_cast<int>(x.size(0));
  a.h = static_cast<int>(x.size(1));
  a.experts = static_cast<int>(w.size(0));
  a.k = k;
  a.eps = eps;
  a.logits_f32 = logits.dtype == DType::f32;
  a.renormalize = renormalize;
  const bool programmatic = programmatic_launch_enabled() && ops::ConstantWeights::active();
  auto s = static_cast<cudaStream_t>(stream.handle);
  dispatch_float_type(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {  // f32 is refused by moe_router_fused_takes
      if (a.h <= 2048)
        launch_slots<T, 8>(a, programmatic, s);
      else
        launch_slots<T, 16>(a, programmatic, s);
    }
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
