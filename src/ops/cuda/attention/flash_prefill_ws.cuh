// FlashAttention forward on Hopper, warp-specialised (the FlashAttention-3 schedule), for K/V in
// contiguous tensors:
//   warpgroup 0    producer: one thread issues TMA copies of Q and of each K and V tile into a ring
//                  of kStages buffers; "full" mbarriers tell the consumers a tile has landed, "empty"
//                  mbarriers tell the producer a buffer may be refilled. It keeps 24 registers.
//   warpgroups 1-2 consumers, 64 query rows each (240 registers each): per key tile,
//                    S_j = Q K_j^T   (wgmma, both operands in shared memory)
//                    O += P_{j-1} V_{j-1}   issued right behind it, so the tensor cores have the
//                                    previous tile's second product to run while the softmax of
//                                    S_j runs (intra-warpgroup overlap);
//                  and the two consumers take turns issuing their products (ping-pong: named
//                  barriers 1 and 2), so one's exponentials overlap the other's products.
// No block-wide barrier after the start. Shapes, masks and the online softmax are those of the
// other two kernels (flash_prefill.cuh, flash_prefill_sm90.cuh; shared layouts and wgmma wrappers
// from the latter).
//
// TMA reads whole boxes: a sequence's last query or key tile can take rows of the next sequence
// (or zeros past the tensor's end). Query rows past q_len are never stored, keys past kv_len are
// masked to -inf before the softmax, and the value rows past kv_len are zeroed in shared memory
// before the last P V (p = 0 times a non-finite value would still be NaN).
#pragma once

#include <cuda.h>

#include "ops/cuda/attention/flash_prefill_sm90.cuh"
#include "ops/cuda/hopper.cuh"

