// moe_experts on CUDA: a decode-sized MoE layer (a few tokens, k experts each) as two launches
// that read every chosen expert's weights from DRAM once.
//
// Why this shape. At decode the layer is a pure weight stream: Qwen3-30B-A3B at one token reads
// 8 experts x 3 x 2048 x 768 bf16 = 75.5 MB and does almost no arithmetic, so the kernels are
// judged by how close they get to the DRAM bandwidth. That takes (a) every byte of a chosen expert
// read once, whatever number of the tokens chose it, (b) enough 16-byte loads in flight on every
// SM (Little's law: ~3 TB/s x ~1 us loaded latency is ~3 MB across 132 SMs, so tens of KB per
// SM), and (c) no serial chain of dependent loads per warp. The previous kernels had a block per
// (token, expert) pair, so tokens sharing an expert each re-read it, and at one token they had
// one 16-byte load per row per loop trip in flight (two rows per warp; 1024 warps in the down
// kernel, each walking its k experts one after the other).
//
// Both kernels put weights on the tensor cores' M side and tokens on N (mma.sync m16n8k16, fp32
// accumulation; f32 data takes a CUDA-core path with the same fragment layout): a warp streams a
// 16-row tile of weights with 16-byte loads, 2 x kUnroll per lane in flight, and one load of a
// weight row serves up to 8 (or 16, two n-tiles) tokens at no extra cost. Each lane loads 16
// contiguous bytes of its rows g and g + 8 and of its token g; the first and second halves feed
// two mmas (the k order inside one mma is free as long as A and B agree), so there are no
// shuffles or shared-memory staging between the loads and the mma. The expert a block works on
// is found on the device from topk_ids (a bitmap of the experts in use in shared memory; the
// s-th set bit is the s-th work slot), so nothing is synchronised with the host and the launch
// shape depends only on the tensor shapes (graph-capturable).
//
// 1. gate_up: one block per (8 intermediate rows, active expert): its tile is those 8 gate rows
//    and the 8 up rows with the same indices, so each lane ends up holding g and u of the same
//    (row, token) and the SwiGLU needs no data movement. The block's 4 warps split H (the gemv
//    kernel found one 16-row tile per block with split k fastest on H100), add their partials
//    in a fixed order in shared memory and round g, u and h as the contract says. Work items
//    are numbered chunk-major, so the blocks that find no expert (the grid assumes min(T*k, E)
//    distinct experts) have the highest indices and run after all the real work, in the tail.
//    Qwen3 at T = 1: 96 x 8 = 768 blocks of 64 KB each (bf16), 6 resident per SM: one wave, so
//    every block's setup overlaps the others' loads (8-warp blocks, 3 per SM, took two waves
//    and 3-5% more of the step: docs/perf/fp8.md, "gate_up in one wave").
// 2. down: one block per 16 rows of H (and per batch of up to 256 (token, expert) pairs), over
//    all the experts in use: its 16 warps take (expert, slice of I) items, so each down row of
//    each active expert is read once, and write y per (pair, row) to shared memory; the block
//    then combines each token's k outputs in j order (deterministic, no atomics). The I split
//    (ksplit) depends only on k, E and I, never on T, so a token's sums are taken in the same
//    order at any batch size. Qwen3 at T = 1: 128 blocks x 16 warps x 4 KB in flight = 64 KB
//    per SM (one 512-thread block of 126 registers fills an SM's register file).
//
// 3. Shared experts (DeepSeek; ops::MoeExpertsExtras): their MLP, S = shared x I wide, is taken
//    as `shared` more experts of width I (ids E .. E + shared - 1 here) that every token uses with
//    weight 1, with h rows after the routed pairs' in the workspace. In gate_up their items come
//    first, and since their rows do not depend on the routing, those blocks ask L2 for them before
//    waiting for the router (whose one block leaves DRAM idle). The down kernel's warps take them
//    as items after the routed experts; its combine rounds the routed sum, adds the shared sum and
//    then the residual, each rounded, as forward()'s separate ops did. One launch pair then does
//    the whole layer after the router: OCR's decoder had 3 more kernels (two GEMVs and an add).
//
// Both launches are programmatic dependents (PDL) of the kernel before them, to hide the gap
// between kernels. gate_up touches no global memory before griddepcontrol.wait, then lets the
// down kernel launch; down's blocks start as gate_up's last blocks drain, find their experts
// (topk_ids is complete by then), and each warp issues its first group of down-row loads before
// it waits for h (LateWait; BRAID_MOE_DOWN_EARLY=0 waits before the items). They could also ask
// L2 for their down rows before the wait (one bulk prefetch per expert; gate_up's weight loads
// are marked evict-first so they would not push those out), to give DRAM down's reads during
// gate_up's tail: that was the first design, but measured it made every MoE decode step slower
// (15-106 us on an H200, docs/perf/decode.md attempt 9), so it is off unless
// BRAID_MOE_DOWN_PREFETCH=1. These are kProgrammaticGateUp / kProgrammaticDown and ExpertArgs'
// prefetch_down and early_down (moe_experts_device.cuh), to compare on the GPU.
//
// FP8 weights (e4m3, one f32 scale per 128 x 128 block: Qwen3-*-FP8's and DeepSeek-V3's experts)
// take the same kernels with kFp8: a lane loads 16 bytes = 16 weights per row per 64-column step
// and turns each half into the 8 exact T values a 16-bit load would give (gemv_fused.cu's fp8
// GEMV does the same), so the mma fragments and everything after the tile are unchanged. Warp
// slices of H (gate_up) and I (down) are whole 128-column blocks; each block's sums are scaled
// once (warp_tile_fp8). The activations are not quantized: products are exact, sums fp32.
//
// Quantized activations (ExpertArgs::quantized, the op's quantize_activations; routed experts
// only, the shared ones stay exact as the op's contract says): the weights go to the fp8 tensor
// cores as loaded (mma.m16n8k32.e4m3), so the four conversions per 16 weights and row above,
// taken to set the exact tile's time (docs/perf/deepseek.md, attempt 8), are gone. The
// activations are quantized instead, per 128 columns as moe_fp8_quantize does, by the warp that
// uses them: its slices are whole 128-column blocks, so a
// block's amax is the warp's own, and no other warp or block has to agree on it. Per group of 4
// steps (256 columns) the warp first issues its weight loads, then quantizes those columns of its
// tokens into a stage of shared memory (one token's 256 columns per pass of 32 lanes, 8 columns a
// lane: a 128-column block is 16 lanes, its amax 4 shuffles away), then runs the mmas from it.
// At one token that is 8 divisions a lane per group, against 64 weights converted a lane per
// step; each of the gate_up blocks requantizes x (cheap next to its 32 KB of weights), and each
// down block every h it uses. Measured on an H100 it is not faster (docs/perf/fp8.md: both
// kernels wait on their loads' latency, not on issue slots), so the engine leaves it off.
//
// Large T stays correct but is not what this is for: gate_up re-reads an expert's tile once per
// 8 or 16 of its tokens, and down re-reads its rows once per 256-pair batch (batches of the same
// rows run side by side, so mostly from L2). The grouped-GEMM path is the one for prefill.
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/cuda_check.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/launch_util.h"
#include "ops/cuda/moe/moe_experts_device.cuh"

