// Argmax over the last dimension (greedy sampling): one block per row. Each thread scans its
// share of the row, then the (value, index) pairs are reduced across the warp and the block.
// The order is torch.argmax's: NaN above every number, and equal values (or NaNs) go to the
// lower index. Because the order compares indices too, it is total, and the reduction gives the
// same answer whatever the thread layout.
#include <climits>

#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace braid::cuda {

namespace {

struct ArgmaxArgs {
  const void* x;
  void* out;
  int64_t x_stride;
  int d;
  bool out_i64;
};

// Whether (av, ai) comes before (bv, bi) in torch.argmax's order.
__device__ __forceinline__ bool better(float av, int ai, float bv, int bi) {
  const bool a_nan = isnan(av), b_nan = isnan(bv);
  if (a_nan || b_nan) return a_nan && (!b_nan || ai < bi);
  return av > bv || (av == bv && ai < bi);
}

__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

template <typename T, bool kVec>
__global__ void argmax_kernel(ArgmaxArgs a) {
  __shared__ float warp_value[32];
  __shared__ int warp_index[32];
  constexpr int V = kVec ? Vec16<T>::kSize : 1;
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(a.x) + row * a.x_stride;

  // INT_MAX loses to every real element, even -inf, so threads with no elements are harmless.
  float best_v = -INFINITY;
  int best_i = INT_MAX;
  for (int j = threadIdx.x * V; j < a.d; j += blockDim.x * V) {
    T e[V];
    if constexpr (kVec) {
      *reinterpret_cast<Vec16<T>*>(e) = *reinterpret_cast<const Vec16<T>*>(x + j);
    } else {
      e[0] = x[j];
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float v = to_float(e[k]);
      if (better(v, j + k, best_v, best_i)) {
        best_v = v;
        best_i = j + k;
      }
    }
  }

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  warp_best(best_v, best_i);
  if (lane == 0) {
    warp_value[warp] = best_v;
    warp_index[warp] = best_i;
  }
  __syncthreads();
  if (warp != 0) return;
  best_v = lane < warps ? warp_value[lane] : -INFINITY;
  best_i = lane < warps ? warp_index[lane] : INT_MAX;
  warp_best(best_v, best_i);
  if (lane == 0) {
    if (a.out_i64)
      static_cast<int64_t*>(a.out)[row] = best_i;
    else
      static_cast<int32_t*>(a.out)[row] = best_i;
  }
}

}  // namespace

void argmax(const Tensor& x, const Tensor& out, Stream stream) {
  ArgmaxArgs a{x.data, out.data, x.row_stride(), static_cast<int>(x.size(-1)),
               out.dtype == DType::i64};
  const int elem = static_cast<int>(dtype_size(x.dtype));
  const int vec = 16 / elem;
  const bool can_vec = a.d % vec == 0 && aligned16(a.x) && (a.x_stride * elem) % 16 == 0;
  const int per_thread = can_vec ? vec : 1;
  int threads = (a.d / per_thread + 31) / 32 * 32;
  threads = threads < 32 ? 32 : (threads > 1024 ? 1024 : threads);
  const auto blocks = static_cast<unsigned>(x.rows());
  auto s = static_cast<cudaStream_t>(stream.handle);
  dispatch_float_type(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (can_vec)
      argmax_kernel<T, true><<<blocks, threads, 0, s>>>(a);
    else
      argmax_kernel<T, false><<<blocks, threads, 0, s>>>(a);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
