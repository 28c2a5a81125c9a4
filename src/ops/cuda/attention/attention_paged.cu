// Attention over a paged KV cache, the simple version: one warp per (query token, query head).
//
// The warp finds its token's sequence by binary search over cu_seqlens_q (so the batch layout
// never leaves the device), then walks the visible keys through the page table with an online
// softmax in fp32: a running maximum m, a running sum l of exp(score - m), and the weighted sum
// of values `acc`, both rescaled whenever m grows. Each lane owns head_dim / 32 consecutive
// elements of q, of each key and value row, and of acc; a score is the warp-wide sum of the
// lanes' partial dot products. The kernel is compiled for padded widths D = 32, 64, 128, 256;
// a head_dim below D (16, 96, ...) leaves the lanes past it idle (their elements read as zero).
//
// Keys are taken kKeysPerStep at a time so that their loads (and the shuffles of their dot
// products) are independent and overlap, rather than one dependent round trip per key.
//
// Neighbouring warps of a block handle neighbouring heads of one token, which mostly share a KV
// head, so the repeated K/V reads of a GQA group come from L1/L2.
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace braid::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kKeysPerStep = 8;

struct AttnArgs {
  const void* q;
  const void* k_pages;
  const void* v_pages;
  const int32_t* page_table;
  const int32_t* kv_lens;
  const int32_t* cu_seqlens_q;
  void* out;
  float* lse;  // null: not requested
  int64_t q_stride_token, q_stride_head, out_stride_token, out_stride_head;
  int64_t total_q;
  int head_dim;  // <= D
  int q_heads, kv_heads, group;
  int batch, max_pages, page_size;
  float scale;
  bool causal;
};

// E consecutive elements of T, aligned to their size (at most 16 bytes: wider ones become
// several 16-byte loads).
template <typename T, int E>
struct alignas(E * sizeof(T) < 16 ? E * sizeof(T) : 16) Pack {
  T v[E];
};

// The E elements of one lane's slice of a row, as floats. kVec: one aligned vector load (only
// when head_dim == D). Otherwise element by element; those at or past `valid` read as zero.
template <typename T, int E, bool kVec>
__device__ __forceinline__ void load_slice(const T* p, int valid, float (&f)[E]) {
  if constexpr (kVec) {
    const Pack<T, E> w = *reinterpret_cast<const Pack<T, E>*>(p);
#pragma unroll
    for (int i = 0; i < E; ++i) f[i] = to_float(w.v[i]);
  } else {
#pragma unroll
    for (int i = 0; i < E; ++i) f[i] = i < valid ? to_float(p[i]) : 0.0f;
  }
}

// The sequence holding query row t: the largest b with cu_seqlens_q[b] <= t (empty sequences
// share their offset with the next one, and the largest such b is the non-empty one).
__device__ __forceinline__ int find_sequence(const int32_t* cu, int batch, int64_t t) {
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// D: head_dim padded to a multiple of 32. kVec: head_dim == D and K/V rows are read with vector
// loads (the page pools are 16-byte aligned).
template <typename T, int D, bool kVec>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) attention_paged_kernel(AttnArgs a) {
  constexpr int E = D / 32;  // elements per lane
  const int lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (item >= a.total_q * a.q_heads) return;  // whole warps leave; no block barriers below
  const int64_t t = item / a.q_heads;
  const int h = static_cast<int>(item % a.q_heads);
  const int kh = h / a.group;

  const int b = find_sequence(a.cu_seqlens_q, a.batch, t);
  // Key indices fit in 32 bits (kv_lens is i32); 32-bit division by page_size is much cheaper.
  const int q_begin = a.cu_seqlens_q[b];
  const int q_len = a.cu_seqlens_q[b + 1] - q_begin;
  const int kv_len = a.kv_lens[b];
  // Queries are the sequence's last q_len tokens: query i sits at position kv_len - q_len + i.
  const int visible = a.causal ? kv_len - q_len + static_cast<int>(t - q_begin) + 1 : kv_len;
  const int32_t* table = a.page_table + static_cast<int64_t>(b) * a.max_pages;

  // How many of this lane's E elements lie inside head_dim (E, or fewer for padded widths).
  const int valid = a.head_dim - lane * E;
  float q[E];
  load_slice<T, E, false>(static_cast<const T*>(a.q) + t * a.q_stride_token +
                              h * a.q_stride_head + lane * E,
                          valid, q);
  // Offset of this lane's slice within a token's K/V row block [kv_heads, head_dim].
  const int64_t lane_offset = static_cast<int64_t>(kh) * a.head_dim + lane * E;
  const int64_t token_elems = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  const T* k_pages = static_cast<const T*>(a.k_pages);
  const T* v_pages = static_cast<const T*>(a.v_pages);

  float m = -INFINITY, l = 0.0f, acc[E];
#pragma unroll
  for (int i = 0; i < E; ++i) acc[i] = 0.0f;

  for (int j0 = 0; j0 < visible; j0 += kKeysPerStep) {
    // Element offsets of the step's K/V rows (for this lane), through the page table.
    int64_t row[kKeysPerStep];
    float s[kKeysPerStep];
#pragma unroll
    for (int u = 0; u < kKeysPerStep; ++u) {
      const int j = j0 + u < visible ? j0 + u : j0;  // past the end: a harmless re-read
      const int64_t slot = static_cast<int64_t>(table[j / a.page_size]) * a.page_size + j % a.page_size;
      row[u] = slot * token_elems + lane_offset;
      float kf[E];
      load_slice<T, E, kVec>(k_pages + row[u], valid, kf);
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < E; ++i) dot = fmaf(q[i], kf[i], dot);
      s[u] = dot;
    }
    float m_new = m;
#pragma unroll
    for (int u = 0; u < kKeysPerStep; ++u) {
      s[u] = j0 + u < visible ? warp_sum(s[u]) * a.scale : -INFINITY;
      m_new = fmaxf(m_new, s[u]);
    }
    // m_new is finite (key j0 is visible), so the first step's correction is exp(-inf) = 0.
    const float correction = expf(m - m_new);
    float chunk[E];  // this step's weighted values, summed apart for accuracy
#pragma unroll
    for (int i = 0; i < E; ++i) chunk[i] = 0.0f;
    float p_sum = 0.0f;
#pragma unroll
    for (int u = 0; u < kKeysPerStep; ++u) {
      const float p = expf(s[u] - m_new);  // 0 for masked keys
      p_sum += p;
      float vf[E];
      load_slice<T, E, kVec>(v_pages + row[u], valid, vf);
#pragma unroll
      for (int i = 0; i < E; ++i) chunk[i] = fmaf(p, vf[i], chunk[i]);
    }
    l = l * correction + p_sum;
#pragma unroll
    for (int i = 0; i < E; ++i) acc[i] = acc[i] * correction + chunk[i];
    m = m_new;
  }

  const float inv_l = 1.0f / l;
  T* out = static_cast<T*>(a.out) + t * a.out_stride_token + h * a.out_stride_head + lane * E;
