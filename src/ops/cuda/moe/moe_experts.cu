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
// 4. One token with fp8 experts, given the caller's counter: both in one launch
//    (moe_one_token_kernel, below), every weight byte through bulk copies into shared memory,
//    bit for bit the same output.
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
// prefetch_down and early_down below, to compare on the GPU.
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
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemv/gemv_device.cuh"
#include "ops/cuda/moe/fp8_codes.cuh"
#include "ops/cuda/hopper.cuh"
#include "ops/cuda/launch_util.h"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kTileRows = 16;          // weight rows per warp tile (the mma's M)
constexpr int kStepCols = 32;          // columns per mma step: 4 lanes x 8 elements
constexpr int kUnroll = 4;             // mma steps in flight per warp (2 weight loads each)
constexpr int kUnrollF32 = 2;          // 16-column steps in flight on the f32 path
constexpr int kMaxTilePairs = 16;      // tokens per tile: two n8 tiles
constexpr int kGateUpRows = 8;         // intermediate rows per gate_up block (8 gate + 8 up)
// Warps of a gate_up block: few, so that many blocks share an SM and a batch-1 grid
// (Qwen3-30B-A3B: 768 blocks) is resident in one wave (docs/perf/fp8.md, "gate_up in one wave").
constexpr int kGateUpWarps = 4;
constexpr int kGateUpWarpsF32 = 8;     // the f32 path's (its tile holds 32 sums per lane)
constexpr int kGateUpListCap = 256;    // pairs of one expert collected at a time
constexpr int kDownWarps = 16;
constexpr int kDownBatchPairs = 256;   // (token, expert) pairs per down block
constexpr int kDownMaxPartials = 512;  // ksplit x batch pairs (16 floats each in shared memory)
// fp8 weights (e4m3 with one f32 scale per 128 x 128 block): 64-column steps of 16 bytes per lane
// and row, two per scale block; warp slices are whole scale blocks.
constexpr int kFp8Block = 128;
constexpr int kFp8StepCols = 64;
constexpr int kFp8StepsPerBlock = kFp8Block / kFp8StepCols;
// Quantized activations: a warp's stage holds one group's codes, [8 * NT tokens][kStageRow] (the
// group's 256 columns, then 64 bytes so that rows g and g + 1 fall in other banks), then the
// group's scales [2 blocks][16 tokens].
constexpr int kGroupCols = kUnroll * kFp8StepCols;
constexpr int kStageRow = kGroupCols + 64;
constexpr int stage_bytes(int nt) { return 8 * nt * kStageRow + 2 * kMaxTilePairs * 4; }
// Launch-overlap choices, in one place so that they can be compared on the GPU (see the
// header): each kernel launched as a programmatic dependent of the kernel before it. (The down
// kernel's L2 prefetch of its rows is a run-time switch, ExpertArgs::prefetch_down, so that one
// binary can time both.)
constexpr bool kProgrammaticGateUp = true;
constexpr bool kProgrammaticDown = true;
// gate_up's blocks of shared-expert items ask L2 for their rows before waiting for the router.
constexpr bool kPrefetchSharedRows = true;

struct ExpertArgs {
  const void* x;
  const float* weights;
  const int32_t* ids;
  const void* gate_up;
  const void* down;
  const float* gate_up_scale;  // fp8: [E, 2I / 128, H / 128]; null for 16-bit weights
  const float* down_scale;     // fp8: [E, H / 128, I / 128]
  // The shared experts (shared > 0): one MLP [2S, H] / [H, S] (fp8: [2S / 128, H / 128] and
  // [H / 128, S / 128] scales), S = shared * I, taken as `shared` experts of width I that every
  // token uses with weight 1. They are expert ids E .. E + shared - 1 here; the pair of token t
  // and shared expert j is tokens * k + t * shared + j (its workspace row).
  const void* shared_gate_up;
  const void* shared_down;
  const float* shared_gate_up_scale;
  const float* shared_down_scale;
  const void* residual;  // null, or out = residual + moe
  float* workspace;  // the h rows, stored as T ([pairs, I] of T in the f32 buffer's first half)
  void* out;
  int64_t x_stride, out_stride, residual_stride;
  int shared;
  int64_t tokens;
  int hidden, inter, experts, k;
  int bitmap_words;   // (experts + 31) / 32
  int gate_up_slots;  // min(tokens * k, experts): the most routed experts a routing can use
  int batch_tokens;   // down: tokens per block
  int ksplit;         // down: slices of I per expert
  bool prefetch_down; // the down rows' L2 prefetch before gate_up ends: BRAID_MOE_DOWN_PREFETCH=1
  bool early_down;    // down's first weight loads before its wait for h (LateWait); BRAID_MOE_DOWN_EARLY=0 turns it off
  // fp8 weights: the activations quantized (the header); each warp then has a stage of
  // stage_bytes(NT) at the start of the dynamic shared memory (warp_stage_bytes).
  bool quantized;
  // The one-launch path at one token (moe_one_token_kernel): the grid's counter, the gate_up
  // items each block takes and its ring's slots.
  unsigned int* barrier;
  int items_per_block;
  int ring_slots;
};

// A warp's stage in the dynamic shared memory: stage_bytes(NT) when quantized, else none.
template <int NT>
__host__ __device__ __forceinline__ int warp_stage_bytes(const ExpertArgs& a) {
  return a.quantized ? stage_bytes(NT) : 0;
}

// The h rows in the workspace, as T: gate_up rounds h to T anyway, and the down kernel feeds T to
// the mma, so storing T (in the f32 buffer's first half) halves h's bytes and saves the down
// kernel a conversion per element.
template <typename T>
__device__ __forceinline__ T* h_store(const ExpertArgs& a) {
  return reinterpret_cast<T*>(a.workspace);
}

// The down kernel's wait for gate_up (for h, and for out when it is x), taken by each thread
// once and as late as it can be: after the first group of weight loads of its first tile is
// issued (weights are constant, so the contract in pdl.cuh lets them be read before the wait; h
// may not be). The down rows then come from DRAM during gate_up's tail instead of after it, in
// the warp's registers (an L2 prefetch was slower: docs/perf/decode.md, attempt 9). Constructed
// with `pending` false it does nothing: gate_up's tiles, whose rows depend on the routing it
// waits for first, and the down kernel launched the ordinary way.
struct LateWait {
  bool pending;
  __device__ __forceinline__ void pass() {
    if (pending) {
      pdl::wait_then_release();
      pending = false;
    }
  }
};

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