namespace braid::cuda {

namespace {

using namespace moe_experts_device;

bool down_early_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("BRAID_MOE_DOWN_EARLY");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

bool down_prefetch_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("BRAID_MOE_DOWN_PREFETCH");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

// ---- kernel 1: gate_up -----------------------------------------------------------------------

// The pairs p < n with ids[p] == e, in order: those of rank [from, from + cap) go to list, the
// total is returned (to every thread). The whole block calls it; ends with a barrier.
__device__ int64_t collect_pairs(const int32_t* ids, int64_t n, int e, int64_t from, int* list,
                                 int* warp_counts) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  int64_t total = 0;
  for (int64_t base = 0; base < n; base += blockDim.x) {
    const int64_t p = base + threadIdx.x;
    const bool match = p < n && ids[p] == e;
    const unsigned m = __ballot_sync(kFull, match);
    if (lane == 0) warp_counts[warp] = __popc(m);
    __syncthreads();
    int64_t rank = total + popc_below_lane(m);
    int all = 0;
    for (int w = 0; w < warps; ++w) {
      const int cw = warp_counts[w];
      if (w < warp) rank += cw;
      all += cw;
    }
    if (match && rank >= from && rank < from + kGateUpListCap) list[rank - from] = static_cast<int>(p);
    total += all;
    __syncthreads();  // warp_counts is rewritten next round; list is complete at the end
  }
  return total;
}

// collect_pairs for expert e, routed or shared (every token's pair, in token order).
__device__ int64_t list_pairs(const ExpertArgs& a, int e, int64_t from, int* list, int* warp_counts) {
  if (e < a.experts) return collect_pairs(a.ids, a.tokens * a.k, e, from, list, warp_counts);
  const int64_t first = a.tokens * a.k + (e - a.experts);
  const int64_t n = a.tokens - from < kGateUpListCap ? a.tokens - from : kGateUpListCap;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    list[i] = static_cast<int>(first + (from + i) * a.shared);
  __syncthreads();
  return a.tokens;
}

// Warps per gate_up block, and blocks per SM: 24 warps per SM (80 registers a thread) in blocks
// of kGateUpWarps; for f32, 2 blocks of kGateUpWarpsF32.
template <typename T>
constexpr int gate_up_warps() {
  return std::is_same_v<T, float> ? kGateUpWarpsF32 : kGateUpWarps;
}
template <typename T>
constexpr int gate_up_blocks_per_sm() {
  return std::is_same_v<T, float> ? 2 : 24 / gate_up_warps<T>();
}

// kFp8: gate_up is e4m3 with block scales (T is then f16 or bf16).
template <typename T, int NT, bool kVec, bool kFp8>
__global__ void __launch_bounds__(gate_up_warps<T>() * 32, gate_up_blocks_per_sm<T>())
    moe_gate_up_kernel(const ExpertArgs a) {
  constexpr int kChunk = 8 * NT;
  constexpr int kWarps = gate_up_warps<T>();
  using W = std::conditional_t<kFp8, uint8_t, T>;  // a weight element
  // The warps' stages (quantized activations), then the bitmap (a.bitmap_words).
  extern __shared__ __align__(16) uint8_t dyn[];
  uint32_t* bitmap = reinterpret_cast<uint32_t*>(dyn + kWarps * warp_stage_bytes<NT>(a));
  __shared__ float partial[kWarps][kMaxTilePairs][kTileRows];
  __shared__ int pair_list[kGateUpListCap];
  __shared__ const T* x_rows[kMaxTilePairs];
  __shared__ int warp_counts[kWarps];
  __shared__ int s_expert;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int64_t pairs = a.tokens * a.k;
  const int chunks = (a.inter + kGateUpRows - 1) / kGateUpRows;
  uint8_t* stage = dyn + warp * warp_stage_bytes<NT>(a);

  for (int w = tid; w < a.bitmap_words; w += blockDim.x) bitmap[w] = 0u;
  // Items: the shared experts' (chunk-major: item = chunk * shared + j) first, then the routed
  // slots' (chunk-major again: chunk * slots + slot; slots past the experts in use find none,
  // and run last).
  const int64_t shared_items = static_cast<int64_t>(chunks) * a.shared;
  // The shared experts' rows are known before the routing is: a block whose first item is one of
  // theirs asks L2 for its 8 gate and 8 up rows while the router still runs (DRAM is idle then).
  // A prefetch is a hint that reads nothing back, so it may precede the wait below.
  if (kPrefetchSharedRows && kVec && tid == 0 && blockIdx.x < shared_items) {
    const int chunk = static_cast<int>(blockIdx.x / a.shared), j = static_cast<int>(blockIdx.x % a.shared);
    const int i0 = chunk * kGateUpRows;
    const GateUpRows<W> tile = gate_up_rows<W>(a, a.experts + j, i0);
    const uint32_t bytes = static_cast<uint32_t>(min(kGateUpRows, a.inter - i0)) * a.hidden * sizeof(W);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(tile.base + tile.gate * a.hidden),
                 "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(tile.base + tile.up * a.hidden),
                 "r"(bytes) : "memory");
  }
  // Launched as a programmatic dependent, the block may start before the kernel before it has
  // finished: no global memory is touched (read or written) before this wait.
  if constexpr (kProgrammaticGateUp) pdl::wait();
  // The down kernel's blocks may be scheduled from now on (they wait for this grid's results;
  // before that they only read topk_ids, complete now).
  if constexpr (kProgrammaticDown) pdl::launch_dependents();
  __syncthreads();
  mark_experts(bitmap, a.ids, pairs, a.experts);
  // A pair with a bad id gets a zero h row (block c zeroes rows of chunk c); kernel 2 skips it.
  if (blockIdx.x < static_cast<unsigned>(chunks)) {
    const int r0 = static_cast<int>(blockIdx.x) * kGateUpRows;
    for (int64_t p = tid; p < pairs; p += blockDim.x) {
      const int e = a.ids[p];
      if (e < 0 || e >= a.experts)
        for (int i = r0; i < min(r0 + kGateUpRows, a.inter); ++i)
          h_store<T>(a)[p * a.inter + i] = from_float<T>(0.0f);
    }
  }
  __syncthreads();

