// The FP8 block-scale grouped GEMM on Hopper (moe_grouped_gemm_fp8 in ops.h). Same skeleton as
// the bf16 kernel (grouped_gemm_sm90.cuh): a TMA producer warpgroup feeding a ring of kStages
// buffers, two consumer warpgroups of 64 rows each, persistent blocks over the tiles of
// tile_schedule.cuh. What differs:
//   - fp8 e4m3 operands, wgmma m64n128k32; a slice is 128 deep (128 bytes, one swizzle line),
//     which is also the block of the scales;
//   - the block scales: each slice's products go into a scratch accumulator (`part`), which is
//     then added to the tile's fp32 accumulator times (x scale of the row) x (w scale of the
//     block). Besides applying the scales, this keeps the tensor cores' own accumulation (which
//     on Hopper keeps fewer bits than fp32 for fp8) to 128 products;
//   - the tile is 128 rows x 256 weight rows, run as two halves of 128 weight rows, one after the
//     other, through the same 64-register scratch (two scratch sets and the 128 accumulators
//     would not fit in 255 registers). The other consumer warpgroup keeps the tensor cores busy
//     while one adds its scratch in (making the two take turns with named barriers, ping-pong,
//     measured no faster: docs/perf/moe.md);
//   - x may hold R terms of one operand side by side in K (moe_fp8_quantize's layout). The
//     slices take the terms innermost: the R slices that share a weight slice run one
//     after the other, so the repeats come from L2 and w crosses DRAM once (with few tokens, w
//     is all the traffic: term-major order read it R times);
//   - epilogues: plain fp32 or bf16; SwiGLU (half 0 = 128 gate rows, half 1 = the 128 matching up
//     rows) to fp32; or SwiGLU quantized to fp8 terms: a row's 128 outputs of the tile are one
//     scale block and sit in the four threads of a quad, so the block maximum takes two shuffles.
#pragma once

#include <cuda.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "braid/ops.h"
#include "core/cuda_check.h"
#include "ops/check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/hopper.cuh"
#include "ops/cuda/launch_util.h"
#include "ops/cuda/moe/fp8_codes.cuh"
#include "ops/cuda/moe/slice_ring.cuh"
#include "ops/cuda/moe/tile_schedule.cuh"
#include "ops/cuda/tma_map.h"
#include "ops/cuda/wgmma.cuh"