#pragma unroll
  for (int i = 0; i < E; ++i)
    if (i < valid) out[i] = from_float<T>(acc[i] * inv_l);
  if (a.lse != nullptr && lane == 0) a.lse[item] = m + logf(l);
}

template <typename T, int D>
void launch(const AttnArgs& a, bool vec, cudaStream_t s) {
  const int64_t warps = a.total_q * a.q_heads;
  const unsigned blocks = static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (vec)
    attention_paged_kernel<T, D, true><<<blocks, kWarpsPerBlock * 32, 0, s>>>(a);
  else
    attention_paged_kernel<T, D, false><<<blocks, kWarpsPerBlock * 32, 0, s>>>(a);
}

}  // namespace

bool attention_supports_head_dim(int64_t head_dim) { return head_dim >= 1 && head_dim <= 256; }

void attention(const Tensor& q, const Tensor& cu_seqlens_q, const ops::PagedKV& kv, bool causal,
               float softmax_scale, const Tensor& out, const Tensor& lse, Stream stream) {
  const int q_heads = static_cast<int>(q.shape[1]), kv_heads = static_cast<int>(kv.k_pages.shape[2]);
  AttnArgs a{q.data, kv.k_pages.data, kv.v_pages.data,
             kv.page_table.ptr<int32_t>(), kv.kv_lens.ptr<int32_t>(), cu_seqlens_q.ptr<int32_t>(),
             out.data, lse.ndim != 0 ? lse.ptr<float>() : nullptr,
             q.strides[0], q.strides[1], out.strides[0], out.strides[1],
             q.shape[0], static_cast<int>(q.shape[2]), q_heads, kv_heads, q_heads / kv_heads,
             static_cast<int>(kv.page_table.shape[0]), static_cast<int>(kv.page_table.shape[1]),
             static_cast<int>(kv.k_pages.shape[1]), softmax_scale, causal};
  const int64_t head_dim = q.shape[2];
  const int64_t padded = head_dim <= 32 ? 32 : head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256;
  // With head_dim a multiple of 32 (64, 128, 256: >= 128 bytes) every K/V row, and so every
  // lane's slice, is aligned to its size when the pools are.
  const bool vec = head_dim == padded && padded >= 64 && aligned16(a.k_pages) && aligned16(a.v_pages);
  auto s = static_cast<cudaStream_t>(stream.handle);
  dispatch_float_type(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (padded) {
      case 32: launch<T, 32>(a, vec, s); break;
      case 64: launch<T, 64>(a, vec, s); break;
      case 128: launch<T, 128>(a, vec, s); break;
      default: launch<T, 256>(a, vec, s); break;
    }
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