  const uint64_t policy = evict_first_policy();
  // This warp's slice of H: whole 32-column steps (fp8: whole 128-column scale blocks), split
  // evenly over the warps.
  constexpr int kUnit = kFp8 ? kFp8Block : kStepCols;
  const int units = (a.hidden + kUnit - 1) / kUnit;
  const int slice = (units + kWarps - 1) / kWarps * kUnit;
  const int k0 = min(a.hidden, warp * slice), k1 = min(a.hidden, k0 + slice);

  const int64_t items = shared_items + static_cast<int64_t>(chunks) * a.gate_up_slots;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const bool shared = item < shared_items;
    const int64_t r = shared ? item : item - shared_items;
    const int per_chunk = shared ? a.shared : a.gate_up_slots;
    const int chunk = static_cast<int>(r / per_chunk);
    const int slot = static_cast<int>(r % per_chunk);
    __syncthreads();  // everyone has read the previous item's s_expert
    if (warp == 0) {
      const int e = shared ? a.experts + slot : nth_set_bit(bitmap, a.bitmap_words, slot);
      if (lane == 0) s_expert = e;
    }
    __syncthreads();
    const int e = s_expert;
    if (e < 0) continue;  // block-uniform: no expert for this slot
    const int i0 = chunk * kGateUpRows;
    const bool row_ok = i0 + g < a.inter;
    const GateUpRows<W> tile = gate_up_rows<W>(a, e, i0 + g);
    const W* gate_row = tile.base + tile.gate * a.hidden;
    const W* up_row = tile.base + tile.up * a.hidden;
    // fp8: the scale rows of the gate row's and the up row's 128-row blocks (I % 128 == 0, so
    // every row of the tile exists).
    [[maybe_unused]] const float* gate_scale = nullptr;
    [[maybe_unused]] const float* up_scale = nullptr;
    if constexpr (kFp8) {
      const int hb = a.hidden / kFp8Block;
      gate_scale = tile.scale + tile.gate / kFp8Block * hb;
      up_scale = tile.scale + tile.up / kFp8Block * hb;
    }

