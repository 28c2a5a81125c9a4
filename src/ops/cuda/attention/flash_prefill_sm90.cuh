// FlashAttention forward on Hopper's warpgroup MMA (wgmma), the same schedule as the mma.sync kernel
// in flash_prefill.cuh with the products moved to the instructions Hopper runs at full rate:
//   a block = 2 warpgroups x 64 query rows; key tiles of 128 (64 at head_dim 64);
//   S = Q K^T      wgmma m64nNk16, A (Q) and B (K) read from shared memory through descriptors;
//   softmax        in registers: wgmma's accumulator layout gives each warp 16 rows, a lane rows g
//                  and g + 8, exactly as mma.sync's does, so the online softmax is unchanged;
//   O += P V       wgmma m64nDk16 with A = P from registers (S's accumulators re-packed) and
//                  B = V from shared memory, transposed by the instruction (V's rows are keys).
// Tiles live in shared memory in wgmma's 128-byte-swizzle layout: 64 columns (128 bytes) per row
// and region, rows contiguous, 16-byte chunks XOR-ed with row % 8, a D = 128 tile being two such
// regions side by side. cp.async fills them (double-buffered K/V, as the mma.sync kernel), and a
// proxy fence makes those generic-proxy writes visible to wgmma's async-proxy reads.
// The warp-specialised TMA kernel (flash_prefill_ws.cuh) is faster (1.6x at head_dim 128) and
// takes contiguous K/V; this one serves the paged KV cache and tensors TMA cannot address.
#pragma once

#include "ops/cuda/attention/flash_prefill.cuh"
#include "ops/cuda/wgmma.cuh"

namespace braid::cuda::flash::sm90 {

// Two warpgroups of 64 query rows per block; key tiles of kTileN = 128 at D = 128 and 64 at D = 64
// (at D = 64 the narrow tile ran 13-15% faster, at D = 128 4-9% slower; blocks of one warpgroup
// were 1.5-2x slower; docs/perf/attention.md).
constexpr int kWG = 2;

template <int D>
constexpr int tile_n() {
  return D == 64 ? 64 : 128;
}

// Byte offset of 16-byte chunk c8 (columns 8 c8 .. 8 c8 + 7) of row r in a [rows][D] tile.
template <int kRows>
__device__ __forceinline__ uint32_t sw128(int r, int c8) {
  return static_cast<uint32_t>((c8 / 8) * kRows * 128 + r * 128 + (((c8 % 8) ^ (r & 7)) * 16));
}

template <int D, int kRows, int kThreads, typename RowPtr>
__device__ __forceinline__ void load_tile_sw(uint32_t smem, int rows, RowPtr src) {
  load_tile<D, kRows, kThreads>(smem, rows, src, [](int r, int c) { return sw128<kRows>(r, c); });
}

template <typename T, int N>
__device__ __forceinline__ void mma_qk(float (&s)[N / 2], uint64_t da, uint64_t db, int acc) {
  if constexpr (N == 128) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
      wgmma_ss_m64n128k16_bf16(s, da, db, acc);
    else
      wgmma_ss_m64n128k16_f16(s, da, db, acc);
  } else {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
      wgmma_ss_m64n64k16_bf16(s, da, db, acc);
    else
      wgmma_ss_m64n64k16_f16(s, da, db, acc);
  }
}

template <typename T, int D>
__device__ __forceinline__ void mma_pv(float (&o)[D / 2], const uint32_t (&a)[4], uint64_t db) {
  if constexpr (D == 128) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
      wgmma_rs_m64n128k16_bf16(o, a, db, 1);
    else
      wgmma_rs_m64n128k16_f16(o, a, db, 1);
  } else {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
      wgmma_rs_m64n64k16_bf16(o, a, db, 1);
    else
      wgmma_rs_m64n64k16_f16(o, a, db, 1);
  }
}

// The epilogue of both Hopper kernels, per warp: its 16 rows of O (wgmma's accumulator layout,
// scaled by 1 / l per row) staged in the swizzled [kBlockM][D] tile at `stage` (rows warp_row0 ..
// warp_row0 + 15, which no other warp touches), then stored as 16-byte row pieces to out; rows at
// or past q_len are not stored.
template <typename T, int D, int kBlockM>
__device__ __forceinline__ void store_warp_rows(const Params& p, const float (&o)[D / 8][4],
                                                float inv_lo, float inv_hi, uint32_t stage,
                                                int warp_row0, int q_start, int head, int m0,
                                                int q_len) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int d = 0; d < D / 8; ++d) {
    const uint32_t lo = pack2<T>(o[d][0] * inv_lo, o[d][1] * inv_lo);
    const uint32_t hi = pack2<T>(o[d][2] * inv_hi, o[d][3] * inv_hi);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(stage + sw128<kBlockM>(warp_row0 + g, d) + 4 * t), "r"(lo));
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(stage + sw128<kBlockM>(warp_row0 + g + 8, d) + 4 * t), "r"(hi));
  }
  __syncwarp();
  char* o_base = static_cast<char*>(p.out) +
                 (int64_t{q_start} * p.o_row_stride + int64_t{head} * D) * sizeof(T);
  constexpr int kChunks = D / 8;
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = warp_row0 + i / kChunks, chunk = i % kChunks;
    if (m0 + r >= q_len) continue;
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(stage + sw128<kBlockM>(r, chunk)));
    *reinterpret_cast<uint4*>(o_base + (int64_t{m0 + r} * p.o_row_stride + chunk * 8) * sizeof(T)) = v;
  }
  __syncwarp();  // the staging rows may be rewritten next
}

template <int D>
constexpr int smem_bytes() {
  // Q, two K and two V tiles, + alignment slack: tiles start 1024-aligned.
  return (64 * kWG + 4 * tile_n<D>()) * D * 2 + 1024;
}

