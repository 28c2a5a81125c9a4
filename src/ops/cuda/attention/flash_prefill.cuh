// FlashAttention forward on tensor cores (mma.sync m16n8k16, fp32 accumulation), the FlashAttention-2
// schedule: a block owns kBlockM = 128 query rows of one (sequence, query head), 16 per warp,
// and walks the visible keys kBlockN = 64 at a time:
//   S = Q K^T          (Q's fragments stay in registers; K from shared memory by ldmatrix)
//   online softmax     (running max m and sum l per row, in log2 units: exp2 of pre-scaled S)
//   O += P V           (P re-used from S's accumulators as the A operand, no shared memory;
//                       V by ldmatrix.trans)
// K and V tiles are double-buffered in shared memory with cp.async: the next tile's copies are in
// flight while this one is multiplied. Tiles are stored with 16-byte chunks XOR-swizzled by row
// (chunk ^ row % 8), so the 8 row addresses of every ldmatrix land in 8 different bank groups.
//
// Shapes and masks: any q_len and kv_len (rows past the end are zero-filled on load and never
// stored; keys past kv_len masked), causal with the diagonal aligned to the end (query i sees keys
// up to kv_len - q_len + i). Only tiles that straddle the diagonal or the end of the keys pay for
// masking; a causal block stops at its last visible tile. Heavier (later) causal query tiles are
// launched first so the long blocks do not all start in the last wave.
//
// K/V come either from contiguous [rows, kv_heads, D] tensors (per-sequence row offsets in
// cu_seqlens_kv) or from a paged cache (page table, kv_lens): KvSource::row() hides which.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/attention/flash_prefill.h"
#include "ops/cuda/common.cuh"

namespace braid::cuda::flash {

// Where key/value row `pos` (0-based within the sequence) of KV head kvh lives.
template <bool kPaged>
struct KvSource {
  const char* base;  // k or v
  int64_t row_stride_bytes;
  int64_t head_offset_bytes;
  int64_t seq_row0;         // contiguous: the sequence's first row
  const int32_t* table;     // paged: the sequence's page table row
  int page_size;

  __device__ __forceinline__ const char* row(int pos) const {
    int64_t r;
    if constexpr (kPaged) {
      r = int64_t{table[pos / page_size]} * page_size + pos % page_size;
    } else {
      r = seq_row0 + pos;
    }
    return base + r * row_stride_bytes + head_offset_bytes;
  }
};

// The work of one block, for either kernel: the (sequence, head, query tile) it owns, the keys it
// sees and where its query, key and value rows live. The grid is (query tiles, heads, sequences)
// with query tiles fastest, so the blocks resident together share a head's K/V in L2 (heads
// outermost had 264 resident blocks reading 264 heads' K/V: 79% of DRAM bandwidth on the H100);
// within a head the later (heavier, under causal masking) tiles start first.
template <typename T, int D, bool kPaged>
struct BlockWork {
  int head, q_start, q_len, m0, kv_len, diag, n_tiles;
  const char* q_base;  // row 0 of the sequence's queries, at this head
  int64_t q_row_bytes;
  KvSource<kPaged> k, v;

