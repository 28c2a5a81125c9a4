// qk_norm_rope_kv_append: per-head q/k RMSNorm, RoPE and the KV-cache append in one kernel.
// Grid: (token, group of kWarps heads); each warp takes one q head, or one k head together with
// the v head of the same index. The warp stages its head in shared memory as fp32 (the values
// stay exactly representable in T: each step rounds to T, as the separate ops do when they write
// their outputs), normalises it, rotates it, and writes it back to q/k and, for k, to the cache.
//
// Bit-identity with rms_norm + rope_apply + kv_append: the sum of squares depends on the order
// of the additions, so the warp replays rms_norm's launch for that tensor: the same per-thread
// partial sums (vector width and thread count as rms_norm.cu picks them from the view), the same
// warp butterflies, and block_sum's second butterfly over the per-warp sums. The rounding points
// and expressions of the norm and the rotation are those of rms_norm.cu and rope.cu; cos/sin come
// from the same RopeTable (passed by value) through the same sincosf.
#include <algorithm>

#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

constexpr int kWarps = 4;  // heads per block

// How rms_norm.cu would launch on a tensor: elements per thread load and threads per row.
struct NormLayout {
  int vec, threads;
};

struct Head {
  void* data;
  int64_t token_stride, head_stride;  // elements
  bool vec;                           // every head start 16-byte aligned
};

struct FusedArgs {
  Head q, k, v;
  const void* q_norm;  // null: no norm
  const void* k_norm;
  NormLayout q_layout, k_layout;
  float eps;
  const void* positions;
  bool positions_i64;
  const int32_t* slots;
  void* k_pages;
  void* v_pages;
  bool cache_vec;
  int q_heads, kv_heads, head_dim;
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

template <typename T>
__global__ void qk_rope_kv_kernel(FusedArgs a, ops::RopeTable table) {
  __shared__ float cos_s[ops::kMaxRotaryHalf], sin_s[ops::kMaxRotaryHalf];
  extern __shared__ float heads_s[];  // kWarps * head_dim
  pdl::wait_then_release();
  const int64_t tok = blockIdx.x;
  const int64_t pos = a.positions_i64 ? static_cast<const int64_t*>(a.positions)[tok]
                                      : static_cast<const int32_t*>(a.positions)[tok];
  const float p = static_cast<float>(pos);
  for (int i = threadIdx.x; i < table.half; i += blockDim.x) {
    float s, c;
    sincosf(p * table.inv_freq[i], &s, &c);  // as rope.cu: the accurate sincosf
    cos_s[i] = c * table.attention_scaling;
    sin_s[i] = s * table.attention_scaling;
  }
  __syncthreads();

  const int warp = threadIdx.x >> 5;
  const int h = blockIdx.y * kWarps + warp;
  if (h >= a.q_heads + a.kv_heads) return;
  const int d = a.head_dim;
  float* buf = heads_s + warp * d;
  const bool is_q = h < a.q_heads;
  const int kh = h - a.q_heads;
  const Head& hd = is_q ? a.q : a.k;
  T* src = static_cast<T*>(hd.data) + tok * hd.token_stride +
           static_cast<int64_t>(is_q ? h : kh) * hd.head_stride;

  load_head<T>(buf, src, d, hd.vec);
  __syncwarp();
  if (a.q_norm)
    norm_head<T>(buf, static_cast<const T*>(is_q ? a.q_norm : a.k_norm), d, a.eps,
                 is_q ? a.q_layout : a.k_layout);
  rotate_head<T>(buf, table.half, table.interleaved, cos_s, sin_s);
  store_head<T>(src, buf, d, hd.vec);
  if (is_q) return;

  // kv_append's layout: [slot, kv_heads, head_dim] within the contiguous pages.
  const int64_t dst = (static_cast<int64_t>(a.slots[tok]) * a.kv_heads + kh) * d;
  store_head<T>(static_cast<T*>(a.k_pages) + dst, buf, d, a.cache_vec);
  const T* v = static_cast<const T*>(a.v.data) + tok * a.v.token_stride + kh * a.v.head_stride;
  copy_head<T>(static_cast<T*>(a.v_pages) + dst, v, d, a.cache_vec && a.v.vec);
}

// rms_norm.cu's launch choice for x = out = t with weight w.
NormLayout norm_layout(const Tensor& t, const Tensor& w) {
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

Head head_of(const Tensor& t) {
  const int64_t elem = static_cast<int64_t>(dtype_size(t.dtype));
  const bool vec = aligned16(t.data) && (t.size(2) * elem) % 16 == 0 &&
                   (t.strides[0] * elem) % 16 == 0 && (t.strides[1] * elem) % 16 == 0;
  return {t.data, t.strides[0], t.strides[1], vec};
}

}  // namespace

void qk_norm_rope_kv_append(const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& q_norm, const Tensor& k_norm, float eps,
                            const Tensor& positions, const ops::RopeTable& table,
                            const Tensor& slots, const Tensor& k_pages, const Tensor& v_pages,
                            Stream stream) {
  const bool norm = q_norm.data != nullptr;
  const int64_t elem = static_cast<int64_t>(dtype_size(q.dtype));
  const int head_dim = static_cast<int>(q.size(2));
  FusedArgs a{head_of(q),
              head_of(k),
              head_of(v),
              norm ? q_norm.data : nullptr,
              norm ? k_norm.data : nullptr,
              norm ? norm_layout(q, q_norm) : NormLayout{1, 32},
              norm ? norm_layout(k, k_norm) : NormLayout{1, 32},
              eps,
              positions.data,
              positions.dtype == DType::i64,
              slots.ptr<const int32_t>(),
              k_pages.data,
              v_pages.data,
              aligned16(k_pages.data) && aligned16(v_pages.data) && (head_dim * elem) % 16 == 0,
              static_cast<int>(q.size(1)),
              static_cast<int>(k.size(1)),
              head_dim};
  const int64_t n = q.size(0);
  const int heads = a.q_heads + a.kv_heads;
  if (n == 0 || heads == 0) return;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((heads + kWarps - 1) / kWarps));
  const size_t smem = sizeof(float) * kWarps * static_cast<size_t>(head_dim);
  auto s = static_cast<cudaStream_t>(stream.handle);
  dispatch_float_type(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_programmatic(qk_rope_kv_kernel<T>, grid, kWarps * 32, smem, s, a, table);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
