// FlashAttention forward on Hopper, warp-specialised (the FlashAttention-3 schedule), for K/V in
// contiguous tensors. A persistent block (one per SM) walks work items (query tile, head,
// sequence):
//   warpgroup 0    producer: one thread issues TMA copies of each item's Q and of each K and V tile
//                  into a ring of kStages buffers; "full" mbarriers tell the consumers a tile has
//                  landed, "empty" mbarriers tell the producer a buffer (or Q) may be refilled, so
//                  the next item's loads start while this one finishes. It keeps 24-32 registers.
//   warpgroups 1.. consumers, 64 query rows each (2 at head_dim 128, 3 at 64; 240 or 160
//                  registers): per key tile,
//                    S_j = Q K_j^T   (wgmma, both operands in shared memory)
//                    O += P_{j-1} V_{j-1}   issued right behind it, so the tensor cores have the
//                                    previous tile's second product to run while the softmax of
//                                    S_j runs (intra-warpgroup overlap);
//                  and the consumers take turns issuing their products (named barriers, round
//                  robin), so one's exponentials overlap another's products. O is staged through
//                  its own shared tile for 16-byte row stores.
// No block-wide barrier after the start. Shapes, masks and the online softmax are those of the
// other two kernels (flash_prefill.cuh, flash_prefill_sm90.cuh; shared layouts and wgmma wrappers
// from the latter). docs/perf/attention.md has the measurements behind each choice.
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

// The block's shape per head_dim. At D = 64 the exponentials cost as much issue time as the
// products (64 x 128 scores per 64 x 128 x 64 product), so a third consumer warpgroup gives the
// tensor cores a third warpgroup's products to run while two exponentiate.
template <int D>
struct Shape {
  static constexpr int kConsumers = D == 64 ? 3 : 2;  // consumer warpgroups, 64 query rows each
  static constexpr int kThreads = 128 * (kConsumers + 1);  // + the producer warpgroup
  static constexpr int kBlockM = 64 * kConsumers;          // query rows per work item
  static constexpr int kTileN = 128;                       // keys per tile
  // Registers per thread after setmaxnreg: 65536 per SM shared by one block.
  static constexpr int kProducerRegs = kConsumers == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 240 : 160;
  // K/V buffers in the ring: as many as fit beside Q and O's staging in 227 KB.
  static constexpr int kStages = D == 64 ? 4 : 2;
  static constexpr int kSmemBytes = (2 * kBlockM + 2 * kStages * kTileN) * D * 2 + 1024;  // + alignment
};

// The kernel's parameters: the common ones, TMA maps over q, k and v, each (D columns, heads, rows)
// with boxes of 64 columns x 1 head x (kBlockM query rows | kTileN key rows), and the work items:
// (query tile, head, sequence) with query tiles fastest, counted from the last (heaviest under
// causal masking) of each head, so the blocks running at once share a head's K/V in L2.
struct TmaParams {
  Params p;
  CUtensorMap q, k, v;
  int m_tiles;  // query tiles per sequence (of the longest)
  int items;    // m_tiles * q_heads * sequences
};

template <int kStages>
struct Barriers {
  uint64_t q_full, q_empty;
  uint64_t k_full[kStages], v_full[kStages];    // the producer's arrival + the TMA bytes
  uint64_t k_empty[kStages], v_empty[kStages];  // one arrival per consumer warp
};

// The work item a persistent block takes in round r: rounds cover gridDim.x consecutive items,
// walked forwards in even rounds and backwards in odd ones, so a block that drew a heavy causal
// tile in one round tends to draw a light one in the next.
__device__ __forceinline__ int item_of_round(int round) {
  const int g = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  return round * g + ((round & 1) ? g - 1 - b : b);
}

template <typename T, int D>
__global__ void __launch_bounds__(Shape<D>::kThreads, 1)
    flash_prefill_ws_kernel(const __grid_constant__ TmaParams tp) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma, TMA and setmaxnreg need sm_90a code