// ---- loads -----------------------------------------------------------------------------------

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

// 16 bytes of weights, read once: not kept in L1, first to leave L2, 256-byte L2 prefetch.
// Predicated off (zeros, no access) when !pred.
__device__ __forceinline__ uint4 stream16(const void* p, bool pred, uint64_t policy) {
  uint4 v;
  asm(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
      " @p ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %6;\n}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)), "l"(policy));
  return v;
}

// 16 bytes of activations (x, or h): read by every warp of the block, so through L1. A plain
// (coherent) load: h was written by the previous grid, which the down kernel may overlap.
__device__ __forceinline__ uint4 cached16(const void* p, bool pred) {
  uint4 v;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
      " @p ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)));
  return v;
}

// 16 bytes of a tile staged in shared memory (the one-launch path's down rows); zeros when !pred.
__device__ __forceinline__ uint4 shared16(const void* p, bool pred) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (pred)
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(hopper::smem_u32(p)));
  return v;
}

// 16 bytes through L2, never a possibly stale L1 line: written by another block of this kernel
// (the one-launch path's h); zeros when !pred.
__device__ __forceinline__ uint4 l2_16(const void* p, bool pred) {
  uint4 v;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
      " @p ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)));
  return v;
}

// Where a tile's 16-byte loads come from: its weights (w) and its activations (act).
struct FromDram {  // both kernels: weights streamed from DRAM, x or h (from the grid before) via L1
  static __device__ __forceinline__ uint4 w(const void* p, bool pred, uint64_t policy) {
    return stream16(p, pred, policy);
  }
  static __device__ __forceinline__ uint4 act(const void* p, bool pred) { return cached16(p, pred); }
};
struct FromStage {  // the one-launch path's down: rows in shared memory, h from this grid via L2
  static __device__ __forceinline__ uint4 w(const void* p, bool pred, uint64_t) {
    return shared16(p, pred);
  }
  static __device__ __forceinline__ uint4 act(const void* p, bool pred) { return l2_16(p, pred); }
};

template <typename T>
__device__ __forceinline__ uint32_t bits16(T v) {
  if constexpr (std::is_same_v<T, __half>)
    return __half_as_ushort(v);
  else
    return __bfloat16_as_ushort(v);
}

// Two floats as a packed pair of T (lo in the low half). Exact for h, which is T-rounded.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// Elements [c, c + 8) of a 16-bit row, zeros past `limit` or when !pred. kVec: one 16-byte load
// (c a multiple of 8 and the row 16-byte aligned, so a chunk is all in or all out).
template <typename T, bool kVec, bool kStream, class Src = FromDram>
__device__ __forceinline__ uint4 load8(const T* row, int c, int limit, bool pred, uint64_t policy) {
  if constexpr (kVec) {
    return kStream ? Src::w(row + c, pred, policy) : Src::act(row + c, pred);
  } else {
    uint32_t e[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = pred && c + i < limit ? bits16(row[c + i]) : 0u;
    return make_uint4(e[0] | e[1] << 16, e[2] | e[3] << 16, e[4] | e[5] << 16, e[6] | e[7] << 16);
  }
}

// Elements [c, c + 4) of an f32 row.
template <bool kVec, bool kStream>
__device__ __forceinline__ float4 load4(const float* row, int c, int limit, bool pred,
                                        uint64_t policy) {
  if constexpr (kVec) {
    const uint4 v = kStream ? stream16(row + c, pred, policy) : cached16(row + c, pred);
    return make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z),
                       __uint_as_float(v.w));
  } else {
    float f[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) f[i] = pred && c + i < limit ? row[c + i] : 0.0f;
    return make_float4(f[0], f[1], f[2], f[3]);
  }
}