namespace braid::cuda::grouped_gemm_fp8 {

constexpr int kBlockM = 128;      // rows of x per tile, 64 per consumer warpgroup
constexpr int kHalfN = 128;       // weight rows per half tile (one wgmma n128, one scale block)
constexpr int kBlockN = 2 * kHalfN;
constexpr int kBlockK = 128;      // K per slice: 128 fp8 bytes, one swizzle line, one scale block
constexpr int kStages = 4;
constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr uint32_t kABytes = kBlockM * kBlockK, kHalfBBytes = kHalfN * kBlockK;
constexpr uint32_t kStageBytes = kABytes + 2 * kHalfBBytes;
constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + alignment: tiles start 1024-aligned
constexpr int kBandTiles = 8;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;

enum class Out { f32, bf16, fp8 };

struct Params {
  CUtensorMap a;  // x: (R K, 1, M) bytes, boxes of 128 x 1 x 128
  CUtensorMap b;  // w: (K, 1, E N) bytes, boxes of 128 x 1 x 128
  const float* a_scale;  // [R K / 128, a_scale_stride]
  int64_t a_scale_stride;
  const float* b_scale;  // [E, N / 128, K / 128]
  moe_tiles::Shape shape;
  void* y;
  int64_t y_stride;  // elements
  float* y_scale;    // fp8 y: [y_terms I / 128, y_scale_stride]
  int64_t y_scale_stride;
  int y_terms;
  int w_rows;     // N, or 2 I for SwiGLU
  int out_cols;   // N, or I for SwiGLU
  int w_blocks;   // K / 128: slices of w, and scale blocks per weight row block
  int x_slices;   // R K / 128
  int gate_first; // SwiGLU: 1 when the gate rows come first in w[e] (swiglu), 0 (swiglu_gate_last)
};

__device__ __forceinline__ moe_tiles::Tile tile_at(const Params& p, const moe_tiles::Schedule& s,
                                                   int t) {
  return moe_tiles::tile_at<kBlockM, kBandTiles>(p.shape, s, t);
}

// The first weight row (within expert e) of half h of column tile n.
template <bool kSwiglu>
__device__ __forceinline__ int half_row(const Params& p, int n, int h) {
  if constexpr (kSwiglu) {
    const int gate0 = p.gate_first ? 0 : p.out_cols, up0 = p.gate_first ? p.out_cols : 0;
    return (h == 0 ? gate0 : up0) + n * kHalfN;
  } else {
    return n * kBlockN + h * kHalfN;
  }
}

// The scale of weight block (row block rb of expert e, slice kb), 0 past the expert's rows (the
// second half of a last tile when N is an odd multiple of 128).
__device__ __forceinline__ float w_scale_at(const Params& p, int e, int row0, int kb) {
  const int blocks = p.w_rows / kHalfN;
  const int rb = row0 / kHalfN;
  return rb < blocks ? __ldg(p.b_scale + (int64_t{e} * blocks + rb) * p.w_blocks + kb) : 0.0f;
}

// The scales of one slice: x's (rows r and r + 8 of x column block xk) and w's (both halves,
// w column block wk).
struct SliceScales {
  float x_lo, x_hi, w0, w1;
};
__device__ __forceinline__ SliceScales slice_scales(const Params& p, int expert, int wk, int xk,
                                                    int sr_lo, int sr_hi, int row0_h0,
                                                    int row0_h1) {
  const float* sa = p.a_scale + int64_t{xk} * p.a_scale_stride;
  return {__ldg(sa + sr_lo), __ldg(sa + sr_hi), w_scale_at(p, expert, row0_h0, wk),
          w_scale_at(p, expert, row0_h1, wk)};
}

// part (this slice's products) into acc, scaled: rows g (part[4i + 0/1]) by s_lo, rows g + 8
// (part[4i + 2/3]) by s_hi.
__device__ __forceinline__ void add_scaled(float (&acc)[64], const float (&part)[64], float s_lo,
                                           float s_hi) {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    acc[4 * i + 0] = fmaf(part[4 * i + 0], s_lo, acc[4 * i + 0]);
    acc[4 * i + 1] = fmaf(part[4 * i + 1], s_lo, acc[4 * i + 1]);
    acc[4 * i + 2] = fmaf(part[4 * i + 2], s_hi, acc[4 * i + 2]);
    acc[4 * i + 3] = fmaf(part[4 * i + 3], s_hi, acc[4 * i + 3]);
  }
}

__device__ __forceinline__ float swiglu_f32(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// Plain outputs (fp32 or bf16) of one warp's rows r and r + 8 (wgmma's accumulator layout:
// acc[4 i + 0/1] are columns 8 i + 2 t, + 1 of row g; acc[4 i + 2/3] the same of row g + 8).
template <Out kOut>
__device__ __forceinline__ void store_plain(const Params& p, const float (&acc)[64], int col0,
                                            int r_lo, int row_end) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int col = col0 + 8 * i + 2 * t;
    if (col >= p.out_cols) continue;  // out_cols is a multiple of 128: both columns or neither
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r_lo + 8 * half;
      if (r >= row_end) continue;
      const float lo = acc[4 * i + 2 * half], hi = acc[4 * i + 2 * half + 1];
      if constexpr (kOut == Out::f32) {
        float* y = static_cast<float*>(p.y) + int64_t{r} * p.y_stride + col;
        *reinterpret_cast<float2*>(y) = make_float2(lo, hi);
      } else {
        __nv_bfloat16* y = static_cast<__nv_bfloat16*>(p.y) + int64_t{r} * p.y_stride + col;
        *reinterpret_cast<uint32_t*>(y) = pack2<__nv_bfloat16>(lo, hi);
      }
    }
  }
}

