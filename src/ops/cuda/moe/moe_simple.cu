// Mixture of experts, the simple version: GEMV-style kernels, good for decode (a few tokens),
// correct but slow for long prefills (each (token, expert) pair re-reads its expert's weights).
//
// moe_route_topk_softmax: one warp per token. Each lane holds up to 16 of the (at most 512)
// logits in registers, expert e at lane e % 32, slot e / 32 (as many slots as E needs); the warp
// computes the softmax's maximum and sum, then runs k rounds of "largest remaining logit, lowest
// index among equals": two warp redux instructions on order-preserving integer keys, and a rescan
// by the winning lane only. Lane j keeps round j's choice and writes it.
//
// moe_experts, two launches:
//   1. grid (T*k, I / rows): each warp computes a few intermediate rows i of one (token, expert)
//      pair: the gate and up dot products over H (16-byte loads), then h = silu(g) * u with the
//      contract's roundings, into workspace[pair, i].
//   2. grid (T, H / rows): each warp computes a few output rows n of one token: for each of its
//      k experts, down[e][n, :] . workspace[pair, :], weighted and summed in fp32.
// Both kernels read the expert ids on the device: an id outside [0, E) gives a zero h row and is
// skipped in the sum, so it contributes nothing.
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace braid::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerBlock = kWarpsPerBlock * kRowsPerWarp;

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
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (t >= a.tokens) return;  // whole warps leave; no block barriers below
  const T* row = static_cast<const T*>(a.logits) + t * a.logits_stride;

  float x[kSlots];
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + 32 * i;
    x[i] = e < a.experts ? to_float(row[e]) : -INFINITY;
    m = fmaxf(m, x[i]);  // fmaxf skips NaN, as the reference's fmax does
  }
  m = warp_max(m);
  float sum = 0.0f;
  uint32_t key[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const bool expert = lane + 32 * i < a.experts;
    if (expert) sum += expf(x[i] - m);  // a NaN logit makes sum NaN
    key[i] = expert ? order_key(x[i]) : 0u;
  }
  sum = warp_sum(sum);

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
      my_weight = expf(key_value(top) - m) / sum;
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

// ---- experts ---------------------------------------------------------------------------------

struct ExpertArgs {
  const void* x;
  const float* weights;
  const int32_t* ids;
  const void* gate_up;
  const void* down;
  float* workspace;
  void* out;
  int64_t x_stride, out_stride;
  int hidden, inter, experts, k;
};