// 16 fp8 weights [c, c + 16) of a row, streamed as stream16 (kVec: 16-byte aligned), or byte by
// byte. Zeros when !pred (a step is all in or all out: slices are whole 128-column blocks).
template <bool kVec, class Src = FromDram>
__device__ __forceinline__ uint4 load16_fp8(const uint8_t* row, int c, bool pred, uint64_t policy) {
  if constexpr (kVec) {
    return Src::w(row + c, pred, policy);
  } else {
    uint32_t w[4] = {0u, 0u, 0u, 0u};
    if (pred)
#pragma unroll
      for (int i = 0; i < 16; ++i) w[i / 4] |= static_cast<uint32_t>(row[c + i]) << (8 * (i % 4));
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// ---- one warp's tile: C[16 rows][8 * NT tokens] = A[16 rows][k0, k1) . B[tokens][k0, k1)^T ----
//
// A's row g is a_lo (lane g = lane / 4), row g + 8 a_hi; B's token n is b_rows[n] (shared memory,
// n < nb). On return lane (g, t = lane % 4) holds, for each n-tile nt,
//   c[nt] = {C[g][8nt + 2t], C[g][8nt + 2t + 1], C[g + 8][8nt + 2t], C[g + 8][8nt + 2t + 1]}
// (the mma accumulator layout), added to what c held (gemv_device::mma).
//
// f16/bf16 weights on the tensor cores. Lane (g, t) loads columns [c, c + 8), c = 32 s + 8 t, of
// A rows g and g + 8 and of token g (and g + 8 for the second n-tile): elements 0-3 are the first
// mma's logical k {2t, 2t+1, 2t+8, 2t+9}, elements 4-7 the second's. B is x or h (both T).
template <typename T, int NT, bool kVec, class Src = FromDram>
__device__ __forceinline__ void warp_tile_mma(const T* a_lo, bool lo_ok, const T* a_hi, bool hi_ok,
                                              const T* const* b_rows, int nb, int k0, int k1,
                                              uint64_t policy, LateWait& gate, float (&c)[NT][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const T* b[NT];
  bool b_ok[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    b_ok[nt] = g + 8 * nt < nb;
    b[nt] = b_ok[nt] ? b_rows[g + 8 * nt] : nullptr;
  }
  // Scalar loads (unaligned rows) are 8 per 16 bytes: fewer steps at once keep them in registers.
  constexpr int U = kVec ? kUnroll : 1;
  for (int base = k0; base < k1; base += U * kStepCols) {
    // The weight loads (DRAM) of all U steps first; the activations (L1/L2) step by step.
    uint4 wl[U], wh[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int col = base + u * kStepCols + t * 8;
      const bool in = col < k1;
      wl[u] = load8<T, kVec, true, Src>(a_lo, col, k1, in && lo_ok, policy);
      wh[u] = load8<T, kVec, true, Src>(a_hi, col, k1, in && hi_ok, policy);
    }
    gate.pass();
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int col = base + u * kStepCols + t * 8;
      const bool in = col < k1;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint4 xb = load8<T, kVec, false, Src>(b[nt], col, k1, in && b_ok[nt], policy);
        gemv_device::mma<T>(c[nt], wl[u].x, wh[u].x, wl[u].y, wh[u].y, xb.x, xb.y);
        gemv_device::mma<T>(c[nt], wl[u].z, wh[u].z, wl[u].w, wh[u].w, xb.z, xb.w);
      }
    }
  }
}

// f32 on the CUDA cores (tf32 would not meet f32's accuracy), same result layout: lane (g, t)
// takes columns 16 s + 4 t of rows g and g + 8 against every token, then the 4 lanes of a
// quad add up their column subsets and keep their own two tokens per n-tile.
template <int NT, bool kVec>
__device__ __forceinline__ void warp_tile_f32(const float* a_lo, bool lo_ok, const float* a_hi,
                                              bool hi_ok, const float* const* b_rows, int nb,
                                              int k0, int k1, uint64_t policy, LateWait& gate,
                                              float (&c)[NT][4]) {
  constexpr int N = 8 * NT;
  const int t = threadIdx.x & 3;
  float lo_acc[N], hi_acc[N];
#pragma unroll
  for (int n = 0; n < N; ++n) lo_acc[n] = hi_acc[n] = 0.0f;
  constexpr int U = kVec ? kUnrollF32 : 1;
  gate.pass();  // f32 loads weights and activations together: no early loads
  for (int base = k0; base < k1; base += U * 16) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int col = base + u * 16 + t * 4;
      const bool in = col < k1;
      const float4 lo = load4<kVec, true>(a_lo, col, k1, in && lo_ok, policy);
      const float4 hi = load4<kVec, true>(a_hi, col, k1, in && hi_ok, policy);
#pragma unroll
      for (int n = 0; n < N; ++n) {
        if (n < nb) {
          const float4 x = load4<kVec, false>(b_rows[n], col, k1, in, policy);
          lo_acc[n] = fmaf(lo.x, x.x, fmaf(lo.y, x.y, fmaf(lo.z, x.z, fmaf(lo.w, x.w, lo_acc[n]))));
          hi_acc[n] = fmaf(hi.x, x.x, fmaf(hi.y, x.y, fmaf(hi.z, x.z, fmaf(hi.w, x.w, hi_acc[n]))));
        }
      }
    }
  }
#pragma unroll
  for (int n = 0; n < N; ++n) {
    lo_acc[n] += __shfl_xor_sync(kFull, lo_acc[n], 1);
    lo_acc[n] += __shfl_xor_sync(kFull, lo_acc[n], 2);
    hi_acc[n] += __shfl_xor_sync(kFull, hi_acc[n], 1);
    hi_acc[n] += __shfl_xor_sync(kFull, hi_acc[n], 2);
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (t == q) {
        c[nt][0] += lo_acc[8 * nt + 2 * q];
        c[nt][1] += lo_acc[8 * nt + 2 * q + 1];
        c[nt][2] += hi_acc[8 * nt + 2 * q];
        c[nt][3] += hi_acc[8 * nt + 2 * q + 1];
      }
    }
  }
}

template <typename T, int NT, bool kVec, class Src = FromDram>
__device__ __forceinline__ void warp_tile(const T* a_lo, bool lo_ok, const T* a_hi, bool hi_ok,
                                          const T* const* b_rows, int nb, int k0, int k1,
                                          uint64_t policy, LateWait& gate, float (&c)[NT][4]) {
  if constexpr (std::is_same_v<T, float>) {
    static_assert(std::is_same_v<Src, FromDram>, "f32 tiles stream from DRAM only");
    warp_tile_f32<NT, kVec>(a_lo, lo_ok, a_hi, hi_ok, b_rows, nb, k0, k1, policy, gate, c);
  } else {
    warp_tile_mma<T, NT, kVec, Src>(a_lo, lo_ok, a_hi, hi_ok, b_rows, nb, k0, k1, policy, gate, c);
  }
}

// One group of U fp8 steps of a warp tile's two rows (lane t's 16 bytes of rows g and g + 8 at
// 64 s + 16 t, zeros past k1 or for a missing row) and their 128-column blocks' scales (0 past k1).
template <int U, bool kVec, class Src = FromDram>
__device__ __forceinline__ void load_fp8_group(const uint8_t* a_lo, bool lo_ok, const uint8_t* a_hi,
                                               bool hi_ok, const float* s_lo, const float* s_hi,
                                               int base, int k1, uint64_t policy, uint4 (&wl)[U],
                                               uint4 (&wh)[U], float (&sl)[U / kFp8StepsPerBlock],
                                               float (&sh)[U / kFp8StepsPerBlock]) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int step = base + u * kFp8StepCols;
    const bool in = step < k1;
    wl[u] = load16_fp8<kVec, Src>(a_lo, step + t * 16, in && lo_ok, policy);
    wh[u] = load16_fp8<kVec, Src>(a_hi, step + t * 16, in && hi_ok, policy);
    if (u % kFp8StepsPerBlock == 0) {
      sl[u / kFp8StepsPerBlock] = in ? __ldg(s_lo + step / kFp8Block) : 0.0f;
      sh[u / kFp8StepsPerBlock] = in ? __ldg(s_hi + step / kFp8Block) : 0.0f;
    }
  }
}

