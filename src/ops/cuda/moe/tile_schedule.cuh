// The tile schedule of the persistent grouped GEMM kernels (grouped_gemm_sm90.cuh,
// grouped_gemm_fp8_sm90.cuh). A tile is (expert, row tile, column tile). The expert sizes are only
// on the device, so every block first turns expert_offsets into a table of each expert's first
// tile (a warp-wide scan), then the persistent blocks take tiles blockIdx.x, + gridDim.x, ... and
// find a tile's expert by binary search. Within an expert the tiles go in bands of row tiles, so
// that the blocks running at once share x rows and weight rows in L2.
#pragma once

#include <cstdint>

#include "braid/ops.h"

namespace braid::cuda::moe_tiles {

// What the schedule needs to know of a launch.
struct Shape {
  const int32_t* offsets;  // [experts + 1], trusted but clamped to [0, m_rows]
  int m_rows;
  int experts;
  int n_tiles;  // column tiles per expert
};

// Where each expert's rows and tiles start; [E] holds the totals.
struct Schedule {
  int row_start[ops::kMoeMaxExperts + 1];
  int tile_start[ops::kMoeMaxExperts + 1];
};

struct Tile {
  int expert, row0, row_end, n;
};

// An offset clamped to [0, M]: offsets are trusted on CUDA, but bad ones must not send stores
// outside y.
__device__ __forceinline__ int clamped_offset(const Shape& p, int e) {
  return min(max(p.offsets[e], 0), p.m_rows);
}

// Built by one warp: 32 experts per step, an inclusive warp scan of their tile counts.
template <int kBlockM>
__device__ __forceinline__ void build_schedule(const Shape& p, Schedule& s) {
  const int lane = threadIdx.x % 32;
  int carry = 0;
  for (int base = 0; base < p.experts; base += 32) {
    const int e = base + lane;
    int tiles = 0;
    if (e < p.experts) {
      const int start = clamped_offset(p, e), rows = clamped_offset(p, e + 1) - start;
      s.row_start[e] = start;
      tiles = rows > 0 ? (rows + kBlockM - 1) / kBlockM * p.n_tiles : 0;
    }
    int incl = tiles;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += v;
    }
    if (e < p.experts) s.tile_start[e] = carry + incl - tiles;
    carry += __shfl_sync(0xffffffffu, incl, 31);
  }
  if (lane == 0) {
    s.tile_start[p.experts] = carry;
    s.row_start[p.experts] = clamped_offset(p, p.experts);
  }
}

// Tile t (< the total): its expert is the last one whose first tile is <= t (experts without rows
// own no tiles, so that one has rows). Bands of kBandTiles row tiles (the last may be shorter),
// row tiles fastest within a band.
template <int kBlockM, int kBandTiles>
__device__ __forceinline__ Tile tile_at(const Shape& p, const Schedule& s, int t) {
  int lo = 0, hi = p.experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (s.tile_start[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  const int local = t - s.tile_start[lo];
  const int m_tiles = (s.tile_start[lo + 1] - s.tile_start[lo]) / p.n_tiles;
  const int band = local / (kBandTiles * p.n_tiles), in_band = local % (kBandTiles * p.n_tiles);
  const int band_m = min(kBandTiles, m_tiles - band * kBandTiles);
  return Tile{lo, s.row_start[lo] + (band * kBandTiles + in_band % band_m) * kBlockM,
              s.row_start[lo + 1], in_band / band_m};
}

// The expert whose rows hold row r, or -1 outside [offsets[0], offsets[E]) (offsets are
// non-decreasing; for the simple kernels, which take one row at a time).
__device__ __forceinline__ int expert_of_row(const int32_t* offsets, int experts, int64_t r) {
  if (r < offsets[0] || r >= offsets[experts]) return -1;
  int lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= r) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace braid::cuda::moe_tiles