// V consecutive elements of T at p, as floats; kVec: whole 16-byte loads (V a multiple of them).
template <typename T, int V, bool kVec>
__device__ __forceinline__ void load_floats(const T* p, float (&f)[V]) {
  if constexpr (kVec) {
    constexpr int W = Vec16<T>::kSize;
    static_assert(V % W == 0, "a whole number of 16-byte words");
#pragma unroll
    for (int c = 0; c < V; c += W) {
      const Vec16<T> w = *reinterpret_cast<const Vec16<T>*>(p + c);
#pragma unroll
      for (int i = 0; i < W; ++i) f[c + i] = to_float(w.v[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = to_float(p[i]);
  }
}

// Kernel 1: h rows of one (token, expert) pair. kVec: 16-byte loads along H.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) moe_gate_up_kernel(ExpertArgs a) {
  constexpr int V = kVec ? Vec16<T>::kSize : 1;
  const int lane = threadIdx.x & 31;
  const int64_t pair = blockIdx.x;
  const int64_t t = pair / a.k;
  const int e = a.ids[pair];
  const int i0 = (static_cast<int>(blockIdx.y) * kWarpsPerBlock + threadIdx.x / 32) * kRowsPerWarp;
  if (i0 >= a.inter) return;
  float* h = a.workspace + pair * a.inter;
  if (e < 0 || e >= a.experts) {  // a bad id: a zero row (kernel 2 skips it anyway)
    if (lane < kRowsPerWarp && i0 + lane < a.inter) h[i0 + lane] = 0.0f;
    return;
  }

  const T* x = static_cast<const T*>(a.x) + t * a.x_stride;
  const T* expert = static_cast<const T*>(a.gate_up) + static_cast<int64_t>(e) * 2 * a.inter * a.hidden;
  const T* gate_rows[kRowsPerWarp];
  const T* up_rows[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = i0 + r < a.inter ? i0 + r : a.inter - 1;  // past the end: a harmless re-read
    gate_rows[r] = expert + static_cast<int64_t>(i) * a.hidden;
    up_rows[r] = expert + static_cast<int64_t>(a.inter + i) * a.hidden;
  }
  float g[kRowsPerWarp] = {}, u[kRowsPerWarp] = {};
  for (int c = lane * V; c < a.hidden; c += 32 * V) {
    float xf[V];
    load_floats<T, V, kVec>(x + c, xf);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      float gf[V], uf[V];
      load_floats<T, V, kVec>(gate_rows[r] + c, gf);
      load_floats<T, V, kVec>(up_rows[r] + c, uf);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        g[r] = fmaf(gf[v], xf[v], g[r]);
        u[r] = fmaf(uf[v], xf[v], u[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    // g and u rounded as a gemm's output; silu(g) * u in fp32, rounded once (the contract).
    const float gr = to_float(from_float<T>(warp_sum(g[r])));
    const float ur = to_float(from_float<T>(warp_sum(u[r])));
    if (lane == 0 && i0 + r < a.inter)
      h[i0 + r] = to_float(from_float<T>(gr / (1.0f + expf(-gr)) * ur));
  }
}

// Kernel 2: output rows of one token, summed over its k experts. kVec: 16-byte loads along I.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) moe_down_kernel(ExpertArgs a) {
  constexpr int V = kVec ? Vec16<T>::kSize : 1;
  const int lane = threadIdx.x & 31;
  const int64_t t = blockIdx.x;
  const int n0 = (static_cast<int>(blockIdx.y) * kWarpsPerBlock + threadIdx.x / 32) * kRowsPerWarp;
  if (n0 >= a.hidden) return;

  float acc[kRowsPerWarp] = {};
  for (int j = 0; j < a.k; ++j) {
    const int64_t pair = t * a.k + j;
    const int e = a.ids[pair];
    if (e < 0 || e >= a.experts) continue;  // contributes nothing
    const float w = a.weights[pair];
    const float* h = a.workspace + pair * a.inter;
    const T* rows[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int n = n0 + r < a.hidden ? n0 + r : a.hidden - 1;  // past the end: a re-read
      rows[r] = static_cast<const T*>(a.down) + (static_cast<int64_t>(e) * a.hidden + n) * a.inter;
    }
    float y[kRowsPerWarp] = {};
    for (int c = lane * V; c < a.inter; c += 32 * V) {
      float hf[V];
      load_floats<float, V, kVec>(h + c, hf);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        float df[V];
        load_floats<T, V, kVec>(rows[r] + c, df);
#pragma unroll
        for (int v = 0; v < V; ++v) y[r] = fmaf(df[v], hf[v], y[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) acc[r] = fmaf(w, warp_sum(y[r]), acc[r]);
  }
  T* out = static_cast<T*>(a.out) + t * a.out_stride;
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      if (n0 + r < a.hidden) out[n0 + r] = from_float<T>(acc[r]);
  }
}

unsigned blocks_for(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

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
      moe_route_kernel<T, 1><<<blocks, kWarpsPerBlock * 32, 0, s>>>(a);
    else if (slots <= 2)
      moe_route_kernel<T, 2><<<blocks, kWarpsPerBlock * 32, 0, s>>>(a);
    else if (slots <= 4)
      moe_route_kernel<T, 4><<<blocks, kWarpsPerBlock * 32, 0, s>>>(a);
    else if (slots <= 8)
      moe_route_kernel<T, 8><<<blocks, kWarpsPerBlock * 32, 0, s>>>(a);
    else
      moe_route_kernel<T, 16><<<blocks, kWarpsPerBlock * 32, 0, s>>>(a);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

void moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                 const Tensor& gate_up, const Tensor& down, const Tensor& workspace,
                 const Tensor& out, Stream stream) {
  const int64_t tokens = x.shape[0];
  ExpertArgs a{x.data, topk_weights.ptr<float>(), topk_ids.ptr<int32_t>(), gate_up.data,
               down.data, workspace.ptr<float>(), out.data, x.row_stride(), out.row_stride(),
               static_cast<int>(x.shape[1]), static_cast<int>(down.shape[2]),
               static_cast<int>(gate_up.shape[0]), static_cast<int>(topk_ids.shape[1])};
  const int elem = static_cast<int>(dtype_size(x.dtype));
  const int vec = 16 / elem;
  // Kernel 1 reads x and gate_up rows along H; kernel 2 reads down and workspace rows along I
  // (a workspace row of a multiple of vec floats is a whole number of 16-byte words).
  const bool vec_h = a.hidden % vec == 0 && aligned16(a.x) && aligned16(a.gate_up) &&
                     (a.x_stride * elem) % 16 == 0;
  const bool vec_i = a.inter % vec == 0 && aligned16(a.down) && aligned16(a.workspace);
  auto s = static_cast<cudaStream_t>(stream.handle);
  const dim3 grid1(static_cast<unsigned>(tokens * a.k), blocks_for(a.inter));
  const dim3 grid2(static_cast<unsigned>(tokens), blocks_for(a.hidden));
  dispatch_float_type(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (vec_h)
      moe_gate_up_kernel<T, true><<<grid1, kWarpsPerBlock * 32, 0, s>>>(a);
    else
      moe_gate_up_kernel<T, false><<<grid1, kWarpsPerBlock * 32, 0, s>>>(a);
  });
  BRAID_CUDA_CHECK_LAUNCH();
  dispatch_float_type(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (vec_i)
      moe_down_kernel<T, true><<<grid2, kWarpsPerBlock * 32, 0, s>>>(a);
    else
      moe_down_kernel<T, false><<<grid2, kWarpsPerBlock * 32, 0, s>>>(a);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