// The same tile with fp8 weights (gemv_fused.cu's fp8 arithmetic). A step is 64 columns: lane
// (g, t) loads 16 bytes (16 weights) of rows g and g + 8 at c = 64 s + 16 t, the same bytes per
// load as the 16-bit tile; each 8-column half h becomes the 8 exact values of T that a 16-bit load
// would have given (gemv_device::fp8x8_to) and goes, with the token's columns [c + 8h, c + 8h + 8),
// into the same two mmas as a 16-bit step. k0 and k1 are multiples of 128, so the two steps of a
// 128-column block sum into a zeroed `part` and c += scale * part closes the block: row g's scale
// on c[..][0..1], row g + 8's on c[..][2..3] (gate_up's tile holds gate rows and up rows, which
// lie in different 128-row blocks). s_lo / s_hi: the scale rows of rows g's and g + 8's 128-row
// blocks, indexed by 128-column block.
template <typename T, int NT, bool kVec, class Src = FromDram>
__device__ __forceinline__ void warp_tile_fp8(const uint8_t* a_lo, bool lo_ok, const uint8_t* a_hi,
                                              bool hi_ok, const float* s_lo, const float* s_hi,
                                              const T* const* b_rows, int nb, int k0, int k1,
                                              uint64_t policy, LateWait& gate, float (&c)[NT][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const T* b[NT];
  bool b_ok[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    b_ok[nt] = g + 8 * nt < nb;
    b[nt] = b_ok[nt] ? b_rows[g + 8 * nt] : nullptr;
  }
  // kUnroll steps in flight (2 scale blocks, the 16-bit tile's bytes); one block when the byte
  // loads of unaligned rows would take too many registers.
  constexpr int U = kVec ? kUnroll : kFp8StepsPerBlock;
  constexpr int kBlocks = U / kFp8StepsPerBlock;
  static_assert(U % kFp8StepsPerBlock == 0, "whole scale blocks per group of steps");
  for (int base = k0; base < k1; base += U * kFp8StepCols) {
    // The weight loads and the blocks' scales first; the activations step by step.
    uint4 wl[U], wh[U];
    float sl[kBlocks], sh[kBlocks];
    load_fp8_group<U, kVec, Src>(a_lo, lo_ok, a_hi, hi_ok, s_lo, s_hi, base, k1, policy, wl, wh, sl, sh);
    gate.pass();
#pragma unroll
    for (int blk = 0; blk < kBlocks; ++blk) {
      float part[NT][4] = {};
#pragma unroll
      for (int v = 0; v < kFp8StepsPerBlock; ++v) {
        const int u = blk * kFp8StepsPerBlock + v;
        const int col = base + u * kFp8StepCols + t * 16;
        const bool in = col < k1;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4 lo = gemv_device::fp8x8_to<T>(h == 0 ? make_uint2(wl[u].x, wl[u].y)
                                                           : make_uint2(wl[u].z, wl[u].w));
          const uint4 hi = gemv_device::fp8x8_to<T>(h == 0 ? make_uint2(wh[u].x, wh[u].y)
                                                           : make_uint2(wh[u].z, wh[u].w));
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const uint4 xb = load8<T, kVec, false, Src>(b[nt], col + 8 * h, k1, in && b_ok[nt], policy);
            gemv_device::mma<T>(part[nt], lo.x, hi.x, lo.y, hi.y, xb.x, xb.y);
            gemv_device::mma<T>(part[nt], lo.z, hi.z, lo.w, hi.w, xb.z, xb.w);
          }
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        c[nt][0] = fmaf(sl[blk], part[nt][0], c[nt][0]);
        c[nt][1] = fmaf(sl[blk], part[nt][1], c[nt][1]);
        c[nt][2] = fmaf(sh[blk], part[nt][2], c[nt][2]);
        c[nt][3] = fmaf(sh[blk], part[nt][3], c[nt][3]);
      }
    }
  }
}

// The same tile with quantized activations (the header): the weights as loaded, on the fp8
// tensor cores. Lane (g, t) loads 16 bytes of rows g and g + 8 at c = 64 s + 16 t as
// warp_tile_fp8 does; the A fragment of each m16n8k32 is 4 of those bytes per register (row g:
// x and y, then z and w; row g + 8 likewise), and the B fragment the same 16 columns of token g's
// codes from the stage, so both operands share the lane's column order. Each 128-column block's
// sums close with c += (w scale * token's scale) * part.
template <typename T, int NT, bool kVec>
__device__ __forceinline__ void warp_tile_e4m3(const uint8_t* a_lo, bool lo_ok, const uint8_t* a_hi,
                                               bool hi_ok, const float* s_lo, const float* s_hi,
                                               const T* const* b_rows, int nb, int k0, int k1,
                                               uint64_t policy, LateWait& gate, uint8_t* stage,
                                               float (&c)[NT][4]) {
  constexpr int U = kUnroll, kBlocks = U / kFp8StepsPerBlock;
  static_assert(U * kFp8StepCols == kGroupCols && kBlocks == 2, "a group is two scale blocks");
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float* stage_scale = reinterpret_cast<float*>(stage + 8 * NT * kStageRow);  // [block][token]
  bool b_ok[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) b_ok[nt] = g + 8 * nt < nb;
  for (int base = k0; base < k1; base += kGroupCols) {
    uint4 wl[U], wh[U];
    float sl[kBlocks], sh[kBlocks];
    load_fp8_group<U, kVec>(a_lo, lo_ok, a_hi, hi_ok, s_lo, s_hi, base, k1, policy, wl, wh, sl, sh);
    gate.pass();
    // The group's columns of each token, quantized into the stage while the weights are on their
    // way: token n's pass, lane l's 8 columns [base + 8 l, + 8); lanes 16 b .. 16 b + 15 are
    // scale block b (zeros and scale 1 past k1).
    const int col = base + 8 * lane;
    const bool col_in = col < k1;
#pragma unroll
    for (int n = 0; n < 8 * NT; ++n) {
      if (n < nb) {  // warp-uniform
        const uint4 v = load8<T, kVec, false>(b_rows[n], col, k1, col_in, policy);
        float amax = fp8::amax8<T>(v, 0.0f);
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, o));
        const float scale = fp8::block_scale(amax);
        *reinterpret_cast<uint2*>(stage + n * kStageRow + 8 * lane) = fp8::codes8<T>(v, scale);
        if ((lane & 15) == 0) stage_scale[(lane >> 4) * kMaxTilePairs + n] = scale;
      }
    }
    __syncwarp();