// SwiGLU outputs of rows r and r + 8 to fp32: h = silu(gate) * up, columns n * 128 + ...
__device__ __forceinline__ void store_swiglu_f32(const Params& p, const float (&gate)[64],
                                                 const float (&up)[64], int n, int r_lo,
                                                 int row_end) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int col = n * kHalfN + 8 * i + 2 * t;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r_lo + 8 * half;
      if (r >= row_end) continue;
      const int j = 4 * i + 2 * half;
      float* y = static_cast<float*>(p.y) + int64_t{r} * p.y_stride + col;
      *reinterpret_cast<float2*>(y) =
          make_float2(swiglu_f32(gate[j], up[j]), swiglu_f32(gate[j + 1], up[j + 1]));
    }
  }
}

// SwiGLU outputs quantized to p.y_terms fp8 terms, as moe_fp8_quantize does it: per row, the
// tile's 128 columns are one block; s = fp8::block_scale(amax), q = e4m3(v / s),
// and the next term quantizes v - q s. The h values of both rows stay in `gate` (overwritten).
__device__ __forceinline__ void store_swiglu_fp8(const Params& p, float (&gate)[64],
                                                 const float (&up)[64], int n, int r_lo,
                                                 int row_end) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < 64; ++j) gate[j] = swiglu_f32(gate[j], up[j]);
  for (int term = 0; term < p.y_terms; ++term) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r_lo + 8 * half;
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i)
        amax = fmaxf(amax, fmaxf(fabsf(gate[4 * i + 2 * half]), fabsf(gate[4 * i + 2 * half + 1])));
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
      const float s = fp8::block_scale(amax);
      uint8_t* y = static_cast<uint8_t*>(p.y) + int64_t{r} * p.y_stride +
                   int64_t{term} * p.out_cols + n * kHalfN + 2 * t;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        float& v0 = gate[4 * i + 2 * half];
        float& v1 = gate[4 * i + 2 * half + 1];
        const uint8_t q0 = fp8::to_e4m3(__fdiv_rn(v0, s)), q1 = fp8::to_e4m3(__fdiv_rn(v1, s));
        if (r < row_end)
          *reinterpret_cast<uint16_t*>(y + 8 * i) = static_cast<uint16_t>(q0 | (q1 << 8));
        v0 = __fsub_rn(v0, __fmul_rn(fp8::e4m3_value(q0), s));
        v1 = __fsub_rn(v1, __fmul_rn(fp8::e4m3_value(q1), s));
      }
      if (t == 0 && r < row_end)
        p.y_scale[(int64_t{term} * (p.out_cols / kHalfN) + n) * p.y_scale_stride + r] = s;
    }
  }
}