    int64_t total = list_pairs(a, e, 0, pair_list, warp_counts);
    for (int64_t from = 0; from < total; from += kGateUpListCap) {
      if (from > 0) list_pairs(a, e, from, pair_list, warp_counts);
      const int listed = static_cast<int>(total - from < kGateUpListCap ? total - from : kGateUpListCap);
      for (int first = 0; first < listed; first += kChunk) {
        const int nb = min(kChunk, listed - first);
        if (tid < nb)
          x_rows[tid] = static_cast<const T*>(a.x) + token_of_pair(a, pair_list[first + tid]) * a.x_stride;
        __syncthreads();
        float c[NT][4] = {};
        LateWait waited{false};  // this kernel waited at its start
        if constexpr (kFp8) {
          if (a.quantized && !shared)
            warp_tile_e4m3<T, NT, kVec>(gate_row, row_ok, up_row, row_ok, gate_scale, up_scale,
                                        x_rows, nb, k0, k1, policy, waited, stage, c);
          else
            warp_tile_fp8<T, NT, kVec>(gate_row, row_ok, up_row, row_ok, gate_scale, up_scale,
                                       x_rows, nb, k0, k1, policy, waited, c);
        } else
          warp_tile<T, NT, kVec>(gate_row, row_ok, up_row, row_ok, x_rows, nb, k0, k1, policy,
                                 waited, c);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int n = 8 * nt + 2 * t;
          partial[warp][n][g] = c[nt][0];
          partial[warp][n + 1][g] = c[nt][1];
          partial[warp][n][g + 8] = c[nt][2];
          partial[warp][n + 1][g + 8] = c[nt][3];
        }
        __syncthreads();
        if (tid < kGateUpRows * nb) {
          const int i = tid % kGateUpRows, n = tid / kGateUpRows;
          float gs = 0.0f, us = 0.0f;
#pragma unroll
          for (int w = 0; w < kWarps; ++w) {
            gs += partial[w][n][i];
            us += partial[w][n][i + 8];
          }
          if (i0 + i < a.inter) {
            // g and u rounded as a gemm writes them; silu(g) * u in fp32 with expf, rounded once
            // (silu_mul's arithmetic).
            const float gr = to_float(from_float<T>(gs));
            const float ur = to_float(from_float<T>(us));
            h_store<T>(a)[static_cast<int64_t>(pair_list[first + n]) * a.inter + i0 + i] =
                from_float<T>(gr / (1.0f + expf(-gr)) * ur);
          }
        }
        __syncthreads();  // partial, x_rows and pair_list are rewritten next
      }
    }
  }
}