#pragma unroll
    for (int blk = 0; blk < kBlocks; ++blk) {
      if (base + blk * kFp8Block >= k1) break;  // warp-uniform: a slice's last, single block
      float part[NT][4] = {};
#pragma unroll
      for (int v = 0; v < kFp8StepsPerBlock; ++v) {
        const int u = blk * kFp8StepsPerBlock + v;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint4 xb = b_ok[nt] ? *reinterpret_cast<const uint4*>(
                                          stage + (g + 8 * nt) * kStageRow + u * kFp8StepCols + 16 * t)
                                    : make_uint4(0u, 0u, 0u, 0u);
          gemv_device::mma_e4m3(part[nt], wl[u].x, wh[u].x, wl[u].y, wh[u].y, xb.x, xb.y);
          gemv_device::mma_e4m3(part[nt], wl[u].z, wh[u].z, wl[u].w, wh[u].w, xb.z, xb.w);
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        // The two tokens of this lane's accumulator columns (0 past nb: never stored).
        const int n0 = 8 * nt + 2 * t, n1 = n0 + 1;
        const float a0 = n0 < nb ? stage_scale[blk * kMaxTilePairs + n0] : 0.0f;
        const float a1 = n1 < nb ? stage_scale[blk * kMaxTilePairs + n1] : 0.0f;
        c[nt][0] = fmaf(sl[blk] * a0, part[nt][0], c[nt][0]);
        c[nt][1] = fmaf(sl[blk] * a1, part[nt][1], c[nt][1]);
        c[nt][2] = fmaf(sh[blk] * a0, part[nt][2], c[nt][2]);
        c[nt][3] = fmaf(sh[blk] * a1, part[nt][3], c[nt][3]);
      }
    }
    __syncwarp();  // the stage is rewritten by the next group
  }
}

// ---- expert bitmaps --------------------------------------------------------------------------

// Sets bit e of `bitmap` for each valid id among ids[0, n) (the block's threads in parallel).
__device__ __forceinline__ void mark_experts(uint32_t* bitmap, const int32_t* ids, int64_t n,
                                             int experts) {
  for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
    const int e = ids[p];
    if (e >= 0 && e < experts) atomicOr(&bitmap[e >> 5], 1u << (e & 31));
  }
}

