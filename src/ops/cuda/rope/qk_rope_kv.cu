// qk_norm_rope_kv_append: per-head q/k RMSNorm, RoPE and the KV-cache append in one kernel.
// Grid: (token, group of kWarps heads); each warp takes one q head, or one k head together with
// the v head of the same index. The warp stages its head in shared memory as fp32 (the values
// stay exactly representable in T: each step rounds to T, as the separate ops do when they write
// their outputs), normalises it, rotates it, and writes it back to q/k and, for k, to the cache.
//
// Bit-identity with rms_norm + rope_apply + kv_append: see qk_rope_head.cuh, whose per-head steps
// this kernel runs.
#include <algorithm>

#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pdl.cuh"
#include "ops/cuda/rope/qk_rope_head.cuh"

namespace braid::cuda {

namespace {

constexpr int kWarps = 4;  // heads per block

using qk_rope::Head;
using qk_rope::NormLayout;

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
__global__ void qk_rope_kv_kernel(FusedArgs a, ops::RopeTable table) {
  __shared__ float cos_s[ops::kMaxRotaryHalf], sin_s[ops::kMaxRotaryHalf];
  extern __shared__ float heads_s[];  // kWarps * head_dim
  pdl::wait_then_release();
  const int64_t tok = blockIdx.x;
  const int64_t pos = a.positions_i64 ? static_cast<const int64_t*>(a.positions)[tok]
                                      : static_cast<const int32_t*>(a.positions)[tok];
  qk_rope::cos_sin(table, static_cast<float>(pos), cos_s, sin_s);
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

  const void* norm = a.q_norm ? (is_q ? a.q_norm : a.k_norm) : nullptr;
  qk_rope::load_norm_rotate<T>(buf, src, d, hd.vec, static_cast<const T*>(norm), a.eps,
                               is_q ? a.q_layout : a.k_layout, table, cos_s, sin_s);
  qk_rope::store_head<T>(src, buf, d, hd.vec);
  if (is_q) return;

  // kv_append's layout: [slot, kv_heads, head_dim] within the contiguous pages.
  const int64_t dst = (static_cast<int64_t>(a.slots[tok]) * a.kv_heads + kh) * d;
  qk_rope::store_head<T>(static_cast<T*>(a.k_pages) + dst, buf, d, a.cache_vec);
  const T* v = static_cast<const T*>(a.v.data) + tok * a.v.token_stride + kh * a.v.head_stride;
  qk_rope::copy_head<T>(static_cast<T*>(a.v_pages) + dst, v, d, a.cache_vec && a.v.vec);
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
  FusedArgs a{qk_rope::head_of(q),
              qk_rope::head_of(k),
              qk_rope::head_of(v),
              norm ? q_norm.data : nullptr,
              norm ? k_norm.data : nullptr,
              norm ? qk_rope::norm_layout(q, q_norm) : NormLayout{1, 32},
              norm ? qk_rope::norm_layout(k, k_norm) : NormLayout{1, 32},
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
