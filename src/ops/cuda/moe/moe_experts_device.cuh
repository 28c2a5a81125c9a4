// The device side of moe_experts' two kernels (moe_experts.cu: gate_up and down, at any batch):
// their arguments, the 16-byte loads, one warp's tile of weights times activations (16-bit and
// fp8 weights on the tensor cores, fp8 with quantized activations, f32 on the CUDA cores), the
// expert bitmaps, and where an expert's rows are. moe_experts.cu's header says why the kernels
// are shaped as they are.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "braid/tensor.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemv/gemv_device.cuh"
#include "ops/cuda/moe/fp8_codes.cuh"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda::moe_experts_device {

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
  // fp8 weights: the activations quantized (moe_experts.cu's header); each warp then has a stage of
  // stage_bytes(NT) at the start of the dynamic shared memory (warp_stage_bytes).
  bool quantized;
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

template <typename T>
__device__ __forceinline__ uint32_t bits16(T v) {
  if constexpr (std::is_same_v<T, __half>)
    return __half_as_ushort(v);
  else
    return __bfloat16_as_ushort(v);
}

// Elements [c, c + 8) of a 16-bit row, zeros past `limit` or when !pred. kVec: one 16-byte load
// (c a multiple of 8 and the row 16-byte aligned, so a chunk is all in or all out).
template <typename T, bool kVec, bool kStream>
__device__ __forceinline__ uint4 load8(const T* row, int c, int limit, bool pred, uint64_t policy) {
  if constexpr (kVec) {
    return kStream ? stream16(row + c, pred, policy) : cached16(row + c, pred);
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
template <bool kVec>
__device__ __forceinline__ uint4 load16_fp8(const uint8_t* row, int c, bool pred, uint64_t policy) {
  if constexpr (kVec) {
    return stream16(row + c, pred, policy);
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
template <typename T, int NT, bool kVec>
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
      wl[u] = load8<T, kVec, true>(a_lo, col, k1, in && lo_ok, policy);
      wh[u] = load8<T, kVec, true>(a_hi, col, k1, in && hi_ok, policy);
    }
    gate.pass();
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int col = base + u * kStepCols + t * 8;
      const bool in = col < k1;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint4 xb = load8<T, kVec, false>(b[nt], col, k1, in && b_ok[nt], policy);
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

template <typename T, int NT, bool kVec>
__device__ __forceinline__ void warp_tile(const T* a_lo, bool lo_ok, const T* a_hi, bool hi_ok,
                                          const T* const* b_rows, int nb, int k0, int k1,
                                          uint64_t policy, LateWait& gate, float (&c)[NT][4]) {
  if constexpr (std::is_same_v<T, float>) {
    warp_tile_f32<NT, kVec>(a_lo, lo_ok, a_hi, hi_ok, b_rows, nb, k0, k1, policy, gate, c);
  } else {
    warp_tile_mma<T, NT, kVec>(a_lo, lo_ok, a_hi, hi_ok, b_rows, nb, k0, k1, policy, gate, c);
  }
}

// One group of U fp8 steps of a warp tile's two rows (lane t's 16 bytes of rows g and g + 8 at
// 64 s + 16 t, zeros past k1 or for a missing row) and their 128-column blocks' scales (0 past k1).
template <int U, bool kVec>
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
    wl[u] = load16_fp8<kVec>(a_lo, step + t * 16, in && lo_ok, policy);
    wh[u] = load16_fp8<kVec>(a_hi, step + t * 16, in && hi_ok, policy);
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
template <typename T, int NT, bool kVec>
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
    load_fp8_group<U, kVec>(a_lo, lo_ok, a_hi, hi_ok, s_lo, s_hi, base, k1, policy, wl, wh, sl, sh);
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
            const uint4 xb = load8<T, kVec, false>(b[nt], col + 8 * h, k1, in && b_ok[nt], policy);
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

// The same tile with quantized activations (moe_experts.cu's header): the weights as loaded, on the fp8
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
__device__ inline int nth_set_bit(const uint32_t* bitmap, int words, int slot) {
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
__device__ inline int list_set_bits(const uint32_t* bitmap, int words, int* list) {
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

// v rounded to T, as a float (the identity for f32).
template <typename T>
__device__ __forceinline__ float rounded(float v) {
  return to_float(from_float<T>(v));
}

}  // namespace braid::cuda::moe_experts_device