// Inclusive prefix sum over the warp's lanes.
__device__ __forceinline__ int warp_inclusive_scan(int v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// The index of the slot-th set bit of the bitmap (counting from 0 at the lowest), or -1 when
// fewer bits are set. Called by a whole warp; every lane gets the answer.
__device__ int nth_set_bit(const uint32_t* bitmap, int words, int slot) {
  const int lane = threadIdx.x & 31;
  int before = 0;
  for (int w0 = 0; w0 < words; w0 += 32) {
    const uint32_t word = w0 + lane < words ? bitmap[w0 + lane] : 0u;
    const int count = __popc(word);
    const int incl = warp_inclusive_scan(count);
    const int total = __shfl_sync(kFull, incl, 31);
    if (slot < before + total) {  // warp-uniform
      const int target = slot - before - (incl - count);
      const bool mine = target >= 0 && target < count;
      int bit = -1;
      if (mine) {
        uint32_t rest = word;
        for (int i = 0; i < target; ++i) rest &= rest - 1;
        bit = (w0 + lane) * 32 + __ffs(static_cast<int>(rest)) - 1;
      }
      return __shfl_sync(kFull, bit, __ffs(static_cast<int>(__ballot_sync(kFull, mine))) - 1);
    }
    before += total;
  }
  return -1;
}

// Writes the set bits in ascending order to list[0, n) and returns n; a whole warp calls it.
__device__ int list_set_bits(const uint32_t* bitmap, int words, int* list) {
  const int lane = threadIdx.x & 31;
  int before = 0;
  for (int w0 = 0; w0 < words; w0 += 32) {
    uint32_t word = w0 + lane < words ? bitmap[w0 + lane] : 0u;
    const int count = __popc(word);
    const int incl = warp_inclusive_scan(count);
    int at = before + incl - count;
    while (word) {
      list[at++] = (w0 + lane) * 32 + __ffs(static_cast<int>(word)) - 1;
      word &= word - 1;
    }
    before += __shfl_sync(kFull, incl, 31);
  }
  return before;
}

__device__ __forceinline__ int popc_below_lane(unsigned mask) {
  return __popc(mask & ((1u << (threadIdx.x & 31)) - 1u));
}

// ---- where an expert's rows are: routed e < E, shared E + j -----------------------------------

// The token of pair p (the routed pairs t * k + j first, then the shared ones).
__device__ __forceinline__ int64_t token_of_pair(const ExpertArgs& a, int64_t p) {
  const int64_t routed = a.tokens * a.k;
  return p < routed ? p / a.k : (p - routed) / a.shared;
}

// Expert e's gate row i and up row i: their indices in the matrix `base` (H wide) and that
// matrix's block scales (fp8).
template <typename W>
struct GateUpRows {
  const W* base;
  const float* scale;
  int64_t gate, up;
};
template <typename W>
__device__ __forceinline__ GateUpRows<W> gate_up_rows(const ExpertArgs& a, int e, int i) {
  if (e < a.experts) {
    const int64_t r = static_cast<int64_t>(e) * 2 * a.inter + i;
    return {static_cast<const W*>(a.gate_up), a.gate_up_scale, r, r + a.inter};
  }
  const int64_t j = e - a.experts, width = static_cast<int64_t>(a.shared) * a.inter;
  return {static_cast<const W*>(a.shared_gate_up), a.shared_gate_up_scale, j * a.inter + i,
          width + j * a.inter + i};
}

// Expert e's down row n (I wide), and its scales by 128-column block (fp8: row n's 128-row block).
template <typename W>
__device__ __forceinline__ const W* down_row(const ExpertArgs& a, int e, int n) {
  if (e < a.experts)
    return static_cast<const W*>(a.down) + (static_cast<int64_t>(e) * a.hidden + n) * a.inter;
  const int64_t j = e - a.experts, width = static_cast<int64_t>(a.shared) * a.inter;
  return static_cast<const W*>(a.shared_down) + n * width + j * a.inter;
}
__device__ __forceinline__ const float* down_scale_row(const ExpertArgs& a, int e, int n) {
  const int ib = a.inter / kFp8Block;
  if (e < a.experts)
    return a.down_scale + (static_cast<int64_t>(e) * (a.hidden / kFp8Block) + n / kFp8Block) * ib;
  const int64_t j = e - a.experts;
  return a.shared_down_scale + static_cast<int64_t>(n / kFp8Block) * a.shared * ib + j * ib;
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

// v rounded to T, as a float (the identity for f32).
template <typename T>
__device__ __forceinline__ float rounded(float v) {
  return to_float(from_float<T>(v));
}

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

// ---- one launch for the whole layer at one token (fp8 experts) ---------------------------------
//
// At one token the two kernels above each pay a ramp and a drain: gate_up's warps take two
// dependent round trips for their 8 KB, and the down kernel's blocks start only as gate_up's leave
// their SMs, so its stream follows gate_up's (Qwen3-30B-A3B-FP8: 15.6 + 11.0 us a layer for 37.8 MB,
// 1.4 TB/s; docs/perf/decode.md). Here one block per 16 rows of H (at most one an SM, all
// resident) asks for nearly all of its bytes at once, through bulk copies into shared memory:
//   - its share of the gate_up items (8 intermediate rows of one expert: 8 gate rows and 8 up
//     rows, contiguous items per block, so every SM streams the same bytes) through a ring of R
//     item slots, each refilled with the item R places on as soon as its group has read it;
//   - its 16 down rows of every chosen expert, in a stage of their own.
// Four groups of four warps compute the items from shared memory with the gate_up kernel's warp
// slices, sums and roundings (the same h bits), the blocks meet at a grid-wide counter, and each
// block runs the down kernel's items and combine over its staged rows (the same sums in the same
// order: out is bit for bit the two kernels'). The counter is the caller's
// (MoeExpertsExtras::barrier), zero at the call and left zero.
constexpr int kOneTokenGroups = kDownWarps / kGateUpWarps;  // gate_up items side by side
constexpr int kOneTokenMaxSlots = 32;   // routed + shared experts: warp 0 lists them in one pass
constexpr int kOneTokenMaxRing = 8;     // gate_up item slots
// A counter not reached after this many clock cycles (~10 s) means a block never became
// resident: trap with an error rather than hang the GPU (as gemv_chain does).
constexpr long long kOneTokenSpinLimit = 20'000'000'000LL;

// A staged row's pitch: its bytes, padded so that rows g and g + 1 fall 64 bytes apart modulo
// 128 (a quarter-warp's 16-byte loads of two rows then take distinct banks).
__host__ __device__ inline int one_token_pitch(int row_bytes) {
  return row_bytes + (64 - row_bytes % 128 + 128) % 128;
}

// Shared memory, in order: the down stage [slots][16][down pitch], the ring [R][16][gate_up pitch],
// the down partials [ksplit][slots][16] and the groups' gate_up partials [groups][4 warps][16].
struct OneTokenLayout {
  size_t down, ring, partials;  // offsets
  size_t bytes;                 // in all
};
__host__ __device__ inline OneTokenLayout one_token_layout(int slots, int hidden, int inter,
                                                           int ksplit, int ring) {
  OneTokenLayout l;
  l.down = 0;
  l.ring = l.down + static_cast<size_t>(slots) * kTileRows * one_token_pitch(inter);
  l.partials = l.ring + static_cast<size_t>(ring) * kTileRows * one_token_pitch(hidden);
  l.bytes = l.partials + (static_cast<size_t>(ksplit) * slots + kOneTokenGroups * kGateUpWarps) *
                             kTileRows * sizeof(float);
  return l;
}

// The expert of slot s (s < k: the token's j-th choice, then the shared experts), or -1 for a
// routed id outside [0, E) (it contributes nothing).
__device__ __forceinline__ int one_token_expert(const ExpertArgs& a, int s) {
  if (s >= a.k) return a.experts + (s - a.k);
  const int e = a.ids[s];
  return e >= 0 && e < a.experts ? e : -1;
}

// Copies gate_up item `item` (chunk = item / slots, slot = item % slots) into ring slot `dst`: its
// 8 gate rows to rows 0-7, its 8 up rows to rows 8-15, completing on `bar` (an expert of -1
// copies nothing, but the barrier's phase still completes). One thread.
__device__ __forceinline__ void copy_gate_up_item(const ExpertArgs& a, int64_t item, int slots,
                                                  uint8_t* dst, int pitch, uint32_t bar) {
  const int chunk = static_cast<int>(item / slots), e = one_token_expert(a, static_cast<int>(item % slots));
  const int i0 = chunk * kGateUpRows, rows = e < 0 ? 0 : min(kGateUpRows, a.inter - i0);
  hopper::mbar_arrive_expect_tx(bar, 2u * rows * a.hidden);
  for (int r = 0; r < rows; ++r) {
    const GateUpRows<uint8_t> t = gate_up_rows<uint8_t>(a, e, i0 + r);
    hopper::bulk_copy(hopper::smem_u32(dst + r * pitch), t.base + t.gate * a.hidden, a.hidden, bar);
    hopper::bulk_copy(hopper::smem_u32(dst + (r + kGateUpRows) * pitch), t.base + t.up * a.hidden,
                      a.hidden, bar);
  }
}

// Shared-memory weights, activations (x) through L1: the one-token kernel's gate_up items.
struct FromStageX {
  static __device__ __forceinline__ uint4 w(const void* p, bool pred, uint64_t) {
    return shared16(p, pred);
  }
  static __device__ __forceinline__ uint4 act(const void* p, bool pred) { return cached16(p, pred); }
};

template <typename T>
__global__ void __launch_bounds__(kDownWarps * 32, 1) moe_one_token_kernel(const ExpertArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // cp.async.bulk and transaction barriers: the host takes this path on 9.0+ only
#else
  extern __shared__ __align__(128) uint8_t dyn[];
  __shared__ __align__(8) uint64_t staged;                // the down rows
  __shared__ __align__(8) uint64_t full[kOneTokenMaxRing];  // the ring's slots
  __shared__ const T* act_rows[kDownWarps];  // per warp: the tile's one activation row (x or h)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int slots = a.k + a.shared, ring = a.ring_slots;
  const int n0 = blockIdx.x * kTileRows, rows = min(kTileRows, a.hidden - n0);
  const int down_pitch = one_token_pitch(a.inter), ring_pitch = one_token_pitch(a.hidden);
  const OneTokenLayout layout = one_token_layout(slots, a.hidden, a.inter, a.ksplit, ring);
  uint8_t* down_stage = dyn + layout.down;
  uint8_t* ring_stage = dyn + layout.ring;
  float* down_partial = reinterpret_cast<float*>(dyn + layout.partials);
  float* gate_partial = down_partial + a.ksplit * slots * kTileRows;
  const size_t ring_slot_bytes = static_cast<size_t>(kTileRows) * ring_pitch;
  // This block's gate_up items: [first, first + mine), the i-th in ring slot i % ring.
  const int chunks = (a.inter + kGateUpRows - 1) / kGateUpRows;
  const int64_t items = static_cast<int64_t>(chunks) * slots;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * a.items_per_block;
  const int64_t left = items - first;
  const int mine = left <= 0 ? 0 : static_cast<int>(left < a.items_per_block ? left : a.items_per_block);
  const uint64_t policy = evict_first_policy();

  if (tid == 0) {
    hopper::mbar_init(hopper::smem_u32(&staged), 1);
    for (int s = 0; s < ring; ++s) hopper::mbar_init(hopper::smem_u32(&full[s]), 1);
    hopper::fence_mbarrier_init();
  }
  // The router's ids and x come from the kernels before: nothing global is touched before this.
  if constexpr (kProgrammaticGateUp) pdl::wait();
  __syncthreads();  // the barriers' initialisation
  if (tid == 0)  // the ring's first items, first: gate_up is the longer chain
    for (int i = 0; i < min(ring, mine); ++i)
      copy_gate_up_item(a, first + i, slots, ring_stage + i * ring_slot_bytes, ring_pitch,
                        hopper::smem_u32(&full[i]));
  if (warp == 1) {  // the down rows of every chosen expert
    const uint32_t bar = hopper::smem_u32(&staged);
    const int e = lane < slots ? one_token_expert(a, lane) : -1;
    const unsigned valid = __ballot_sync(kFull, e >= 0);
    if (lane == 0) hopper::mbar_arrive_expect_tx(bar, __popc(valid) * rows * a.inter);
    __syncwarp();  // the bytes announced before any copy lands
    for (int r = 0; r < rows && e >= 0; ++r)
      hopper::bulk_copy(hopper::smem_u32(down_stage + (lane * kTileRows + r) * down_pitch),
                        down_row<uint8_t>(a, e, n0 + r), a.inter, bar);
  }

  // gate_up: group grp's four warps take the block's items grp, grp + 4, ... from the ring, with
  // the gate_up kernel's warp slices of H, partial sums and roundings.
  {
    const int grp = warp / kGateUpWarps, w4 = warp % kGateUpWarps;
    const int units = a.hidden / kFp8Block;
    const int slice = (units + kGateUpWarps - 1) / kGateUpWarps * kFp8Block;
    const int k0 = min(a.hidden, w4 * slice), k1 = min(a.hidden, k0 + slice);
    const int hb = a.hidden / kFp8Block;
    float* partial = gate_partial + grp * kGateUpWarps * kTileRows;  // [w4][16 rows]
    if (lane == 0) act_rows[warp] = static_cast<const T*>(a.x);
    __syncwarp();
    for (int i = grp; i < mine; i += kOneTokenGroups) {
      const int64_t item = first + i;
      const int chunk = static_cast<int>(item / slots), slot = static_cast<int>(item % slots);
      const int e = one_token_expert(a, slot);
      uint8_t* held = ring_stage + (i % ring) * ring_slot_bytes;
      hopper::mbar_wait(hopper::smem_u32(&full[i % ring]), (i / ring) & 1);
      const int i0 = chunk * kGateUpRows;
      if (e >= 0) {  // group-uniform
        const bool row_ok = i0 + g < a.inter;
        const GateUpRows<uint8_t> tile = gate_up_rows<uint8_t>(a, e, i0 + g);
        float c[1][4] = {};
        LateWait waited{false};
        warp_tile_fp8<T, 1, true, FromStageX>(held + g * ring_pitch, row_ok,
                                              held + (g + kGateUpRows) * ring_pitch, row_ok,
                                              tile.scale + tile.gate / kFp8Block * hb,
                                              tile.scale + tile.up / kFp8Block * hb,
                                              &act_rows[warp], 1, k0, k1, policy, waited, c);
        if (t == 0) {  // token 0's column: rows g (gate) and g + 8 (up)
          partial[w4 * kTileRows + g] = c[0][0];
          partial[w4 * kTileRows + g + 8] = c[0][2];
        }
      }
      hopper::named_sync(1 + grp, kGateUpWarps * 32);  // the slot read, the partials written
      if (w4 == 1 && lane == 0 && i + ring < mine) {
        // The slot's next item (ring places on). Its reads were generic-proxy loads ordered
        // before the barrier above; the bulk copy writes through the async proxy.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        copy_gate_up_item(a, first + i + ring, slots, held, ring_pitch,
                          hopper::smem_u32(&full[i % ring]));
      }
      if (e >= 0 && w4 == 0 && lane < kGateUpRows && i0 + lane < a.inter) {
        float gs = 0.0f, us = 0.0f;
#pragma unroll
        for (int w = 0; w < kGateUpWarps; ++w) {
          gs += partial[w * kTileRows + lane];
          us += partial[w * kTileRows + lane + 8];
        }
        const float gr = to_float(from_float<T>(gs));
        const float ur = to_float(from_float<T>(us));
        h_store<T>(a)[static_cast<int64_t>(slot) * a.inter + i0 + lane] =
            from_float<T>(gr / (1.0f + expf(-gr)) * ur);
      }
      hopper::named_sync(1 + grp, kGateUpWarps * 32);  // partial is rewritten next
    }
  }

  // Every block's h rows stored: meet at the counter (release, then acquire).
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    atomicAdd(a.barrier, 1u);
    const long long start = clock64();
    while (hopper::load_acquire(a.barrier) < gridDim.x)
      if (clock64() - start > kOneTokenSpinLimit) __trap();
  }
  __syncthreads();
  // Every block is resident and past its wait: the next kernel may take SMs as they free.
  if constexpr (kProgrammaticDown) pdl::launch_dependents();
  // A second arrival per block; the last one resets the counter for the next call (every block
  // has read it by then: values in [G, 2G) pass the poll above).
  if (tid == 0 && atomicAdd(a.barrier, 1u) == 2 * gridDim.x - 1) atomicExch(a.barrier, 0u);

  // down: warp items (slot, slice of I) from the staged rows, h through L2.
  hopper::mbar_wait(hopper::smem_u32(&staged), 0);
  {
    const int units = a.inter / kFp8Block;
    const int slice = (units + a.ksplit - 1) / a.ksplit * kFp8Block;
    for (int item = warp; item < slots * a.ksplit; item += kDownWarps) {
      const int slot = item / a.ksplit, part = item % a.ksplit;
      const int e = one_token_expert(a, slot);
      if (e < 0) continue;  // warp-uniform
      const int k0 = min(a.inter, part * slice), k1 = min(a.inter, k0 + slice);
      const uint8_t* lo_row = down_stage + (slot * kTileRows + g) * down_pitch;
      const uint8_t* hi_row = down_stage + (slot * kTileRows + g + 8) * down_pitch;
      if (lane == 0) act_rows[warp] = h_store<T>(a) + static_cast<int64_t>(slot) * a.inter;
      __syncwarp();
      float c[1][4] = {};
      LateWait waited{false};
      const float* row_scale = down_scale_row(a, e, n0);
      warp_tile_fp8<T, 1, true, FromStage>(lo_row, g < rows, hi_row, g + 8 < rows, row_scale,
                                           row_scale, &act_rows[warp], 1, k0, k1, policy, waited, c);
      if (t == 0) {
        float* y = down_partial + (part * slots + slot) * kTileRows;
        y[g] = c[0][0];
        y[g + 8] = c[0][2];
      }
      __syncwarp();  // act_rows is rewritten next
    }
  }
  __syncthreads();

  // The down kernel's combine at one token: routed pairs in j order, then the shared experts and
  // the residual, each rounded as the op's contract says.
  if (tid < rows) {
    const int r = tid;
    float acc = 0.0f;
    for (int j = 0; j < a.k; ++j) {
      if (one_token_expert(a, j) < 0) continue;
      float y = 0.0f;
      for (int s = 0; s < a.ksplit; ++s) y += down_partial[(s * slots + j) * kTileRows + r];
      acc = fmaf(a.weights[j], y, acc);
    }
    if (a.shared > 0) {
      float sh = 0.0f;
      for (int j = a.k; j < slots; ++j)
        for (int s = 0; s < a.ksplit; ++s) sh += down_partial[(s * slots + j) * kTileRows + r];
      acc = rounded<T>(rounded<T>(acc) + rounded<T>(sh));
    }
    if (a.residual) acc = to_float(static_cast<const T*>(a.residual)[n0 + r]) + rounded<T>(acc);
    static_cast<T*>(a.out)[n0 + r] = from_float<T>(acc);
  }
#endif
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

// BRAID_MOE_ONE_TOKEN=0 keeps one-token layers on the two kernels (to compare them on the GPU).
bool one_token_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("BRAID_MOE_ONE_TOKEN");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// The one-launch path for these arguments: sets a.items_per_block and a.ring_slots and returns
// its dynamic shared memory, or returns 0 where it does not apply. It takes one token, fp8
// experts with 16-bit activations, aligned rows, exact products, the caller's counter, a grid of
// at most one block per SM (every block resident: they wait on each other) and a block's staged
// down rows and at least one gate_up item slot within what an SM offers.
size_t one_token_plan(ExpertArgs& a, bool fp8, DType dtype, bool vec) {
  if (!one_token_enabled() || a.barrier == nullptr || a.tokens != 1 || !fp8 || !vec ||
      a.quantized || (dtype != DType::f16 && dtype != DType::bf16) || !device_is_sm90_or_later())
    return 0;
  const int slots = a.k + a.shared;
  const int blocks = (a.hidden + kTileRows - 1) / kTileRows;
  if (slots > kOneTokenMaxSlots || blocks > sm_count()) return 0;
  const int64_t items = static_cast<int64_t>((a.inter + kGateUpRows - 1) / kGateUpRows) * slots;
  a.items_per_block = static_cast<int>((items + blocks - 1) / blocks);
  constexpr size_t kStatic = 1024;  // the kernel's own barriers and row pointers, with room
  const size_t limit = static_cast<size_t>(smem_optin_limit()) - kStatic;
  for (int ring = std::min(kOneTokenMaxRing, a.items_per_block); ring >= 1; --ring) {
    const size_t bytes = one_token_layout(slots, a.hidden, a.inter, a.ksplit, ring).bytes;
    if (bytes <= limit) {
      a.ring_slots = ring;
      return bytes;
    }
  }
  return 0;
}

template <typename T>
void launch_one_token(const ExpertArgs& a, size_t smem, cudaStream_t s) {
  const auto kernel = moe_one_token_kernel<T>;
  // Opted in once per device, for the most any call may ask (opt_in keeps the first value).
  opt_in(kernel, smem_optin_limit() - 1024);
  const unsigned grid = static_cast<unsigned>((a.hidden + kTileRows - 1) / kTileRows);
  launch_dependent_if(kProgrammaticGateUp && programmatic_launch_enabled(), kernel, dim3(grid),
                      dim3(kDownWarps * 32), smem, s, a);
  BRAID_CUDA_CHECK_LAUNCH();
}

// The kernels' arguments and choices for one call: both kernels' launch shape, or the one-launch
// path's shared memory (one_token_smem != 0).
struct Plan {
  ExpertArgs a;
  bool vec_h, vec_i, two_tiles;
  size_t one_token_smem;
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
  a.barrier = static_cast<unsigned int*>(extras.barrier.data);
  plan.one_token_smem = one_token_plan(a, fp8, x.dtype, plan.vec_h && plan.vec_i);
  return plan;
}

}  // namespace