template <Out kOut, bool kSwiglu>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_fp8_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma, TMA and setmaxnreg need sm_90a code
#else
  extern __shared__ unsigned char smem_raw[];
  __shared__ moe_tiles::Schedule sched;
  __shared__ uint64_t full_bar[kStages], empty_bar[kStages];

  const moe_ring::SliceRing<kStages, kStageBytes> ring{(smem_addr(smem_raw) + 1023u) & ~1023u,
                                                        full_bar, empty_bar};
  if (threadIdx.x < 32) moe_tiles::build_schedule<kBlockM>(p.shape, sched);
  if (threadIdx.x == 32) ring.init(4 * kConsumers);
  __syncthreads();
  const int total = sched.tile_start[p.shape.experts];

  const int wg = threadIdx.x / 128;
  if (wg == 0) {  // ---- producer ----
    hopper::set_max_registers_dec<kProducerRegs>();
    if (threadIdx.x != 0) return;
    hopper::prefetch_tensor_map(&p.a);
    hopper::prefetch_tensor_map(&p.b);
    int slice = 0;
    for (int t = blockIdx.x; t < total; t += gridDim.x) {
      const moe_tiles::Tile tile = tile_at(p, sched, t);
      const int w_row = tile.expert * p.w_rows;
      const int b0 = w_row + half_row<kSwiglu>(p, tile.n, 0);
      const int b1 = w_row + half_row<kSwiglu>(p, tile.n, 1);
      for (int wk = 0; wk < p.w_blocks; ++wk)
        for (int xk = wk; xk < p.x_slices; xk += p.w_blocks, ++slice) {  // x's terms of slice wk
          hopper::mbar_wait(ring.empty(slice), ring.parity(slice) ^ 1);  // the lap before was read
          hopper::mbar_arrive_expect_tx(ring.full(slice), kStageBytes);
          const uint32_t a = ring.buffer(slice), b = a + kABytes;
          hopper::tma_load_3d(a, &p.a, xk * kBlockK, 0, tile.row0, ring.full(slice));
          hopper::tma_load_3d(b, &p.b, wk * kBlockK, 0, b0, ring.full(slice));
          hopper::tma_load_3d(b + kHalfBBytes, &p.b, wk * kBlockK, 0, b1, ring.full(slice));
        }
    }
    return;
  }

  // ---- consumers ----
  hopper::set_max_registers_inc<kConsumerRegs>();
  const int cw = wg - 1, warp_in_wg = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  auto release = [&](int slice) {
    __syncwarp();
    if (lane == 0) hopper::mbar_arrive(ring.empty(slice));
  };
  float acc0[64], acc1[64], part[64];

  int slice = 0;
  for (int t = blockIdx.x; t < total; t += gridDim.x) {
    const moe_tiles::Tile tile = tile_at(p, sched, t);
    const int r_lo = tile.row0 + cw * 64 + warp_in_wg * 16 + lane / 4;
    // Rows past x's end (TMA reads them as zeros) still need a scale to multiply by: any row's.
    const int sr_lo = min(r_lo, p.shape.m_rows - 1), sr_hi = min(r_lo + 8, p.shape.m_rows - 1);
    const int row0_h0 = half_row<kSwiglu>(p, tile.n, 0), row0_h1 = half_row<kSwiglu>(p, tile.n, 1);
#pragma unroll
    for (int i = 0; i < 64; ++i) acc0[i] = acc1[i] = 0.0f;

    // Slices in the producer's order (wk outer, x's terms inner). Each slice's scales are loaded
    // one slice ahead: they come from L2, and waiting for them after the products stalled every
    // slice by an L2 round trip (ncu: long-scoreboard stalls, the tensor pipe idle).
    int wk = 0, xk = 0;
    SliceScales cur = slice_scales(p, tile.expert, wk, xk, sr_lo, sr_hi, row0_h0, row0_h1);
    for (int j = 0; j < p.x_slices; ++j, ++slice) {
      int next_wk = wk, next_xk = xk + p.w_blocks;
      if (next_xk >= p.x_slices) next_xk = next_wk = wk + 1;
      const SliceScales next =
          j + 1 < p.x_slices
              ? slice_scales(p, tile.expert, next_wk, next_xk, sr_lo, sr_hi, row0_h0, row0_h1)
              : cur;
      hopper::mbar_wait(ring.full(slice), ring.parity(slice));
      const uint32_t a = ring.buffer(slice) + cw * 64 * kBlockK, b = ring.buffer(slice) + kABytes;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBlockK / 32; ++kk)
          wgmma_ss_m64n128k32_e4m3(part, descriptor(a + kk * 32, 16, 1024),
                                   descriptor(b + h * kHalfBBytes + kk * 32, 16, 1024), kk > 0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_registers(part);
        const float sb = h == 0 ? cur.w0 : cur.w1;
        if (h == 0) add_scaled(acc0, part, cur.x_lo * sb, cur.x_hi * sb);
        else add_scaled(acc1, part, cur.x_lo * sb, cur.x_hi * sb);
      }
      release(slice);
      cur = next;
      wk = next_wk;
      xk = next_xk;
    }
    if constexpr (kSwiglu) {
      if constexpr (kOut == Out::fp8) store_swiglu_fp8(p, acc0, acc1, tile.n, r_lo, tile.row_end);
      else store_swiglu_f32(p, acc0, acc1, tile.n, r_lo, tile.row_end);
    } else {
      store_plain<kOut>(p, acc0, tile.n * kBlockN, r_lo, tile.row_end);
      store_plain<kOut>(p, acc1, tile.n * kBlockN + kHalfN, r_lo, tile.row_end);
    }
  }