  // The block's own work item: query tile blockIdx.x counted from the end, head blockIdx.y,
  // sequence blockIdx.z. False when the tile starts past the sequence's queries (nothing to do).
  __device__ __forceinline__ bool init(const Params& p, int block_m, int tile_n) {
    return init(p, block_m, tile_n, blockIdx.x, gridDim.x, blockIdx.y, blockIdx.z);
  }
  // Work item (query tile m_tiles - 1 - tile_from_end, head, seq).
  __device__ __forceinline__ bool init(const Params& p, int block_m, int tile_n, int tile_from_end,
                                       int m_tiles, int head_, int seq) {
    head = head_;
    m0 = (m_tiles - 1 - tile_from_end) * block_m;
    q_start = p.cu_seqlens_q[seq];
    q_len = p.cu_seqlens_q[seq + 1] - q_start;
    if (m0 >= q_len) return false;
    kv_len = kPaged ? p.kv_lens[seq] : p.cu_seqlens_kv[seq + 1] - p.cu_seqlens_kv[seq];
    diag = kv_len - q_len;  // query i sees keys <= i + diag when causal
    // Keys this block can see: all of them, or (causal) up to its last row's diagonal.
    const int n_end = p.causal ? min(kv_len, m0 + block_m + diag) : kv_len;
    n_tiles = (n_end + tile_n - 1) / tile_n;
    q_row_bytes = p.q_row_stride * int64_t{sizeof(T)};
    q_base = static_cast<const char*>(p.q) + int64_t{q_start} * q_row_bytes +
             int64_t{head} * D * int64_t{sizeof(T)};
    const int kvh = head / (p.q_heads / p.kv_heads);
    k = {static_cast<const char*>(p.k), p.k_row_stride * int64_t{sizeof(T)},
         int64_t{kvh} * D * int64_t{sizeof(T)}, kPaged ? 0 : p.cu_seqlens_kv[seq],
         kPaged ? p.page_table + int64_t{seq} * p.max_pages : nullptr, p.page_size};
    v = k;
    v.base = static_cast<const char*>(p.v);
    v.row_stride_bytes = p.v_row_stride * int64_t{sizeof(T)};
    return true;
  }
  // Query row r of the tile.
  __device__ __forceinline__ const char* q_row(int r) const {
    return q_base + int64_t{m0 + r} * q_row_bytes;
  }
};

// 16 bytes global -> shared, asynchronously; zeros when !valid (nothing is read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a * b, m16n8k16, fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 2^x with the SFU's approximation (about 2 ulp; 2^-inf = 0), one instruction.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A [kRows][D] tile of T in shared memory, 16-byte chunks swizzled by row.
template <int D, int kRows = kBlockN>
struct Tile {
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kBytes = kRows * D * 2;
  __device__ static __forceinline__ uint32_t offset(int row, int chunk) {
    return static_cast<uint32_t>((row * kChunks + (chunk ^ (row & 7))) * 16);
  }
};

// Copies rows [0, kRows) of a tile (row r from src(r), valid while r < rows) into shared memory,
// with the block's kThreadCount threads; 16-byte chunk c of row r goes to smem + offset(r, c)
// (the tile's layout: Tile<D>'s here, wgmma's 128-byte swizzle in the Hopper kernel).
template <int D, int kRows, int kThreadCount, typename RowPtr, typename Offset>
__device__ __forceinline__ void load_tile(uint32_t smem, int rows, RowPtr src, Offset offset) {
  constexpr int kChunks = D / 8;
  constexpr int kRowsPerPass = kThreadCount / kChunks;
  const int chunk = threadIdx.x % kChunks;
#pragma unroll
  for (int r = threadIdx.x / kChunks; r < kRows; r += kRowsPerPass) {
    const bool valid = r < rows;  // rows >= 1: row 0 is a valid address for the zero-fill
    cp_async16(smem + offset(r, chunk), src(valid ? r : 0) + chunk * 16, valid);
  }
}
template <int D, int kRows, int kThreadCount, typename RowPtr>
__device__ __forceinline__ void load_tile(uint32_t smem, int rows, RowPtr src) {
  load_tile<D, kRows, kThreadCount>(smem, rows, src, [](int r, int c) { return Tile<D>::offset(r, c); });
}

// The online softmax of one lane's two query rows, shared by both kernels. Their accumulators hold,
// for every 8-column group j of a tile, acc[j] = {row lo: columns 2t, 2t+1; row hi: the same}
// (lo = g, hi = g + 8 of the warp's 16 rows, t = lane % 4), so the 4 lanes of a quad share rows.
struct RowSoftmax {
  float m_lo = -INFINITY, m_hi = -INFINITY;  // running max of score * scale_log2
  float l_lo = 0.0f, l_hi = 0.0f;            // this lane's part of the running sums