bool moe_experts_takes_one_launch(const Tensor& x, const Tensor& topk_weights,
                                  const Tensor& topk_ids, const Tensor& gate_up, const Tensor& down,
                                  const Tensor& gate_up_scale, const Tensor& down_scale,
                                  const ops::MoeExpertsExtras& extras, const Tensor& workspace,
                                  const Tensor& out) {
  return plan_for(x, topk_weights, topk_ids, gate_up, down, gate_up_scale, down_scale, extras,
                  workspace, out)
             .one_token_smem != 0;
}

void moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                 const Tensor& gate_up, const Tensor& down, const Tensor& gate_up_scale,
                 const Tensor& down_scale, const ops::MoeExpertsExtras& extras,
                 const Tensor& workspace, const Tensor& out, Stream stream) {
  const Plan plan = plan_for(x, topk_weights, topk_ids, gate_up, down, gate_up_scale, down_scale,
                             extras, workspace, out);
  const ExpertArgs& a = plan.a;
  const bool vec_h = plan.vec_h, vec_i = plan.vec_i, fp8 = gate_up.dtype == DType::f8e4m3;
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (plan.one_token_smem != 0) {
    if (x.dtype == DType::bf16)
      launch_one_token<__nv_bfloat16>(a, plan.one_token_smem, s);
    else
      launch_one_token<__half>(a, plan.one_token_smem, s);
    return;
  }
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