#endif
}

// Host side: the launch, or false when TMA cannot address x or w or the stores would be
// misaligned (the caller then takes the simple kernel). Shapes are checked by the op.
template <Out kOut, bool kSwiglu>
bool launch(const Tensor& x, const Tensor& x_scale, const Tensor& w, const Tensor& w_scale,
            const Tensor& offsets, bool gate_first, const Tensor& y, const Tensor& y_scale,
            cudaStream_t stream) {
  const int64_t m = x.shape[0], experts = w.shape[0], w_rows = w.shape[1], k = w.shape[2];
  const int64_t out_align = kOut == Out::f32 ? 8 : kOut == Out::bf16 ? 4 : 2;
  const int64_t y_elem = kOut == Out::f32 ? 4 : kOut == Out::bf16 ? 2 : 1;
  if ((reinterpret_cast<uintptr_t>(y.data) % out_align) != 0 || (y.row_stride() * y_elem) % out_align != 0)
    return false;
  Params p{};
  if (!make_tma_map_rows_heads(&p.a, DType::f8e4m3, x.data, m, 1, x.shape[1], x.row_stride(), kBlockM) ||
      !make_tma_map_rows_heads(&p.b, DType::f8e4m3, w.data, experts * w_rows, 1, k, k, kHalfN))
    return false;
  p.a_scale = x_scale.ptr<float>();
  p.a_scale_stride = x_scale.row_stride();
  p.b_scale = w_scale.ptr<float>();
  p.y = y.data;
  p.y_stride = y.row_stride();
  p.w_rows = static_cast<int>(w_rows);
  p.out_cols = static_cast<int>(kSwiglu ? w_rows / 2 : w_rows);
  p.w_blocks = static_cast<int>(k / kBlockK);
  p.x_slices = static_cast<int>(x.shape[1] / kBlockK);
  p.gate_first = gate_first ? 1 : 0;
  if constexpr (kOut == Out::fp8) {
    p.y_scale = y_scale.ptr<float>();
    p.y_scale_stride = y_scale.row_stride();
    p.y_terms = static_cast<int>(y.shape[1] / p.out_cols);
  }
  const int cols_per_tile = kSwiglu ? kHalfN : kBlockN;
  p.shape = {offsets.ptr<int32_t>(), static_cast<int>(m), static_cast<int>(experts),
             (p.out_cols + cols_per_tile - 1) / cols_per_tile};
  // Each expert has at most rows / kBlockM + 1 row tiles: a bound on the tiles, known on the host.
  const int64_t max_tiles = (m / kBlockM + experts) * p.shape.n_tiles;
  if (max_tiles > INT32_MAX)
    check::fail(ErrorKind::unsupported, "moe_grouped_gemm_fp8", "x", "fewer than 2^31 tiles",
                std::to_string(max_tiles) + " (upper bound for these shapes)");
  opt_in(grouped_gemm_fp8_kernel<kOut, kSwiglu>, kSmemBytes);
  const int blocks = static_cast<int>(std::min<int64_t>(max_tiles, sm_count()));
  if (blocks == 0) return true;
  grouped_gemm_fp8_kernel<kOut, kSwiglu><<<blocks, kThreads, kSmemBytes, stream>>>(p);
  BRAID_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace braid::cuda::grouped_gemm_fp8
