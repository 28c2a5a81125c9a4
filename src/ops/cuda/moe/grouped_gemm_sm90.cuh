// The MoE grouped GEMM on Hopper (moe_grouped_gemm in ops.h), warp-specialised as the attention
// kernel (flash_prefill_ws.cuh) is:
//   warpgroup 0    producer: one thread issues the TMA copies of each tile's x rows (A) and weight
//                  rows (B), one K slice of 64 at a time, into a ring of kStages buffers, on
//                  full/empty mbarriers. It runs ahead across tiles, so the next tile's first
//                  slices land while the consumers store the last one.
//   warpgroups 1-2 consumers, 64 rows of the 128-row tile each: per slice, four wgmma m64n256k16
//                  (both operands K-major in shared memory), one group left in flight while the
//                  next slice is waited for; then the epilogue from registers to global memory.
// The persistent blocks take tiles (expert, row tile, column tile) in the order of
// tile_schedule.cuh, in bands of kBandTiles row tiles.
// SwiGLU: the tile's B is 128 gate rows and the 128 matching up rows (two TMA boxes), so gate
// column j and up column j land in the same thread's accumulators (columns j and j + 128) and the
// epilogue writes h = silu(g) * u, 128 columns wide.
// TMA reads whole boxes: a tile's last rows may be the next expert's (or zeros past the end of
// x), its last columns the next expert's weights, and K past the end reads as zeros on both sides;
// the epilogue stores only the expert's rows and the real columns.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "braid/ops.h"
#include "core/cuda_check.h"
#include "ops/check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/hopper.cuh"
#include "ops/cuda/launch_util.h"
#include "ops/cuda/moe/slice_ring.cuh"
#include "ops/cuda/moe/tile_schedule.cuh"
#include "ops/cuda/tma_map.h"
#include "ops/cuda/wgmma.cuh"

namespace braid::cuda::grouped_gemm {

constexpr int kBlockM = 128;  // rows of x per tile, 64 per consumer warpgroup
constexpr int kBlockN = 256;  // weight rows per tile (SwiGLU: 128 gate + 128 up)
constexpr int kBlockK = 64;   // K per slice: one 128-byte swizzle line
constexpr int kStages = 4;
constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr uint32_t kABytes = kBlockM * kBlockK * 2, kBBytes = kBlockN * kBlockK * 2;
constexpr uint32_t kStageBytes = kABytes + kBBytes;
constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + alignment: tiles start 1024-aligned
// The tile order within an expert: bands of this many row tiles, row tiles fastest within a band,
// so the ~132 tiles running at once cover about 8 row tiles x 16 column tiles, a squarer patch of
// the output (fewer distinct x and weight rows to keep in L2) than all the expert's row tiles x a
// few column tiles. Measured at seed 001's down projection (65536 tokens): 605 -> 664 TFLOP/s,
// DRAM traffic -12%; bands of 16 and 4 were between (docs/perf/moe.md).
constexpr int kBandTiles = 8;
// Registers per thread after setmaxnreg (65536 per SM, one block): the consumers hold 128 fp32
// accumulators each.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;

struct Params {
  CUtensorMap a;  // x: (K, 1, M), boxes of 64 x 1 x 128
  CUtensorMap b;  // w: (K, 1, E * w_rows), boxes of 64 x 1 x 128
  moe_tiles::Shape shape;
  void* y;
  int64_t y_stride;  // elements
  int w_rows;    // rows of w per expert: N, or 2 I for SwiGLU
  int out_cols;  // N, or I for SwiGLU
  int k_slices;  // ceil(K / 64)
};

__device__ __forceinline__ moe_tiles::Tile tile_at(const Params& p, const moe_tiles::Schedule& s,
                                                   int t) {
  return moe_tiles::tile_at<kBlockM, kBandTiles>(p.shape, s, t);
}

template <typename T>
__device__ __forceinline__ void mma_slice(float (&acc)[128], uint64_t da, uint64_t db, int accumulate) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    wgmma_ss_m64n256k16_bf16(acc, da, db, accumulate);
  else
    wgmma_ss_m64n256k16_f16(acc, da, db, accumulate);
}

// Two adjacent outputs of a row; the second only when it is a real column.
template <typename T>
__device__ __forceinline__ void store_pair(T* dst, float lo, float hi, bool both) {
  if (both) *reinterpret_cast<uint32_t*>(dst) = pack2<T>(lo, hi);
  else *dst = from_float<T>(lo);
}

// One warp's 16 rows of the tile (rows r and r + 8 per lane), from wgmma's accumulator layout:
// acc[4 i + 0/1] are columns 8 i + 2 t, + 1 of row g; acc[4 i + 2/3] the same columns of row g + 8.
template <typename T, bool kSwiglu>
__device__ __forceinline__ void store_tile_rows(const Params& p, const float (&acc)[128], int r_lo,
                                                int row_end, int n) {
  const int t = threadIdx.x % 4;
  T* y = static_cast<T*>(p.y);
  constexpr int kGroups = kSwiglu ? 16 : 32;  // 8-column groups of output
  const int col0 = n * (kSwiglu ? kBlockN / 2 : kBlockN) + 2 * t;
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    const int col = col0 + 8 * i;
    if (col >= p.out_cols) continue;
    const bool both = col + 1 < p.out_cols;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r_lo + 8 * half;
      if (r >= row_end) continue;
      const float* v = &acc[4 * i + 2 * half];
      float lo = v[0], hi = v[1];
      if constexpr (kSwiglu) {
        const float* u = &acc[4 * (i + 16) + 2 * half];
        lo = swiglu_rounded<T>(lo, u[0]);
        hi = swiglu_rounded<T>(hi, u[1]);
      }
      store_pair<T>(y + int64_t{r} * p.y_stride + col, lo, hi, both);
    }
  }
}