#else
  using namespace sm90;
  using S = Shape<D>;
  constexpr int kConsumers = S::kConsumers, kBlockM = S::kBlockM, kTileN = S::kTileN;
  constexpr int kStages = S::kStages;
  constexpr int kNTiles = kTileN / 8, kDTiles = D / 8, kRegions = D / 64;
  constexpr uint32_t kQBytes = kBlockM * D * 2, kKvBytes = kTileN * D * 2;
  constexpr int kConsumerWarps = 4 * kConsumers;
  const Params& p = tp.p;

  extern __shared__ unsigned char smem_raw[];
  __shared__ Barriers<kStages> bars;

  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base, sO = sQ + kQBytes, sK = sO + kQBytes, sV = sK + kStages * kKvBytes;
  const uint32_t q_full = smem_addr(&bars.q_full), q_empty = smem_addr(&bars.q_empty);
  // K/V tiles are numbered across all of the block's work items: tile i sits in ring buffer
  // i % kStages, filled in that buffer's phase (i / kStages) % 2.
  auto k_full = [&](int tile) { return smem_addr(&bars.k_full[tile % kStages]); };
  auto v_full = [&](int tile) { return smem_addr(&bars.v_full[tile % kStages]); };
  auto k_empty = [&](int tile) { return smem_addr(&bars.k_empty[tile % kStages]); };
  auto v_empty = [&](int tile) { return smem_addr(&bars.v_empty[tile % kStages]); };
  auto k_buf = [&](int tile) { return sK + (tile % kStages) * kKvBytes; };
  auto v_buf = [&](int tile) { return sV + (tile % kStages) * kKvBytes; };
  auto lap_parity = [&](int tile) { return static_cast<uint32_t>((tile / kStages) & 1); };

  if (threadIdx.x == 0) {
    hopper::mbar_init(q_full, 1);
    hopper::mbar_init(q_empty, kConsumerWarps);
    for (int i = 0; i < kStages; ++i) {
      hopper::mbar_init(k_full(i), 1);
      hopper::mbar_init(v_full(i), 1);
      hopper::mbar_init(k_empty(i), kConsumerWarps);
      hopper::mbar_init(v_empty(i), kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to TMA
  }
  __syncthreads();

  // The block's work items in order; false once they run out. Both roles walk the same list.
  BlockWork<T, D, false> w;
  auto next_item = [&](int& round) {
    for (;; ++round) {
      const int item = item_of_round(round);
      if (item >= tp.items) return false;
      const int tile = item % tp.m_tiles, head = (item / tp.m_tiles) % p.q_heads;
      const int seq = item / (tp.m_tiles * p.q_heads);
      if (w.init(p, kBlockM, kTileN, tile, tp.m_tiles, head, seq)) {
        ++round;
        return true;
      }
    }
  };

  const int wg = threadIdx.x / 128;
  if (wg == 0) {  // ---- producer ----
    hopper::set_max_registers_dec<S::kProducerRegs>();
    if (threadIdx.x != 0) return;
    int tile_seq = 0;  // K/V tiles loaded so far
    for (int round = 0, n = 0; next_item(round); ++n) {
      const int kv_head = w.head / (p.q_heads / p.kv_heads);
      const int kv_row0 = static_cast<int>(w.k.seq_row0);
      hopper::mbar_wait(q_empty, (n & 1) ^ 1);  // the item before has issued its last S product
      hopper::mbar_arrive_expect_tx(q_full, kQBytes);
      for (int r = 0; r < kRegions; ++r)
        hopper::tma_load_3d(sQ + r * kBlockM * 128, &tp.q, r * 64, w.head, w.q_start + w.m0, q_full);
      for (int j = 0; j < w.n_tiles; ++j, ++tile_seq) {
        const int row = kv_row0 + j * kTileN;
        hopper::mbar_wait(k_empty(tile_seq), lap_parity(tile_seq) ^ 1);  // the lap before was read
        hopper::mbar_arrive_expect_tx(k_full(tile_seq), kKvBytes);
        for (int r = 0; r < kRegions; ++r)
          hopper::tma_load_3d(k_buf(tile_seq) + r * kTileN * 128, &tp.k, r * 64, kv_head, row,
                              k_full(tile_seq));
        hopper::mbar_wait(v_empty(tile_seq), lap_parity(tile_seq) ^ 1);
        hopper::mbar_arrive_expect_tx(v_full(tile_seq), kKvBytes);
        for (int r = 0; r < kRegions; ++r)
          hopper::tma_load_3d(v_buf(tile_seq) + r * kTileN * 128, &tp.v, r * 64, kv_head, row,
                              v_full(tile_seq));
      }
    }
    return;
  }

  // ---- consumers ----
  hopper::set_max_registers_inc<S::kConsumerRegs>();
  const int cw = wg - 1, warp_in_wg = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const uint32_t q_wg = sQ + cw * 64 * 128;  // this warpgroup's 64 rows of every Q region

  float o[kDTiles][4];
  auto& o_flat = reinterpret_cast<float(&)[D / 2]>(o);
  float s[kNTiles][4];
  auto& s_flat = reinterpret_cast<float(&)[kTileN / 2]>(s);
  uint32_t pa[kTileN / 16][4];  // P of the previous tile, packed as wgmma's A operand
  int row_lo = 0, row_hi = 0;
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
  // Masks (only on tiles past the first row's diagonal or the last key) and probabilities of the
  // item's key tile j.
  auto softmax = [&](int j, float& alpha_lo, float& alpha_hi) {
    const int n0 = j * kTileN;
    if (n0 + kTileN > w.kv_len || (p.causal && n0 + kTileN - 1 > w.m0 + w.diag))
      RowSoftmax::mask(s, n0, t, row_lo, row_hi, w.kv_len, p.causal, w.diag);
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
  // Ping-pong: consumer cw issues its products between named_sync(1 + cw) and its arrival on the
  // next consumer's barrier, round robin. The last consumer lets consumer 0 go first; consumer 0
  // takes the last consumer's final hand-over when the block ends, so every barrier ends balanced.
  const int next = (cw + 1) % kConsumers;
  auto turn_begin = [&] { hopper::named_sync(1 + cw, 256); };
  auto turn_end = [&] { hopper::named_arrive(1 + next, 256); };
  if (next == 0) hopper::named_arrive(1, 256);

  int tile_seq = 0;  // K/V tiles consumed so far (the producer's numbering)
  for (int round = 0, n = 0; next_item(round); ++n) {
    const int n_tiles = w.n_tiles;
    row_lo = w.m0 + cw * 64 + warp_in_wg * 16 + g;
    row_hi = row_lo + 8;
    rows = RowSoftmax{};
#pragma unroll
    for (int d = 0; d < kDTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;

    hopper::mbar_wait(q_full, n & 1);
    if (n_tiles == 0) release(q_empty);
    if (n_tiles > 0) {
      float alpha_lo, alpha_hi;
      hopper::mbar_wait(k_full(tile_seq), lap_parity(tile_seq));
      turn_begin();
      issue_qk(tile_seq);
      turn_end();
      wgmma_wait<0>();
      fence_registers(s_flat);
      release(k_empty(tile_seq));
      if (n_tiles == 1) release(q_empty);
      softmax(0, alpha_lo, alpha_hi);  // O is still zero: nothing to rescale
      pack_p();
      for (int j = 1; j < n_tiles; ++j) {
        const int cur = tile_seq + j, prev = cur - 1;
        hopper::mbar_wait(k_full(cur), lap_parity(cur));
        hopper::mbar_wait(v_full(prev), lap_parity(prev));
        turn_begin();
        issue_qk(cur);
        issue_pv(prev);
        turn_end();
        wgmma_wait<1>();  // S of this tile; the previous P V may still run
        fence_registers(s_flat);
        release(k_empty(cur));
        if (j == n_tiles - 1) release(q_empty);  // the item's last read of Q is done
        softmax(j, alpha_lo, alpha_hi);
        wgmma_wait<0>();
        fence_registers(o_flat);
        release(v_empty(prev));
        RowSoftmax::rescale(o, alpha_lo, alpha_hi);
        pack_p();
      }
      const int last = tile_seq + n_tiles - 1, valid = w.kv_len - (n_tiles - 1) * kTileN;
      hopper::mbar_wait(v_full(last), lap_parity(last));
      if (valid < kTileN) {  // zero the value rows past kv_len (see the top of the file)
        for (int i = threadIdx.x % 128; i < (kTileN - valid) * kRegions * 8; i += 128) {
          const int r = valid + i / (kRegions * 8), region = (i / 8) % kRegions, chunk = i % 8;
          asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(
                           v_buf(last) + region * kTileN * 128 + r * 128 + chunk * 16),
                       "r"(0u)
                       : "memory");
        }
        fence_proxy_async();
        hopper::named_sync(1 + kConsumers + cw, 128);
      }
      turn_begin();
      issue_pv(last);
      turn_end();
      wgmma_wait<0>();
      fence_registers(o_flat);
      release(v_empty(last));
      tile_seq += n_tiles;
    }

    float inv_lo, inv_hi;
    rows.finish(p.lse, w.q_start, p.q_heads, w.head, t, row_lo, row_hi, w.q_len, inv_lo, inv_hi);
    store_warp_rows<T, D, kBlockM>(p, o, inv_lo, inv_hi, sO, cw * 64 + warp_in_wg * 16, w.q_start,
                                   w.head, w.m0, w.q_len);
  }
  if (cw == 0) hopper::named_sync(1, 256);  // the last consumer's final hand-over
#endif
}

}  // namespace braid::cuda::flash::ws