namespace braid::cuda::flash::ws {

constexpr int kConsumers = 2;                       // consumer warpgroups
constexpr int kThreads = 128 * (kConsumers + 1);    // + the producer warpgroup
constexpr int kBlockM = 64 * kConsumers;            // query rows per block
constexpr int kProducerRegs = 24, kConsumerRegs = 240;

template <int D>
constexpr int tile_n() {
  return 128;
}
// K/V buffers in the ring: as many as fit beside Q in 227 KB.
template <int D>
constexpr int stages() {
  return D == 64 ? 4 : 2;
}

template <int D>
constexpr int smem_bytes() {
  return (kBlockM + 2 * stages<D>() * tile_n<D>()) * D * 2 + 1024;  // + 1024-byte alignment slack
}

// The kernel's parameters: the common ones and TMA maps over q, k and v, each (D columns, heads,
// rows) with boxes of 64 columns x 1 head x (kBlockM query rows | tile_n key rows).
struct TmaParams {
  Params p;
  CUtensorMap q, k, v;
};

template <int kStages>
struct Barriers {
  uint64_t q_full;
  uint64_t k_full[kStages], v_full[kStages];    // the producer's arrival + the TMA bytes
  uint64_t k_empty[kStages], v_empty[kStages];  // one arrival per consumer warp
};

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1) flash_prefill_ws_kernel(const __grid_constant__ TmaParams tp) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma, TMA and setmaxnreg need sm_90a code
#else
  using namespace sm90;
  constexpr int kTileN = tile_n<D>(), kStages = stages<D>();
  constexpr int kNTiles = kTileN / 8, kDTiles = D / 8, kRegions = D / 64;
  constexpr uint32_t kQBytes = kBlockM * D * 2, kKvBytes = kTileN * D * 2;
  constexpr int kConsumerWarps = 4 * kConsumers;
  const Params& p = tp.p;

  extern __shared__ unsigned char smem_raw[];
  __shared__ Barriers<kStages> bars;

  BlockWork<T, D, false> w;
  if (!w.init(p, kBlockM, kTileN)) return;
  const int head = w.head, q_start = w.q_start, q_len = w.q_len, m0 = w.m0;
  const int kv_len = w.kv_len, diag = w.diag, n_tiles = w.n_tiles;

  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base, sK = sQ + kQBytes, sV = sK + kStages * kKvBytes;
  const uint32_t bar_q = smem_addr(&bars.q_full);
  auto k_full = [&](int tile) { return smem_addr(&bars.k_full[tile % kStages]); };
  auto v_full = [&](int tile) { return smem_addr(&bars.v_full[tile % kStages]); };
  auto k_empty = [&](int tile) { return smem_addr(&bars.k_empty[tile % kStages]); };
  auto v_empty = [&](int tile) { return smem_addr(&bars.v_empty[tile % kStages]); };
  auto k_buf = [&](int tile) { return sK + (tile % kStages) * kKvBytes; };
  auto v_buf = [&](int tile) { return sV + (tile % kStages) * kKvBytes; };
  // The phase a tile's buffer fills in: the ring's lap, mod 2.
  auto lap_parity = [&](int tile) { return static_cast<uint32_t>((tile / kStages) & 1); };

  if (threadIdx.x == 0) {
    hopper::mbar_init(bar_q, 1);
    for (int s = 0; s < kStages; ++s) {
      hopper::mbar_init(k_full(s), 1);
      hopper::mbar_init(v_full(s), 1);
      hopper::mbar_init(k_empty(s), kConsumerWarps);
      hopper::mbar_init(v_empty(s), kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to TMA
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {  // ---- producer ----
    hopper::set_max_registers_dec<kProducerRegs>();
    if (threadIdx.x != 0) return;
    const int kv_head = head / (p.q_heads / p.kv_heads);
    const int kv_row0 = static_cast<int>(w.k.seq_row0);
    hopper::mbar_arrive_expect_tx(bar_q, kQBytes);
    for (int r = 0; r < kRegions; ++r)
      hopper::tma_load_3d(sQ + r * kBlockM * 128, &tp.q, r * 64, head, q_start + m0, bar_q);
    for (int tile = 0; tile < n_tiles; ++tile) {
      const int row = kv_row0 + tile * kTileN;
      hopper::mbar_wait(k_empty(tile), lap_parity(tile) ^ 1);  // the lap before has been read
      hopper::mbar_arrive_expect_tx(k_full(tile), kKvBytes);
      for (int r = 0; r < kRegions; ++r)
        hopper::tma_load_3d(k_buf(tile) + r * kTileN * 128, &tp.k, r * 64, kv_head, row, k_full(tile));
      hopper::mbar_wait(v_empty(tile), lap_parity(tile) ^ 1);
      hopper::mbar_arrive_expect_tx(v_full(tile), kKvBytes);
      for (int r = 0; r < kRegions; ++r)
        hopper::tma_load_3d(v_buf(tile) + r * kTileN * 128, &tp.v, r * 64, kv_head, row, v_full(tile));
    }
    return;
  }

  // ---- consumers ----
  hopper::set_max_registers_inc<kConsumerRegs>();
  const int cw = wg - 1, warp_in_wg = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int row_lo = m0 + cw * 64 + warp_in_wg * 16 + g, row_hi = row_lo + 8;
  const uint32_t q_wg = sQ + cw * 64 * 128;  // this warpgroup's 64 rows of every Q region

  float o[kDTiles][4] = {};
  auto& o_flat = reinterpret_cast<float(&)[D / 2]>(o);
  float s[kNTiles][4];
  auto& s_flat = reinterpret_cast<float(&)[kTileN / 2]>(s);
  uint32_t pa[kTileN / 16][4];  // P of the previous tile, packed as wgmma's A operand
  RowSoftmax rows;

  auto issue_qk = [&](int tile) {
    wgmma_fence();
#pragma unroll
    for (int kstep = 0; kstep < D / 16; ++kstep) {
      const uint32_t col = kstep / 4, within = (kstep % 4) * 32;
      const uint64_t da = descriptor(q_wg + col * kBlockM * 128 + within, 16, 1024);
      const uint64_t db = descriptor(k_buf(tile) + col * kTileN * 128 + within, 16, 1024);
      mma_qk<T, kTileN>(s_flat, da, db, kstep > 0);
    }
    wgmma_commit();
  };
  auto issue_pv = [&](int tile) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kTileN / 16; ++kk)
      mma_pv<T, D>(o_flat, pa[kk], descriptor(v_buf(tile) + kk * 16 * 128, kTileN * 128, 1024));
    wgmma_commit();
  };
  // Masks (only on tiles past the first row's diagonal or the last key) and probabilities.
  auto softmax = [&](int tile, float& alpha_lo, float& alpha_hi) {
    const int n0 = tile * kTileN;
    if (n0 + kTileN > kv_len || (p.causal && n0 + kTileN - 1 > m0 + diag))
      RowSoftmax::mask(s, n0, t, row_lo, row_hi, kv_len, p.causal, diag);
    rows.probabilities(s, p.scale_log2, alpha_lo, alpha_hi);
  };
  // P as wgmma's A operand; only once the previous P V has finished reading pa (writing registers
  // an in-flight wgmma reads makes ptxas serialise the products).
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < kTileN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pa[kk][r] = pack2<T>(s[2 * kk + r / 2][2 * (r % 2)], s[2 * kk + r / 2][2 * (r % 2) + 1]);
  };
  auto release = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0) hopper::mbar_arrive(bar);
  };
  // Ping-pong: consumer cw issues its products between named_sync(1 + cw) and the arrival on the
  // other's barrier. Consumer 1 lets consumer 0 go first and skips its last hand-over (nobody waits
  // for it), so both barriers end balanced.
  auto turn_begin = [&] { hopper::named_sync(1 + cw, 256); };
  auto turn_end = [&](bool last) {
    if (!(last && cw == 1)) hopper::named_arrive(2 - cw, 256);
  };

  hopper::mbar_wait(bar_q, 0);
  if (n_tiles > 0) {
    if (cw == 1) hopper::named_arrive(1, 256);
    float alpha_lo, alpha_hi;
    hopper::mbar_wait(k_full(0), lap_parity(0));
    turn_begin();
    issue_qk(0);
    turn_end(false);
    wgmma_wait<0>();
    fence_registers(s_flat);
    release(k_empty(0));
    softmax(0, alpha_lo, alpha_hi);  // O is still zero: nothing to rescale
    pack_p();
    for (int tile = 1; tile < n_tiles; ++tile) {
      hopper::mbar_wait(k_full(tile), lap_parity(tile));
      hopper::mbar_wait(v_full(tile - 1), lap_parity(tile - 1));
      turn_begin();
      issue_qk(tile);
      issue_pv(tile - 1);
      turn_end(false);
      wgmma_wait<1>();  // S of this tile; the previous P V may still run
      fence_registers(s_flat);
      release(k_empty(tile));
      softmax(tile, alpha_lo, alpha_hi);
      wgmma_wait<0>();
      fence_registers(o_flat);
      release(v_empty(tile - 1));
      RowSoftmax::rescale(o, alpha_lo, alpha_hi);
      pack_p();
    }
    const int last = n_tiles - 1, valid = kv_len - last * kTileN;
    hopper::mbar_wait(v_full(last), lap_parity(last));
    if (valid < kTileN) {  // zero the value rows past kv_len (see the top of the file)
      const uint4 zero{0, 0, 0, 0};
      for (int i = threadIdx.x % 128; i < (kTileN - valid) * kRegions * 8; i += 128) {
        const int r = valid + i / (kRegions * 8), region = (i / 8) % kRegions, chunk = i % 8;
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(
                         v_buf(last) + region * kTileN * 128 + r * 128 + chunk * 16),
                     "r"(zero.x), "r"(zero.y), "r"(zero.z), "r"(zero.w)
                     : "memory");
      }
      fence_proxy_async();
      hopper::named_sync(3 + cw, 128);
    }
    turn_begin();
    issue_pv(last);
    turn_end(true);
    wgmma_wait<0>();
    fence_registers(o_flat);
    release(v_empty(last));
  }

  float inv_lo, inv_hi;
  rows.finish(p.lse, q_start, p.q_heads, head, t, row_lo, row_hi, q_len, inv_lo, inv_hi);

  // Stage O through this warp's 16 rows of Q's tile, then 16-byte row stores.
  const int r_lo = cw * 64 + warp_in_wg * 16 + g;
#pragma unroll
  for (int d = 0; d < kDTiles; ++d) {
    const uint32_t lo = pack2<T>(o[d][0] * inv_lo, o[d][1] * inv_lo);
    const uint32_t hi = pack2<T>(o[d][2] * inv_hi, o[d][3] * inv_hi);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sQ + sw128<kBlockM>(r_lo, d) + 4 * t), "r"(lo));
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sQ + sw128<kBlockM>(r_lo + 8, d) + 4 * t), "r"(hi));
  }
  __syncwarp();
  char* o_base = static_cast<char*>(p.out) +
                 (int64_t{q_start} * p.o_row_stride + int64_t{head} * D) * sizeof(T);
  constexpr int kChunks = D / 8;
  const int warp_row0 = cw * 64 + warp_in_wg * 16;
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = warp_row0 + i / kChunks, chunk = i % kChunks;
    if (m0 + r >= q_len) continue;
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(sQ + sw128<kBlockM>(r, chunk)));
    *reinterpret_cast<uint4*>(o_base + (int64_t{m0 + r} * p.o_row_stride + chunk * 8) * sizeof(T)) = v;
  }
#endif
}

}  // namespace braid::cuda::flash::ws