template <typename T, bool kSwiglu>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_kernel(const __grid_constant__ Params p) {
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
      // The two 128-row halves of B: gate and up rows for SwiGLU, else consecutive rows.
      const int b0 = w_row + tile.n * (kSwiglu ? kBlockN / 2 : kBlockN);
      const int b1 = b0 + (kSwiglu ? p.w_rows / 2 : kBlockN / 2);
      for (int k = 0; k < p.k_slices; ++k, ++slice) {
        hopper::mbar_wait(ring.empty(slice), ring.parity(slice) ^ 1);  // the lap before was read
        hopper::mbar_arrive_expect_tx(ring.full(slice), kStageBytes);
        const uint32_t a = ring.buffer(slice), b = a + kABytes;
        hopper::tma_load_3d(a, &p.a, k * kBlockK, 0, tile.row0, ring.full(slice));
        hopper::tma_load_3d(b, &p.b, k * kBlockK, 0, b0, ring.full(slice));
        hopper::tma_load_3d(b + kBBytes / 2, &p.b, k * kBlockK, 0, b1, ring.full(slice));
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
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;

  int slice = 0;
  for (int t = blockIdx.x; t < total; t += gridDim.x) {
    const moe_tiles::Tile tile = tile_at(p, sched, t);
    for (int k = 0; k < p.k_slices; ++k, ++slice) {
      hopper::mbar_wait(ring.full(slice), ring.parity(slice));
      const uint32_t a = ring.buffer(slice) + cw * 64 * 128, b = ring.buffer(slice) + kABytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk)
        mma_slice<T>(acc, descriptor(a + kk * 32, 16, 1024), descriptor(b + kk * 32, 16, 1024),
                     k > 0 || kk > 0);
      wgmma_commit();
      wgmma_wait<1>();  // the slice before has been read: its buffer may be refilled
      if (k > 0) release(slice - 1);
    }
    wgmma_wait<0>();
    fence_registers(acc);
    release(slice - 1);
    const int r_lo = tile.row0 + cw * 64 + warp_in_wg * 16 + lane / 4;
    store_tile_rows<T, kSwiglu>(p, acc, r_lo, tile.row_end, tile.n);
  }
#endif
}

// Host side: the launch, or false when TMA cannot address x or w, or the epilogue's 4-byte stores
// would be misaligned (the caller then takes the simple kernel). Needs K >= 64 (one whole box).
template <typename T, bool kSwiglu>
bool launch(const Tensor& x, const Tensor& w, const Tensor& offsets, const Tensor& y,
            cudaStream_t stream) {
  constexpr DType kType = std::is_same_v<T, __nv_bfloat16> ? DType::bf16 : DType::f16;
  const int64_t m = x.shape[0], k = x.shape[1], experts = w.shape[0], w_rows = w.shape[1];
  if (k < kBlockK || (reinterpret_cast<uintptr_t>(y.data) & 3u) != 0 || y.row_stride() % 2 != 0)
    return false;
  Params p{};
  if (!make_tma_map_rows_heads(&p.a, kType, x.data, m, 1, k, x.row_stride(), kBlockM) ||
      !make_tma_map_rows_heads(&p.b, kType, w.data, experts * w_rows, 1, k, k, kBlockN / 2))
    return false;
  p.y = y.data;
  p.y_stride = y.row_stride();
  p.w_rows = static_cast<int>(w_rows);
  p.out_cols = static_cast<int>(kSwiglu ? w_rows / 2 : w_rows);
  p.k_slices = static_cast<int>((k + kBlockK - 1) / kBlockK);
  const int cols_per_tile = kSwiglu ? kBlockN / 2 : kBlockN;
  p.shape = {offsets.ptr<int32_t>(), static_cast<int>(m), static_cast<int>(experts),
             (p.out_cols + cols_per_tile - 1) / cols_per_tile};
  // Each expert has at most rows / kBlockM + 1 row tiles: a bound on the tiles, known on the host.
  const int64_t max_tiles = (m / kBlockM + experts) * p.shape.n_tiles;
  if (max_tiles > INT32_MAX)
    check::fail(ErrorKind::unsupported, "moe_grouped_gemm", "x", "fewer than 2^31 tiles",
                std::to_string(max_tiles) + " (upper bound for these shapes)");
  opt_in(grouped_gemm_kernel<T, kSwiglu>, kSmemBytes);
  const int blocks = static_cast<int>(std::min<int64_t>(max_tiles, sm_count()));
  if (blocks == 0) return true;
  grouped_gemm_kernel<T, kSwiglu><<<blocks, kThreads, kSmemBytes, stream>>>(p);
  BRAID_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace braid::cuda::grouped_gemm