  // -inf for key n0 + 8 j + 2 t + e past kv_len or, causal, past the row's diagonal.
  template <int kGroups>
  __device__ __forceinline__ static void mask(float (&s)[kGroups][4], int n0, int t, int row_lo,
                                              int row_hi, int kv_len, bool causal, int diag) {
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = n0 + j * 8 + 2 * t + (e & 1);
        const int row = e < 2 ? row_lo : row_hi;
        if (key >= kv_len || (causal && key > row + diag)) s[j][e] = -INFINITY;
      }
    }
  }

  // Raw scores -> probabilities against the new running max (in log2 units: the scale is > 0, so
  // the raw scores' max scales to it); updates m and l and returns in alpha_lo, alpha_hi the factor
  // the rows' output accumulators must be rescaled by (rescale(); the warp-specialised kernel does
  // it later, once the previous tile's P V has landed in them).
  template <int kGroups>
  __device__ __forceinline__ void probabilities(float (&s)[kGroups][4], float scale_log2,
                                                float& alpha_lo, float& alpha_hi) {
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
      mx_lo = fmaxf(mx_lo, fmaxf(s[j][0], s[j][1]));
      mx_hi = fmaxf(mx_hi, fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    mx_lo = fmaxf(m_lo, mx_lo * scale_log2);
    mx_hi = fmaxf(m_hi, mx_hi * scale_log2);
    // A row with nothing visible yet keeps max -inf: subtract 0 instead (its p are all 0).
    const float base_lo = mx_lo == -INFINITY ? 0.0f : mx_lo;
    const float base_hi = mx_hi == -INFINITY ? 0.0f : mx_hi;
    alpha_lo = fast_exp2(m_lo - base_lo);
    alpha_hi = fast_exp2(m_hi - base_hi);
    m_lo = mx_lo;
    m_hi = mx_hi;
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
      s[j][0] = fast_exp2(fmaf(s[j][0], scale_log2, -base_lo));
      s[j][1] = fast_exp2(fmaf(s[j][1], scale_log2, -base_lo));
      s[j][2] = fast_exp2(fmaf(s[j][2], scale_log2, -base_hi));
      s[j][3] = fast_exp2(fmaf(s[j][3], scale_log2, -base_hi));
      sum_lo += s[j][0] + s[j][1];
      sum_hi += s[j][2] + s[j][3];
    }
    l_lo = l_lo * alpha_lo + sum_lo;  // reduced over the quad once, in finish()
    l_hi = l_hi * alpha_hi + sum_hi;
  }

  template <int kOGroups>
  __device__ __forceinline__ static void rescale(float (&o)[kOGroups][4], float alpha_lo,
                                                 float alpha_hi) {
#pragma unroll
    for (int d = 0; d < kOGroups; ++d) {
      o[d][0] *= alpha_lo;
      o[d][1] *= alpha_lo;
      o[d][2] *= alpha_hi;
      o[d][3] *= alpha_hi;
    }
  }

  // probabilities() with the output accumulators rescaled at once.
  template <int kGroups, int kOGroups>
  __device__ __forceinline__ void update(float (&s)[kGroups][4], float (&o)[kOGroups][4],
                                         float scale_log2) {
    float alpha_lo, alpha_hi;
    probabilities(s, scale_log2, alpha_lo, alpha_hi);
    rescale(o, alpha_lo, alpha_hi);
  }

  // The rows' full sums, their log-sum-exp (natural log) written by lane t = 0 where requested and
  // inside the sequence; returns 1 / l per row in inv_lo, inv_hi (0 for a row with no keys).
  __device__ __forceinline__ void finish(float* lse, int64_t lse_row0, int q_heads, int head, int t,
                                         int row_lo, int row_hi, int q_len, float& inv_lo,
                                         float& inv_hi) {
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
      l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
    }
    inv_lo = l_lo > 0.0f ? 1.0f / l_lo : 0.0f;
    inv_hi = l_hi > 0.0f ? 1.0f / l_hi : 0.0f;
    if (!lse || t != 0) return;
    constexpr float kLn2 = 0.6931471805599453f;
    if (row_lo < q_len)
      lse[(lse_row0 + row_lo) * q_heads + head] = l_lo > 0.0f ? m_lo * kLn2 + logf(l_lo) : -INFINITY;
    if (row_hi < q_len)
      lse[(lse_row0 + row_hi) * q_heads + head] = l_hi > 0.0f ? m_hi * kLn2 + logf(l_hi) : -INFINITY;
  }
};

// 8 warps (128 query rows sharing each K/V tile): 1.1-1.4x faster than 4 on the H100
// (docs/perf/attention.md).
constexpr int kWarps = 8;