// ---- kernel 2: down and combine --------------------------------------------------------------
template <typename T, int NT, bool kVec, bool kFp8>
__global__ void __launch_bounds__(kDownWarps * 32, 1) moe_down_kernel(const ExpertArgs a) {
  constexpr int kChunk = 8 * NT;
  using W = std::conditional_t<kFp8, uint8_t, T>;  // a weight element
  // The warps' stages (quantized activations), the bitmap (a.bitmap_words), the y partial sums.
  extern __shared__ __align__(16) uint8_t dyn[];
  uint32_t* bitmap = reinterpret_cast<uint32_t*>(dyn + kDownWarps * warp_stage_bytes<NT>(a));
  // y of batch pair q, I slice s, row r (of the block's 16) at partial[(s * all + q) * 16 + r]:
  // q < pairs the routed pair q (token q / k), then pairs + t * shared + j the shared ones.
  float* partial = reinterpret_cast<float*>(bitmap + a.bitmap_words);
  __shared__ int expert_list[kDownBatchPairs];
  __shared__ int16_t warp_pairs[kDownWarps][kDownBatchPairs];
  __shared__ const T* h_rows[kDownWarps][kMaxTilePairs];
  __shared__ int s_used;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  uint8_t* stage = dyn + warp * warp_stage_bytes<NT>(a);
  const int64_t batches = (a.tokens + a.batch_tokens - 1) / a.batch_tokens;
  const int row_blocks = (a.hidden + kTileRows - 1) / kTileRows;
  // Slices of I: whole 32-column steps (fp8: whole 128-column scale blocks).
  constexpr int kUnit = kFp8 ? kFp8Block : kStepCols;
  const int units = (a.inter + kUnit - 1) / kUnit;
  const int slice = (units + a.ksplit - 1) / a.ksplit * kUnit;
  const uint64_t policy = evict_first_policy();
  // h (and, when out is x, the last reads of x) come from gate_up: each thread waits for all of
  // it before its first activation load (early_down) or before its first item.
  LateWait gate{kProgrammaticDown};
  bool first_batch = true;

  // Batches along x: blocks side by side share down rows (from L2 when there are several).
  for (int rb = blockIdx.y; rb < row_blocks; rb += gridDim.y) {
    const int n0 = rb * kTileRows;
    const int rows = min(kTileRows, a.hidden - n0);
    for (int64_t batch = blockIdx.x; batch < batches; batch += gridDim.x) {
      const int64_t t0 = batch * a.batch_tokens;
      const int tokens = static_cast<int>(a.tokens - t0 < a.batch_tokens ? a.tokens - t0 : a.batch_tokens);
      const int pairs = tokens * a.k, all = pairs + tokens * a.shared;
      const int64_t p0 = t0 * a.k;
      const int64_t shared0 = a.tokens * a.k + t0 * a.shared;  // the batch's first shared pair
      const int32_t* ids = a.ids + p0;

      for (int w = tid; w < a.bitmap_words; w += blockDim.x) bitmap[w] = 0u;
      __syncthreads();
      mark_experts(bitmap, ids, pairs, a.experts);
      __syncthreads();
      if (warp == 0) {
        const int used = list_set_bits(bitmap, a.bitmap_words, expert_list);
        if (lane == 0) s_used = used;
      }
      __syncthreads();
      const int used = s_used;
      if (a.prefetch_down && kVec && first_batch) {
        // Ask L2 for this block's rows of each expert in use (contiguous: rows n0.. of expert e)
        // while gate_up is still finishing.
        const uint32_t bytes = static_cast<uint32_t>(rows) * a.inter * sizeof(W);
        for (int s = tid; s < used; s += blockDim.x) {
          const W* p = down_row<W>(a, expert_list[s], n0);
          asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
        }
        if (a.shared > 0 && tid == blockDim.x - 1) {  // the shared experts' rows: one run
          const W* p = down_row<W>(a, a.experts, n0);
          asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes * a.shared)
                       : "memory");
        }
      }
      if (!a.early_down) gate.pass();
      first_batch = false;

      // Items: (expert, slice of I), the routed experts in use, then the shared ones.
      const int items = (used + a.shared) * a.ksplit;
      for (int item = warp; item < items; item += kDownWarps) {
        const int slot = item / a.ksplit;
        const int e = slot < used ? expert_list[slot] : a.experts + (slot - used);
        const int part = item % a.ksplit;
        const int k0 = min(a.inter, part * slice), k1 = min(a.inter, k0 + slice);
        // This expert's pairs in the batch, in order.
        int count = 0;
        if (e < a.experts) {
          for (int base = 0; base < pairs; base += 32) {
            const int p = base + lane;
            const bool match = p < pairs && ids[p] == e;
            const unsigned m = __ballot_sync(kFull, match);
            if (match) warp_pairs[warp][count + popc_below_lane(m)] = static_cast<int16_t>(p);
            count += __popc(m);
          }
        } else {
          for (int tl = lane; tl < tokens; tl += 32)
            warp_pairs[warp][tl] = static_cast<int16_t>(pairs + tl * a.shared + (e - a.experts));
          count = tokens;
        }
        __syncwarp();
        const W* lo_row = down_row<W>(a, e, n0 + g);
        const W* hi_row = down_row<W>(a, e, n0 + g + 8);
        // fp8: the 16 rows lie in one 128-row block (n0 % 16 == 0): one scale row for both.
        [[maybe_unused]] const float* row_scale = nullptr;
        if constexpr (kFp8) row_scale = down_scale_row(a, e, n0);
        for (int first = 0; first < count; first += kChunk) {
          const int nb = min(kChunk, count - first);
          if (lane < nb) {
            const int q = warp_pairs[warp][first + lane];
            h_rows[warp][lane] = h_store<T>(a) + (q < pairs ? p0 + q : shared0 + (q - pairs)) * a.inter;
          }
          __syncwarp();
          float c[NT][4] = {};
          if constexpr (kFp8) {
            if (a.quantized && e < a.experts)
              warp_tile_e4m3<T, NT, kVec>(lo_row, g < rows, hi_row, g + 8 < rows, row_scale,
                                          row_scale, h_rows[warp], nb, k0, k1, policy, gate,
                                          stage, c);
            else
              warp_tile_fp8<T, NT, kVec>(lo_row, g < rows, hi_row, g + 8 < rows, row_scale,
                                         row_scale, h_rows[warp], nb, k0, k1, policy, gate, c);
          } else
            warp_tile<T, NT, kVec>(lo_row, g < rows, hi_row, g + 8 < rows, h_rows[warp], nb,
                                   k0, k1, policy, gate, c);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
              const int n = 8 * nt + 2 * t + jj;
              if (n < nb) {
                float* y = partial + (static_cast<int64_t>(part) * all + warp_pairs[warp][first + n]) * kTileRows;
                y[g] = c[nt][jj];
                y[g + 8] = c[nt][2 + jj];
              }
            }
          }
          __syncwarp();  // h_rows is rewritten next
        }
      }
      gate.pass();  // a thread whose warp had no item: out may be x, which gate_up reads
      __syncthreads();

      // out[t, n0 + r] = sum over j, in order, of w[t, j] * y_j[r]; bad ids add nothing. Then
      // the shared experts' sum and the residual, each rounded as the op's contract says.
      for (int idx = tid; idx < tokens * kTileRows; idx += blockDim.x) {
        const int tl = idx / kTileRows, r = idx % kTileRows;
        if (r >= rows) continue;
        float acc = 0.0f;
        for (int j = 0; j < a.k; ++j) {
          const int p = tl * a.k + j;
          const int e = ids[p];
          if (e < 0 || e >= a.experts) continue;
          float y = 0.0f;
          for (int s = 0; s < a.ksplit; ++s) y += partial[(s * all + p) * kTileRows + r];
          acc = fmaf(a.weights[p0 + p], y, acc);
        }
        if (a.shared > 0) {
          float sh = 0.0f;
          for (int j = 0; j < a.shared; ++j) {
            const int q = pairs + tl * a.shared + j;
            for (int s = 0; s < a.ksplit; ++s) sh += partial[(s * all + q) * kTileRows + r];
          }
          acc = rounded<T>(rounded<T>(acc) + rounded<T>(sh));
        }
        if (a.residual) {
          const T res = static_cast<const T*>(a.residual)[(t0 + tl) * a.residual_stride + n0 + r];
          acc = to_float(res) + rounded<T>(acc);
        }
        static_cast<T*>(a.out)[(t0 + tl) * a.out_stride + n0 + r] = from_float<T>(acc);
      }
      __syncthreads();  // the bitmap, lists and partials are rewritten for the next batch
    }
  }
  // A block with no batch still has to wait, so that no write can precede gate_up's end.
  gate.pass();
}

