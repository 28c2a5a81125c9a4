// The per-head steps of qk_norm_rope_kv_append, for the kernels that do them (qk_rope_kv.cu,
// and attention_decode.cu, whose decode-step variant rotates its own queries and appends the new
// key): a head staged in shared memory as fp32 (by its warp here, by the whole block there) is
// normalised by one warp with rms_norm's sums, rotated with rope.cu's expressions, and written
// out. Each step rounds to T where the
// separate ops write their outputs, so every caller gets the same bits as rms_norm + rope_apply.
//
// The sum of squares depends on the order of the additions, so the warp replays rms_norm's launch
// for that tensor: the same per-thread partial sums (vector width and thread count as rms_norm.cu
// picks them from the view, norm_layout below), the same warp butterflies, and block_sum's second
// butterfly over the per-warp sums. The rounding points and expressions of the norm and the
// rotation are those of rms_norm.cu and rope.cu; cos/sin come from the same RopeTable through the
// same sincosf.
#pragma once

#include <algorithm>

#include "braid/ops.h"
#include "braid/tensor.h"
#include "ops/cuda/common.cuh"

namespace braid::cuda::qk_rope {

// How rms_norm.cu would launch on a tensor: elements per thread load and threads per row.
struct NormLayout {
  int vec, threads;
};

struct Head {
  void* data;
  int64_t token_stride, head_stride;  // elements
  bool vec;                           // every head start 16-byte aligned
};

template <typename T>
__device__ __forceinline__ void load_head(float* buf, const T* src, int d, bool vec) {
  const int lane = threadIdx.x & 31;
  if (vec) {
    constexpr int V = Vec16<T>::kSize;
    for (int j = lane * V; j < d; j += 32 * V) {
      Vec16<T> x = *reinterpret_cast<const Vec16<T>*>(src + j);
#pragma unroll
      for (int i = 0; i < V; ++i) buf[j + i] = to_float(x.v[i]);
    }
  } else {
    for (int j = lane; j < d; j += 32) buf[j] = to_float(src[j]);
  }
}

template <typename T>
__device__ __forceinline__ void store_head(T* dst, const float* buf, int d, bool vec) {
  const int lane = threadIdx.x & 31;
  if (vec) {
    constexpr int V = Vec16<T>::kSize;
    for (int j = lane * V; j < d; j += 32 * V) {
      Vec16<T> x;
#pragma unroll
      for (int i = 0; i < V; ++i) x.v[i] = from_float<T>(buf[j + i]);
      *reinterpret_cast<Vec16<T>*>(dst + j) = x;
    }
  } else {
    for (int j = lane; j < d; j += 32) dst[j] = from_float<T>(buf[j]);
  }
}

template <typename T>
__device__ __forceinline__ void copy_head(T* dst, const T* src, int d, bool vec) {
  const int lane = threadIdx.x & 31;
  if (vec) {
    constexpr int V = Vec16<T>::kSize;
    for (int j = lane * V; j < d; j += 32 * V)
      *reinterpret_cast<Vec16<T>*>(dst + j) = *reinterpret_cast<const Vec16<T>*>(src + j);
  } else {
    for (int j = lane; j < d; j += 32) dst[j] = src[j];
  }
}

// rms_norm_kernel's sum of squares and block_sum, replayed by one warp: virtual thread t of the
// rms_norm launch is lane t % 32 in round t / 32.
__device__ __forceinline__ float replay_sum_sq(const float* buf, int d, NormLayout l) {
  const int lane = threadIdx.x & 31;
  const int warps = (l.threads + 31) >> 5;
  float warp_total = 0.0f;  // block_sum's scratch[lane], or 0 past the last warp
  for (int w = 0; w < warps; ++w) {
    const int t = w * 32 + lane;
    float sum_sq = 0.0f;
    for (int j = t * l.vec; j < d; j += l.threads * l.vec) {
      for (int i = 0; i < l.vec; ++i) {
        float f = buf[j + i];
        sum_sq += f * f;
      }
    }
    const float s = warp_sum(sum_sq);
    if (lane == w) warp_total = s;
  }
  return warp_sum(warp_total);
}

template <typename T>
__device__ __forceinline__ void norm_head(float* buf, const T* w, int d, float eps, NormLayout l) {
  const int lane = threadIdx.x & 31;
  const float inv_rms = rsqrtf(replay_sum_sq(buf, d, l) / static_cast<float>(d) + eps);
  __syncwarp();  // every lane has read the head before any lane overwrites it
  for (int j = lane; j < d; j += 32) {
    const T n = from_float<T>(buf[j] * inv_rms);
    buf[j] = to_float(from_float<T>(to_float(w[j]) * to_float(n)));
  }
  __syncwarp();
}

template <typename T>
__device__ __forceinline__ void rotate_head(float* buf, int half, bool interleaved,
                                            const float* cos_s, const float* sin_s) {
  const int lane = threadIdx.x & 31;
  for (int i = lane; i < half; i += 32) {
    const int i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
    const float x1 = buf[i1], x2 = buf[i2];
    const float c = cos_s[i], s = sin_s[i];
    buf[i1] = to_float(from_float<T>(x1 * c - x2 * s));
    buf[i2] = to_float(from_float<T>(x2 * c + x1 * s));
  }
  __syncwarp();
}
// One head, as qk_norm_rope_kv_append leaves it: loaded into buf (fp32), normalised with
// norm_weight (null: no norm) and rotated by cos_s / sin_s (cos_sin below).
template <typename T>
__device__ __forceinline__ void load_norm_rotate(float* buf, const T* src, int d, bool vec,
                                                 const T* norm_weight, float eps, NormLayout layout,
                                                 const ops::RopeTable& table, const float* cos_s,
                                                 const float* sin_s) {
  load_head<T>(buf, src, d, vec);
  __syncwarp();
  if (norm_weight) norm_head<T>(buf, norm_weight, d, eps, layout);
  rotate_head<T>(buf, table.half, table.interleaved, cos_s, sin_s);
}

// cos/sin of position `pos` for every rotary pair, scaled as rope.cu scales them; all threads of
// the block take part (the caller syncs before reading them).
__device__ __forceinline__ void cos_sin(const ops::RopeTable& table, float pos, float* cos_s,
                                        float* sin_s) {
  for (int i = threadIdx.x; i < table.half; i += blockDim.x) {
    float s, c;
    sincosf(pos * table.inv_freq[i], &s, &c);  // as rope.cu: the accurate sincosf
    cos_s[i] = c * table.attention_scaling;
    sin_s[i] = s * table.attention_scaling;
  }
}

// rms_norm.cu's launch choice for x = out = t with weight w.
inline NormLayout norm_layout(const Tensor& t, const Tensor& w) {
  RowGrid g;
  t.row_grid(&g);  // checked by the op's entry
  const int64_t elem = static_cast<int64_t>(dtype_size(t.dtype));
  const int vec = static_cast<int>(16 / elem);
  const int d = static_cast<int>(t.size(-1));
  const bool can_vec = d % vec == 0 && aligned16(t.data) && aligned16(w.data) &&
                       (g.outer_stride * elem) % 16 == 0 && (g.inner_stride * elem) % 16 == 0;
  const int per_thread = can_vec ? vec : 1;
  int threads = (d / per_thread + 31) / 32 * 32;
  threads = std::clamp(threads, 32, 1024);
  return {per_thread, threads};
}

inline Head head_of(const Tensor& t) {
  const int64_t elem = static_cast<int64_t>(dtype_size(t.dtype));
  const bool vec = aligned16(t.data) && (t.size(2) * elem) % 16 == 0 &&
                   (t.strides[0] * elem) % 16 == 0 && (t.strides[1] * elem) % 16 == 0;
  return {t.data, t.strides[0], t.strides[1], vec};
}


}  // namespace braid::cuda::qk_rope