template <typename T, int D, bool kPaged>
__global__ void __launch_bounds__(128 * kWG) flash_prefill_sm90_kernel(Params p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma needs sm_90a code; the launcher picks this kernel only on compute capability 9.0
#else
  extern __shared__ unsigned char smem_raw[];
  constexpr int kBlockM = 64 * kWG, kThreads = 128 * kWG, kTileN = tile_n<D>();
  constexpr int kNTiles = kTileN / 8;  // 8-key groups of S per row
  constexpr int kDTiles = D / 8;
  constexpr int kQBytes = kBlockM * D * 2, kKvBytes = kTileN * D * 2;

  BlockWork<T, D, kPaged> w;
  if (!w.init(p, kBlockM, kTileN)) return;
  const int head = w.head, q_start = w.q_start, q_len = w.q_len, m0 = w.m0;
  const int kv_len = w.kv_len, diag = w.diag, n_tiles = w.n_tiles;

  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base, sK = sQ + kQBytes, sV = sK + 2 * kKvBytes;

  auto load_kv = [&](int tile, int buf) {
    const int n0 = tile * kTileN, rows = min(kTileN, kv_len - n0);
    load_tile_sw<D, kTileN, kThreads>(sK + buf * kKvBytes, rows, [&](int r) { return w.k.row(n0 + r); });
    load_tile_sw<D, kTileN, kThreads>(sV + buf * kKvBytes, rows, [&](int r) { return w.v.row(n0 + r); });
  };

  load_tile_sw<D, kBlockM, kThreads>(sQ, min(kBlockM, q_len - m0), [&](int r) { return w.q_row(r); });
  if (n_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  const int wg = threadIdx.x / 128, warp_in_wg = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int row_lo = m0 + wg * 64 + warp_in_wg * 16 + g, row_hi = row_lo + 8;

  // Accumulators as 8-column groups (RowSoftmax's layout); the wgmma wrappers take them flat.
  float o[kDTiles][4] = {};
  auto& o_flat = reinterpret_cast<float(&)[D / 2]>(o);
  RowSoftmax rows;
  // This warpgroup's 64 rows of Q: region stride kBlockM * 128 bytes, rows 64 wg onwards.
  const uint32_t q_wg = sQ + wg * 64 * 128;

  // S = Q K^T for the tile in k_buf: k-steps of 16 columns, 4 per 128-byte region.
  auto issue_qk = [&](float (&s)[kNTiles][4], uint32_t k_buf) {
    wgmma_fence();
#pragma unroll
    for (int kstep = 0; kstep < D / 16; ++kstep) {
      const uint32_t col = (kstep / 4), within = (kstep % 4) * 32;
      const uint64_t da = descriptor(q_wg + col * kBlockM * 128 + within, 16, 1024);
      const uint64_t db = descriptor(k_buf + col * kTileN * 128 + within, 16, 1024);
      mma_qk<T, kTileN>(reinterpret_cast<float(&)[kTileN / 2]>(s), da, db, kstep > 0);
    }
    wgmma_commit();
  };
  // Masks (only on tiles past the first row's diagonal or the last key) and the softmax update.
  auto softmax = [&](float (&s)[kNTiles][4], int tile) {
    const int n0 = tile * kTileN;
    if (n0 + kTileN > kv_len || (p.causal && n0 + kTileN - 1 > m0 + diag))
      RowSoftmax::mask(s, n0, t, row_lo, row_hi, kv_len, p.causal, diag);
    rows.update(s, o, p.scale_log2);
  };
  // O += P V for the tile in v_buf: k-steps of 16 keys; V's 16 rows start 2048 bytes apart, its
  // two 64-column regions kTileN * 128 bytes apart (the leading byte offset of a transposed B).
  // P is packed whole before the first product: registers written between two wgmmas make the
  // compiler serialise them.
  auto issue_pv = [&](const float (&s)[kNTiles][4], uint32_t v_buf) {
    uint32_t pa[kTileN / 16][4];
#pragma unroll
    for (int kk = 0; kk < kTileN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pa[kk][r] = pack2<T>(s[2 * kk + r / 2][2 * (r % 2)], s[2 * kk + r / 2][2 * (r % 2) + 1]);
    fence_registers(o_flat);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kTileN / 16; ++kk)
      mma_pv<T, D>(o_flat, pa[kk], descriptor(v_buf + kk * 16 * 128, kTileN * 128, 1024));
    wgmma_commit();
  };

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int buf = tile & 1;
    if (tile + 1 < n_tiles) load_kv(tile + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    fence_proxy_async();  // the cp.async writes, seen by wgmma's reads
    __syncthreads();
    float s[kNTiles][4];
    issue_qk(s, sK + buf * kKvBytes);
    wgmma_wait_all();
    fence_registers(reinterpret_cast<float(&)[kTileN / 2]>(s));
    softmax(s, tile);
    issue_pv(s, sV + buf * kKvBytes);
    wgmma_wait_all();
    fence_registers(o_flat);
    __syncthreads();  // this buffer is refilled two tiles from now
  }
  cp_async_wait<0>();
  __syncthreads();

  float inv_lo, inv_hi;
  rows.finish(p.lse, q_start, p.q_heads, head, t, row_lo, row_hi, q_len, inv_lo, inv_hi);

  // O staged through Q's tile (rows of this warp only), then stored.
  store_warp_rows<T, D, kBlockM>(p, o, inv_lo, inv_hi, sQ, wg * 64 + warp_in_wg * 16, q_start, head,
                                 m0, q_len);
#endif
}

}  // namespace braid::cuda::flash::sm90