// Launches kernel(a), as a programmatic dependent of the stream's previous kernel when
// `programmatic` (its blocks may start early and must griddepcontrol.wait before touching memory).
template <typename Kernel>
void launch_kernel(Kernel kernel, dim3 grid, unsigned threads, size_t smem, cudaStream_t s,
                   bool programmatic, const ExpertArgs& a) {
  if (smem > 36 * 1024)  // beyond what the default 48 KB leaves beside the static arrays (< 12 KB)
    BRAID_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  launch_dependent_if(programmatic && programmatic_launch_enabled(), kernel, grid, dim3(threads),
                      smem, s, a);
  BRAID_CUDA_CHECK_LAUNCH();
}

template <typename T, int NT, bool kVecH, bool kVecI, bool kFp8>
void launch(const ExpertArgs& a, cudaStream_t s) {
  const int chunks = (a.inter + kGateUpRows - 1) / kGateUpRows;
  const int64_t items = static_cast<int64_t>(chunks) * (a.shared + a.gate_up_slots);
  const unsigned grid1 = static_cast<unsigned>(items < INT_MAX ? items : INT_MAX);
  constexpr int kWarps1 = gate_up_warps<T>();
  const size_t smem1 = static_cast<size_t>(kWarps1) * warp_stage_bytes<NT>(a) +
                       static_cast<size_t>(a.bitmap_words) * 4;
  launch_kernel(moe_gate_up_kernel<T, NT, kVecH, kFp8>, dim3(grid1), kWarps1 * 32, smem1, s,
                kProgrammaticGateUp, a);

  const int64_t batches = (a.tokens + a.batch_tokens - 1) / a.batch_tokens;
  const int64_t row_blocks = (a.hidden + kTileRows - 1) / kTileRows;
  const dim3 grid2(static_cast<unsigned>(batches < INT_MAX ? batches : INT_MAX),
                   static_cast<unsigned>(row_blocks < 65535 ? row_blocks : 65535));
  const int max_pairs =
      static_cast<int>(a.tokens < a.batch_tokens ? a.tokens : a.batch_tokens) * (a.k + a.shared);
  const size_t smem2 = static_cast<size_t>(kDownWarps) * warp_stage_bytes<NT>(a) +
                       static_cast<size_t>(a.bitmap_words) * 4 +
                       static_cast<size_t>(a.ksplit) * max_pairs * kTileRows * sizeof(float);
  launch_kernel(moe_down_kernel<T, NT, kVecI, kFp8>, grid2, kDownWarps * 32, smem2, s,
                kProgrammaticDown, a);
}