template <typename T, int D, bool kPaged>
__global__ void __launch_bounds__(kWarps * 32) flash_prefill_kernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kThreads = kWarps * 32;
  constexpr int kBlockM = 16 * kWarps;  // query rows per block
  constexpr int kDTiles = D / 8;    // n-tiles of O (8 columns each)
  constexpr int kDSteps = D / 16;   // k-steps of S = Q K^T
  constexpr int kNTiles = kBlockN / 8;

  BlockWork<T, D, kPaged> w;
  if (!w.init(p, kBlockM, kBlockN)) return;
  const int head = w.head, q_start = w.q_start, q_len = w.q_len, m0 = w.m0;
  const int kv_len = w.kv_len, diag = w.diag, n_tiles = w.n_tiles;

  const uint32_t sQ = smem_addr(smem);
  const uint32_t sK = sQ + Tile<D, kBlockM>::kBytes;   // two buffers
  const uint32_t sV = sK + 2 * Tile<D>::kBytes;        // two buffers

  auto load_kv = [&](int tile, int buf) {
    const int n0 = tile * kBlockN, rows = min(kBlockN, kv_len - n0);
    load_tile<D, kBlockN, kThreads>(sK + buf * Tile<D>::kBytes, rows, [&](int r) { return w.k.row(n0 + r); });
    load_tile<D, kBlockN, kThreads>(sV + buf * Tile<D>::kBytes, rows, [&](int r) { return w.v.row(n0 + r); });
  };

  load_tile<D, kBlockM, kThreads>(sQ, min(kBlockM, q_len - m0), [&](int r) { return w.q_row(r); });
  if (n_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int row_lo = m0 + warp * 16 + g;  // this lane's two query rows (within the sequence)
  const int row_hi = row_lo + 8;

  float o[kDTiles][4] = {};
  RowSoftmax rows;
  uint32_t qf[kDSteps][4];

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int buf = tile & 1;
    if (tile + 1 < n_tiles) load_kv(tile + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();  // everything but the tile just requested
    __syncthreads();

    if (tile == 0) {  // Q's fragments: rows warp * 16 + (lane % 16), chunk 2 * ks + lane / 16
#pragma unroll
      for (int ks = 0; ks < kDSteps; ++ks)
        ldmatrix_x4(qf[ks], sQ + Tile<D>::offset(warp * 16 + lane % 16, 2 * ks + lane / 16));
    }

    // S = Q K^T for 64 keys: n-tile pairs (16 keys) per ldmatrix.x4.
    float s[kNTiles][4] = {};
    const uint32_t k_buf = sK + buf * Tile<D>::kBytes;
#pragma unroll
    for (int ks = 0; ks < kDSteps; ++ks) {
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, k_buf + Tile<D>::offset(np * 16 + lane % 8 + (lane / 16) * 8,
                                               2 * ks + (lane / 8) % 2));
        mma<T>(s[2 * np], qf[ks], b[0], b[1]);
        mma<T>(s[2 * np + 1], qf[ks], b[2], b[3]);
      }
    }

    // Masks only on tiles past the first row's diagonal or the last key.
    const int n0 = tile * kBlockN;
    if (n0 + kBlockN > kv_len || (p.causal && n0 + kBlockN - 1 > m0 + diag))
      RowSoftmax::mask(s, n0, t, row_lo, row_hi, kv_len, p.causal, diag);
    rows.update(s, o, p.scale_log2);

    // O += P V: P's accumulators of key n-tiles 2kk, 2kk+1 are the A operand of k-step kk.
    const uint32_t v_buf = sV + buf * Tile<D>::kBytes;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                             pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_buf + Tile<D>::offset(kk * 16 + lane % 8 + ((lane / 8) % 2) * 8,
                                                     2 * dp + lane / 16));
        mma<T>(o[2 * dp], a, b[0], b[1]);
        mma<T>(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // this buffer is refilled two tiles from now
  }
  cp_async_wait<0>();
  __syncthreads();  // with no key tiles, Q's copies (by every thread) end here

  float inv_lo, inv_hi;
  rows.finish(p.lse, q_start, p.q_heads, head, t, row_lo, row_hi, q_len, inv_lo, inv_hi);

  // Stage O through Q's tile (each warp owns its 16 rows there), then 16-byte row stores.
#pragma unroll
  for (int d = 0; d < kDTiles; ++d) {
    const int chunk = d, col = 2 * t;  // n-tile d is chunk d; lane t holds columns 2t, 2t+1
    const uint32_t lo = pack2<T>(o[d][0] * inv_lo, o[d][1] * inv_lo);
    const uint32_t hi = pack2<T>(o[d][2] * inv_hi, o[d][3] * inv_hi);
    const int r = warp * 16 + g;
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sQ + Tile<D>::offset(r, chunk) + col * 2), "r"(lo));
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sQ + Tile<D>::offset(r + 8, chunk) + col * 2), "r"(hi));
  }
  __syncwarp();
  char* o_base = static_cast<char*>(p.out) +
                 (int64_t{q_start} * p.o_row_stride + int64_t{head} * D) * sizeof(T);
  constexpr int kChunks = D / 8;
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = warp * 16 + i / kChunks, chunk = i % kChunks;
    if (m0 + r >= q_len) continue;
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(sQ + Tile<D>::offset(r, chunk)));
    *reinterpret_cast<uint4*>(o_base + (int64_t{m0 + r} * p.o_row_stride + chunk * 8) * sizeof(T)) = v;
  }
}

// Dynamic shared memory of one block: Q, two K and two V tiles.
template <int D>
constexpr int smem_bytes() {
  return Tile<D, 16 * kWarps>::kBytes + 4 * Tile<D>::kBytes;
}

}  // namespace braid::cuda::flash
