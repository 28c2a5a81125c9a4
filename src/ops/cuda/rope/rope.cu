// Rotary position embedding, in place on q and k: one block per token.
// The block first computes cos/sin of each frequency for its token into shared memory (sincosf is
// the expensive part, and every head of the token shares it), then its threads walk the
// (head, group of pairs) items of q and k, each rotating V pairs with 16-byte loads when possible.
// The frequency table arrives by value as a kernel parameter: no device memory, graph-capturable.
#include <algorithm>

#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

struct RopeArgs {
  void* q;
  void* k;  // null: q only
  const void* positions;
  bool positions_i64;
  int q_heads, kv_heads;
  int64_t q_token_stride, q_head_stride, k_token_stride, k_head_stride;
};

template <typename T, int V>
__device__ __forceinline__ void rotate_pairs(T* v, int i0, int half, const float* cos_s,
                                             const float* sin_s) {
  T a[V], b[V];
  if constexpr (V > 1) {
    *reinterpret_cast<Vec16<T>*>(a) = *reinterpret_cast<const Vec16<T>*>(v + i0);
    *reinterpret_cast<Vec16<T>*>(b) = *reinterpret_cast<const Vec16<T>*>(v + i0 + half);
  } else {
    a[0] = v[i0];
    b[0] = v[i0 + half];
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const float x1 = to_float(a[j]), x2 = to_float(b[j]);
    const float c = cos_s[i0 + j], s = sin_s[i0 + j];
    a[j] = from_float<T>(x1 * c - x2 * s);
    b[j] = from_float<T>(x2 * c + x1 * s);
  }
  if constexpr (V > 1) {
    *reinterpret_cast<Vec16<T>*>(v + i0) = *reinterpret_cast<Vec16<T>*>(a);
    *reinterpret_cast<Vec16<T>*>(v + i0 + half) = *reinterpret_cast<Vec16<T>*>(b);
  } else {
    v[i0] = a[0];
    v[i0 + half] = b[0];
  }
}

// Interleaved pairs (v[2i], v[2i + 1]): one pair per item, the two values adjacent.
template <typename T>
__device__ __forceinline__ void rotate_adjacent(T* v, int i, const float* cos_s, const float* sin_s) {
  const float x1 = to_float(v[2 * i]), x2 = to_float(v[2 * i + 1]);
  v[2 * i] = from_float<T>(x1 * cos_s[i] - x2 * sin_s[i]);
  v[2 * i + 1] = from_float<T>(x2 * cos_s[i] + x1 * sin_s[i]);
}

template <typename T, int V>
__global__ void rope_kernel(RopeArgs a, ops::RopeTable table) {
  __shared__ float cos_s[ops::kMaxRotaryHalf], sin_s[ops::kMaxRotaryHalf];
  pdl::wait_then_release();
  const int64_t tok = blockIdx.x;
  const int64_t pos = a.positions_i64 ? static_cast<const int64_t*>(a.positions)[tok]
                                      : static_cast<const int32_t*>(a.positions)[tok];
  const float p = static_cast<float>(pos);
  for (int i = threadIdx.x; i < table.half; i += blockDim.x) {
    float s, c;
    // The accurate sincosf, not __sincosf: angles reach 1e5 radians at long context.
    sincosf(p * table.inv_freq[i], &s, &c);
    cos_s[i] = c * table.attention_scaling;
    sin_s[i] = s * table.attention_scaling;
  }
  __syncthreads();

  const int groups = table.half / V;  // groups of V pairs per head
  const int items = (a.q_heads + a.kv_heads) * groups;
  for (int w = threadIdx.x; w < items; w += blockDim.x) {
    const int h = w / groups, i0 = (w - h * groups) * V;
    T* v = h < a.q_heads
               ? static_cast<T*>(a.q) + tok * a.q_token_stride + h * a.q_head_stride
               : static_cast<T*>(a.k) + tok * a.k_token_stride + (h - a.q_heads) * a.k_head_stride;
    if (table.interleaved)  // launched with V == 1
      rotate_adjacent<T>(v, i0, cos_s, sin_s);
    else
      rotate_pairs<T, V>(v, i0, table.half, cos_s, sin_s);
  }
}

}  // namespace

void rope_apply(const Tensor& q, const Tensor& k, const Tensor& positions,
                const ops::RopeTable& table, Stream stream) {
  const bool has_k = k.ndim == 3;
  RopeArgs a{q.data,
             has_k ? k.data : nullptr,
             positions.data,
             positions.dtype == DType::i64,
             static_cast<int>(q.shape[1]),
             has_k ? static_cast<int>(k.shape[1]) : 0,
             q.strides[0],
             q.strides[1],
             has_k ? k.strides[0] : 0,
             has_k ? k.strides[1] : 0};
  const int64_t n = q.shape[0];
  if (n == 0 || table.half == 0) return;

  // 16-byte vectors need the pair groups to start 16-byte aligned in every head of q and k.
  const int64_t elem = static_cast<int64_t>(dtype_size(q.dtype));
  const int vec = static_cast<int>(16 / elem);
  auto aligned = [&](const void* base, int64_t s0, int64_t s1) {
    return aligned16(base) && (s0 * elem) % 16 == 0 && (s1 * elem) % 16 == 0;
  };
  bool can_vec = !table.interleaved && table.half % vec == 0 &&
                 aligned(a.q, a.q_token_stride, a.q_head_stride);
  if (has_k) can_vec = can_vec && aligned(a.k, a.k_token_stride, a.k_head_stride);

  const int per_thread = can_vec ? vec : 1;
  const int64_t items = static_cast<int64_t>(a.q_heads + a.kv_heads) * (table.half / per_thread);
  int threads = static_cast<int>(std::min<int64_t>((items + 31) / 32 * 32, 256));
  threads = std::max(threads, 32);
  auto s = static_cast<cudaStream_t>(stream.handle);
  dispatch_float_type(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (can_vec)
      launch_programmatic(rope_kernel<T, Vec16<T>::kSize>, static_cast<unsigned>(n), threads, 0,
                          s, a, table);
    else
      launch_programmatic(rope_kernel<T, 1>, static_cast<unsigned>(n), threads, 0, s, a, table);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