// The kernels' arguments and choices for one call.
struct Plan {
  ExpertArgs a;
  bool vec_h, vec_i, two_tiles;
};

Plan plan_for(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
              const Tensor& gate_up, const Tensor& down, const Tensor& gate_up_scale,
              const Tensor& down_scale, const ops::MoeExpertsExtras& extras,
              const Tensor& workspace, const Tensor& out) {
  const bool fp8 = gate_up.dtype == DType::f8e4m3;
  Plan plan{};
  ExpertArgs& a = plan.a;
  a.x = x.data;
  a.weights = topk_weights.ptr<float>();
  a.ids = topk_ids.ptr<int32_t>();
  a.gate_up = gate_up.data;
  a.down = down.data;
  a.gate_up_scale = static_cast<const float*>(gate_up_scale.data);
  a.down_scale = static_cast<const float*>(down_scale.data);
  a.shared_gate_up = extras.shared_gate_up.w.data;
  a.shared_down = extras.shared_down.w.data;
  a.shared_gate_up_scale = static_cast<const float*>(extras.shared_gate_up.scale.data);
  a.shared_down_scale = static_cast<const float*>(extras.shared_down.scale.data);
  a.residual = extras.residual.data;
  a.workspace = workspace.ptr<float>();
  a.out = out.data;
  a.x_stride = x.row_stride();
  a.out_stride = out.row_stride();
  a.residual_stride = a.residual ? extras.residual.row_stride() : 0;
  a.tokens = x.shape[0];
  a.hidden = static_cast<int>(x.shape[1]);
  a.inter = static_cast<int>(down.shape[2]);
  a.experts = static_cast<int>(gate_up.shape[0]);
  a.k = static_cast<int>(topk_ids.shape[1]);
  a.shared = a.shared_gate_up ? static_cast<int>(extras.shared_gate_up.w.shape[0] / 2 / a.inter) : 0;
  a.bitmap_words = (a.experts + 31) / 32;
  a.prefetch_down = down_prefetch_enabled();
  a.early_down = down_early_enabled();
  const int64_t pairs = a.tokens * a.k;
  a.gate_up_slots = static_cast<int>(pairs < a.experts ? pairs : a.experts);
  // Down: enough (expert, I slice) items for the block's warps when k experts are in use (a
  // function of k, E and I only, so a token's sums are split the same way at any batch size),
  // slices of at least 4 steps (fp8: 2 scale blocks, 4 of its steps); batches as large as the
  // partial sums' shared memory allows.
  const int min_ke = (a.k < a.experts ? a.k : a.experts) + a.shared;
  const int unit = fp8 ? kFp8Block : kStepCols;
  const int units_i = (a.inter + unit - 1) / unit;
  const int min_units = fp8 ? 2 : 4;
  int ksplit = kDownWarps / min_ke;
  if (ksplit > units_i / min_units) ksplit = units_i / min_units;
  a.ksplit = ksplit < 1 ? 1 : ksplit;
  int batch = kDownBatchPairs / a.k;
  const int per_token = a.ksplit * (a.k + a.shared);
  if (batch > kDownMaxPartials / per_token) batch = kDownMaxPartials / per_token;
  a.batch_tokens = batch < 1 ? 1 : batch;

  const int elem = static_cast<int>(dtype_size(x.dtype));
  const int vec = 16 / elem;  // elements per 16-byte load
  // gate_up reads x and gate_up rows along H; down reads down and h rows along I (an h row of a
  // multiple of vec elements of T is a whole number of 16-byte words). fp8 widths
  // are multiples of 128, so the same conditions cover fp8 rows.
  plan.vec_h = a.hidden % vec == 0 && aligned16(a.x) && aligned16(a.gate_up) &&
                     (a.x_stride * elem) % 16 == 0 && (!a.shared || aligned16(a.shared_gate_up));
  plan.vec_i = a.inter % vec == 0 && aligned16(a.down) && aligned16(a.workspace) &&
                     (!a.shared || aligned16(a.shared_down));
  // Tokens per tile: 8 covers every expert's tokens when T <= 8 (ids distinct per token).
  plan.two_tiles = a.tokens > 8;
  a.quantized = fp8 && extras.quantize_activations;
  return plan;
}

}  // namespace

void moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                 const Tensor& gate_up, const Tensor& down, const Tensor& gate_up_scale,
                 const Tensor& down_scale, const ops::MoeExpertsExtras& extras,
                 const Tensor& workspace, const Tensor& out, Stream stream) {
  const Plan plan = plan_for(x, topk_weights, topk_ids, gate_up, down, gate_up_scale, down_scale,
                             extras, workspace, out);
  const ExpertArgs& a = plan.a;
  const bool vec_h = plan.vec_h, vec_i = plan.vec_i, fp8 = gate_up.dtype == DType::f8e4m3;
  auto s = static_cast<cudaStream_t>(stream.handle);
  dispatch_float_type(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto go = [&](auto nt, auto fp8_tag) {
      constexpr int NT = decltype(nt)::value;
      constexpr bool kFp8 = decltype(fp8_tag)::value;
      if (vec_h && vec_i)
        launch<T, NT, true, true, kFp8>(a, s);
      else if (vec_h)
        launch<T, NT, true, false, kFp8>(a, s);
      else if (vec_i)
        launch<T, NT, false, true, kFp8>(a, s);
      else
        launch<T, NT, false, false, kFp8>(a, s);
    };
    auto go_format = [&](auto nt) {
      if constexpr (std::is_same_v<T, float>) {
        go(nt, std::false_type{});  // fp8 weights take f16/bf16 activations (checked by the op)
      } else {
        if (fp8)
          go(nt, std::true_type{});
        else
          go(nt, std::false_type{});
      }
    };
    if (plan.two_tiles)
      go_format(std::integral_constant<int, 2>{});
    else
      go_format(std::integral_constant<int, 1>{});
  });
}

}  // namespace braid::cuda
