// Softmax over the last dimension, fp32 math. Rows of up to kWarpRowMax elements get one warp
// each (several rows per block, no block-wide barriers); longer rows, up to a vocabulary, get
// one block each.
//
// Pass 1 reads the row once, each thread keeping a running maximum m and a sum s of exp(x - m)
// that is rescaled whenever m grows ("online" softmax); the group then combines the (m, s)
// pairs into the row maximum M and the sum S of exp(x - M). Pass 2 re-reads the row (from L1/L2)
// and writes exp(x - M) / S.
//
// -inf entries contribute 0. A row of all -inf has M = -inf, so x - M is NaN and every output
// is NaN, as with torch.softmax and the CPU reference. A NaN entry makes the sum, and so the
// whole row, NaN.
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace braid::cuda {

namespace {

constexpr int kWarpRowMax = 1024;
constexpr int kWarpRowThreads = 128;  // 4 rows per block in warp-per-row mode

struct SoftmaxArgs {
  const void* x;
  void* out;
  int64_t x_stride, out_stride;
  int64_t rows;
  int d;
  bool warp_per_row;
};

// V consecutive elements of T at p, as floats (one 16-byte load when kVec).
template <typename T, bool kVec, int V>
__device__ __forceinline__ void load_floats(const T* p, float (&v)[V]) {
  if constexpr (kVec) {
    const Vec16<T> w = *reinterpret_cast<const Vec16<T>*>(p);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = to_float(w.v[i]);
  } else {
    v[0] = to_float(p[0]);
  }
}

// V floats rounded to O and stored at p (V * sizeof(O) bytes: one or two 16-byte stores).
template <typename O, bool kVec, int V>
__device__ __forceinline__ void store_floats(O* p, const float (&v)[V]) {
  if constexpr (kVec) {
    constexpr int K = Vec16<O>::kSize;
    static_assert(V % K == 0, "output vector must be a whole number of 16-byte words");
#pragma unroll
    for (int c = 0; c < V; c += K) {
      Vec16<O> w;
#pragma unroll
      for (int i = 0; i < K; ++i) w.v[i] = from_float<O>(v[c + i]);
      *reinterpret_cast<Vec16<O>*>(p + c) = w;
    }
  } else {
    p[0] = from_float<O>(v[0]);
  }
}

template <typename T, typename O, bool kVec>
__global__ void softmax_kernel(SoftmaxArgs a) {
  __shared__ float scratch[32];
  constexpr int V = kVec ? Vec16<T>::kSize : 1;
  // The group that owns a row: one warp, or the whole block. The choice is uniform per launch,
  // so the block-wide barriers in block_max/block_sum are reached by every thread or by none.
  int64_t row;
  int tid, group;
  if (a.warp_per_row) {
    row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    tid = threadIdx.x & 31;
    group = 32;
    if (row >= a.rows) return;  // a whole warp leaves; no block barriers in this mode
  } else {
    row = blockIdx.x;
    tid = threadIdx.x;
    group = blockDim.x;
  }
  const T* x = static_cast<const T*>(a.x) + row * a.x_stride;
  O* out = static_cast<O*>(a.out) + row * a.out_stride;

  float m = -INFINITY, s = 0.0f;
  for (int j = tid * V; j < a.d; j += group * V) {
    float v[V];
    load_floats<T, kVec>(x + j, v);
    float m_new = m;
#pragma unroll
    for (int i = 0; i < V; ++i) m_new = fmaxf(m_new, v[i]);  // fmaxf skips NaN
    if (m_new != m) s *= expf(m - m_new);
#pragma unroll
    for (int i = 0; i < V; ++i) s += v[i] == -INFINITY ? 0.0f : expf(v[i] - m_new);
    m = m_new;
  }
  const float row_max = a.warp_per_row ? warp_max(m) : block_max(m, scratch);
  // m == row_max also covers a thread that saw only -inf in an all -inf row (s is 0 there).
  const float scaled = m == row_max ? s : s * expf(m - row_max);
  const float inv_sum = 1.0f / (a.warp_per_row ? warp_sum(scaled) : block_sum(scaled, scratch));

  for (int j = tid * V; j < a.d; j += group * V) {
    float v[V];
    load_floats<T, kVec>(x + j, v);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = expf(v[i] - row_max) * inv_sum;
    store_floats<O, kVec>(out + j, v);
  }
}

template <typename T, typename O>
void launch(const SoftmaxArgs& a, bool can_vec, cudaStream_t s) {
  unsigned blocks;
  int threads;
  if (a.warp_per_row) {
    threads = kWarpRowThreads;
    const int rows_per_block = kWarpRowThreads / 32;
    blocks = static_cast<unsigned>((a.rows + rows_per_block - 1) / rows_per_block);
  } else {
    const int per_thread = can_vec ? Vec16<T>::kSize : 1;
    threads = (a.d / per_thread + 31) / 32 * 32;
    threads = threads > 1024 ? 1024 : threads;
    blocks = static_cast<unsigned>(a.rows);
  }
  if (can_vec)
    softmax_kernel<T, O, true><<<blocks, threads, 0, s>>>(a);
  else
    softmax_kernel<T, O, false><<<blocks, threads, 0, s>>>(a);
}

}  // namespace

void softmax(const Tensor& x, const Tensor& out, Stream stream) {
  const int d = static_cast<int>(x.size(-1));
  SoftmaxArgs a{x.data, out.data, x.row_stride(), out.row_stride(), x.rows(), d,
                d <= kWarpRowMax};
  const int in_elem = static_cast<int>(dtype_size(x.dtype));
  const int out_elem = static_cast<int>(dtype_size(out.dtype));
  const bool can_vec = d % (16 / in_elem) == 0 && aligned16(a.x) && aligned16(a.out) &&
                       (a.x_stride * in_elem) % 16 == 0 && (a.out_stride * out_elem) % 16 == 0;
  auto s = static_cast<cudaStream_t>(stream.handle);
  const bool out_f32 = out.dtype == DType::f32;
  dispatch_float_type(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (out_f32)
      launch<T, float>(a, can_vec, s);
    else
      launch<T, T>(a, can_vec, s);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
