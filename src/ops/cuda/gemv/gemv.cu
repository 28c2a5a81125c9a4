// GEMV / skinny GEMM for 1..16 rows: out[m, n] = a[m, k] @ w[n, k]^T (+ bias), fp32 sums.
//
// Decode reads every weight once, so the kernel is a stream of w through the SMs at as close to
// the DRAM bandwidth as we can get; the arithmetic is tiny. It is done on the tensor cores anyway
// (mma.sync m16n8k16, fp32 accumulation), because that makes 16 activation rows cost what one
// does and keeps the instruction count per byte low.
//
// The mma computes C[16 x 8] += A[16 x 16] * B[16 x 8] with A = 16 rows of activations (rows past
// m are zero) and B = w^T for 8 rows of w. Lane (g, t) = (lane / 4, lane % 4) holds A's rows g and
// g + 8 at logical k {2t, 2t+1, 2t+8, 2t+9} and B's column g at the same k. The k order inside one
// mma is free as long as A and B agree, so each lane loads 16 contiguous bytes (8 columns) of w
// row g and of activation rows g and g + 8 at column 8 * (4 * step + t), and feeds them to two
// mmas: columns 0..3 of the chunk as logical {2t, 2t+1, 2t+8, 2t+9} of the first, 4..7 of the
// second. One 16-byte weight load per lane per 32 columns, and no shuffles or shared memory
// between the loads and the mma.
//
// A warp owns a tile of 16 rows of w (two 8-row mma columns, sharing the activation registers)
// over a slice of k, with kUnroll steps of 32 columns in flight (2 * kUnroll 16-byte weight loads
// per lane). By default the 8 warps of a block split one tile's k and add their partial sums in
// shared memory, so a block streams 16 whole rows, one contiguous stretch of w: on an H100 this
// was the fastest launch on 22 of the 23 decode shapes measured, lm_heads included, ahead of one
// tile per warp and of splitting k further over the blocks of a cluster (docs/perf/gemv.md). One
// launch, no atomics, no workspace.
//
// Batched (gemv_batched, gemm_batched's path for up to 16 rows): out[:, b, :] = a[:, b, :] @
// w[b]^T for every b, the same kernel with the batch index as blockIdx.y, each block's a, w and
// out moved to its b (MLA's per-head W_UK and W_UV at decode: 16..128 small products in one
// launch).

#include <climits>
#include <string>
#include <type_traits>

#include "braid/error.h"
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemv/gemv_device.cuh"
#include "ops/cuda/gemv/gemv.h"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

using gemv_device::load_weights;
using gemv_device::mma;

constexpr int kTileRows = 16;       // rows of w per warp
constexpr int kStepCols = 32;       // columns per step: 4 lanes x 8
constexpr int kMaxWarps = 8;        // per block
constexpr int kUnroll = 4;          // steps in flight per warp (8 measured no better)
constexpr int kTileElems = kTileRows * 16;  // [16 rows of w][16 activation rows] partial sums

struct GemvArgs {
  const void* a;
  const void* w;
  const void* bias;  // null for none; out's dtype
  void* out;
  int64_t lda, ldo, ldw;  // row strides in elements
  int64_t a_batch, w_batch, out_batch;  // batched: the strides between the products' a, w, out
  int m, n, k;
  int tiles;           // ceil(n / 16)
  int steps_per_slice; // 32-column steps in one k slice
  int tiles_per_block, split;
  bool out_f32;
};

// 16 bytes of activations: every warp of the SM reads them, so they stay in L1.
__device__ __forceinline__ uint4 load_activations(const uint4* p, bool pred) {
  uint4 v;
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
      " @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)));
  return v;
}

// out[row, col] = v + bias[col], rounded once to out's dtype.
template <typename T>
__device__ __forceinline__ void store_out(const GemvArgs& p, void* out, int row, int col, float v) {
  if (p.out_f32) {
    if (p.bias) v += static_cast<const float*>(p.bias)[col];
    static_cast<float*>(out)[row * p.ldo + col] = v;
  } else {
    if (p.bias) v += to_float(static_cast<const T*>(p.bias)[col]);
    static_cast<T*>(out)[row * p.ldo + col] = from_float<T>(v);
  }
}

// kWide: m > 8, so activation rows g + 8 exist.
// The minimum of 2 blocks per SM matters: without it ptxas keeps registers low by waiting for
// each load before issuing the next ones, and only a few loads are in flight; with it (128
// registers at most) all 2 * kUnroll weight loads of a step are issued before the first mma.
template <typename T, bool kWide, bool kBatched>
__global__ void __launch_bounds__(kMaxWarps * 32, 2) gemv_kernel(GemvArgs p) {
  __shared__ float partial[kMaxWarps][kTileElems];
  // This block's product (batched: blockIdx.y).
  const T* w = static_cast<const T*>(p.w);
  const T* a = static_cast<const T*>(p.a);
  void* out = p.out;
  if constexpr (kBatched) {
    const int64_t b = blockIdx.y;
    w += b * p.w_batch;
    a += b * p.a_batch;
    out = static_cast<T*>(out) + b * p.out_batch;
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int tile_in_block = warp / p.split, slice_in_block = warp % p.split;
  const int first_tile = static_cast<int>(blockIdx.x) * p.tiles_per_block;
  const int tile = first_tile + tile_in_block;
  const bool has_tile = tile < p.tiles;  // the last block may have fewer tiles than warps

  // This warp's k slice, in 32-column steps.
  const int steps = (p.k + kStepCols - 1) / kStepCols;
  const int step_begin = slice_in_block * p.steps_per_slice;
  const int step_end = has_tile ? min(steps, step_begin + p.steps_per_slice) : step_begin;

  // Rows past n read row n - 1 (a valid address) and are never stored.
  const int chunks = p.k / 8;  // 16-byte chunks per row
  const int row0 = min(tile * kTileRows + g, p.n - 1), row1 = min(tile * kTileRows + 8 + g, p.n - 1);
  const uint4* w0 = reinterpret_cast<const uint4*>(w + int64_t{row0} * p.ldw);
  const uint4* w1 = reinterpret_cast<const uint4*>(w + int64_t{row1} * p.ldw);
  const bool has_lo = g < p.m, has_hi = kWide && g + 8 < p.m;
  const uint4* x_lo = reinterpret_cast<const uint4*>(a + (has_lo ? g * p.lda : 0));
  const uint4* x_hi = reinterpret_cast<const uint4*>(a + (has_hi ? (g + 8) * p.lda : 0));

  // The first group of weight loads depends on nothing: issued before waiting for the kernel
  // before this one (pdl.cuh), they overlap its tail, and so does this kernel's launch.
  uint4 wv[kUnroll][2];
  auto load_weight_group = [&](int s0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = (s0 + u) * 4 + t;
      const bool ok = s0 + u < step_end && c < chunks;
      wv[u][0] = load_weights(w0 + c, ok);
      wv[u][1] = load_weights(w1 + c, ok);
    }
  };
  load_weight_group(step_begin);
  pdl::wait();

  // acc[r]: rows r * 8 + 2t, 2t + 1 of the tile, activation rows g ({0, 1}) and g + 8 ({2, 3}).
  float acc[2][4] = {};
  for (int s0 = step_begin; s0 < step_end; s0 += kUnroll) {
    if (s0 != step_begin) load_weight_group(s0);
    uint4 xl[kUnroll], xh[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = (s0 + u) * 4 + t;
      const bool ok = s0 + u < step_end && c < chunks;
      xl[u] = load_activations(x_lo + c, ok && has_lo);
      xh[u] = kWide ? load_activations(x_hi + c, ok && has_hi) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mma<T>(acc[r], xl[u].x, xh[u].x, xl[u].y, xh[u].y, wv[u][r].x, wv[u][r].y);
        mma<T>(acc[r], xl[u].z, xh[u].z, xl[u].w, xh[u].w, wv[u][r].z, wv[u][r].w);
      }
    }
  }

  // The next kernel's blocks may take the SMs from here on: only the stores (and the reduction)
  // are left, so their early weight loads no longer compete with this kernel's (pdl.cuh).
  pdl::launch_dependents();
  const int col_base = tile * kTileRows;
  if (p.split == 1) {  // the warp has whole sums: store them
    if (!has_tile) return;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col = col_base + r * 8 + 2 * t + j;
        if (col >= p.n) continue;
        if (has_lo) store_out<T>(p, out, g, col, acc[r][j]);
        if (has_hi) store_out<T>(p, out, g + 8, col, acc[r][2 + j]);
      }
    }
    return;
  }

  gemv_device::store_partial(partial[warp], acc, g, t, has_lo, has_hi);
  __syncthreads();

  // Sum the block's slices and store.
  const int elems = p.tiles_per_block * kTileElems;
  for (int e = threadIdx.x; e < elems; e += blockDim.x) {
    const int tb = e / kTileElems, i = e % kTileElems, row = i % 16, col = i / 16;
    const int out_col = (first_tile + tb) * kTileRows + col;
    if (row >= p.m || out_col >= p.n) continue;
    float sum = 0.0f;
    for (int s = 0; s < p.split; ++s) sum += partial[tb * p.split + s][i];
    store_out<T>(p, out, row, out_col, sum);
  }
}

void check_launch(const GemvLaunch& l) {
  if (l.tiles_per_block < 1 || l.split < 1 || l.tiles_per_block * l.split > kMaxWarps)
    throw Error(ErrorKind::invalid_argument,
                "gemv: launch: expected tiles_per_block * split in 1.." + std::to_string(kMaxWarps) +
                    ", got " + std::to_string(l.tiles_per_block) + " * " + std::to_string(l.split));
}

}  // namespace

bool gemv_applicable(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out) {
  (void)bias;  // any bias and out that ops::gemm accepts: the epilogue stores single elements
  (void)out;
  if (!a.device.is_cuda() || (a.dtype != DType::f16 && a.dtype != DType::bf16)) return false;
  const int64_t m = a.size(0), k = a.size(1), n = w.size(0);
  if (m < 1 || m > kGemvMaxRows || k % 8 != 0) return false;
  if (n > INT_MAX / 2 || k > INT_MAX / 2) return false;  // the kernel indexes columns with int
  if (!aligned16(a.data) || !aligned16(w.data)) return false;
  return m == 1 || (a.row_stride() * static_cast<int64_t>(dtype_size(a.dtype))) % 16 == 0;
}

GemvLaunch gemv_launch_for(int64_t m, int64_t n, int64_t k) {
  (void)m;
  (void)n;
  (void)k;
  // One 16-row tile per block, its k split over 8 warps: the fastest launch on an H100 for 22 of
  // the bench's 23 shapes (m 1..16, n 896..151936, k 896..11008) and within 3% on the last; see
  // docs/perf/gemv.md.
  return {1, kMaxWarps};
}

std::string describe(const GemvLaunch& l) {
  return "tiles/block " + std::to_string(l.tiles_per_block) + ", split " + std::to_string(l.split);
}

void gemv(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out,
          Stream stream) {
  gemv(a, w, bias, out, gemv_launch_for(a.size(0), w.size(0), a.size(1)), stream);
}

namespace {

// Fills the launch's part of p (its m, n and k set) and enqueues `batch` products (blockIdx.y).
void launch_gemv(GemvArgs& p, const GemvLaunch& launch, int batch, DType dtype, Stream stream) {
  p.tiles = (p.n + kTileRows - 1) / kTileRows;
  p.tiles_per_block = launch.tiles_per_block;
  p.split = launch.split;
  const int steps = (p.k + kStepCols - 1) / kStepCols;
  p.steps_per_slice = (steps + launch.split - 1) / launch.split;

  const dim3 blocks(
      static_cast<unsigned>((p.tiles + launch.tiles_per_block - 1) / launch.tiles_per_block),
      static_cast<unsigned>(batch));
  const auto threads = static_cast<unsigned>(launch.tiles_per_block * launch.split * 32);
  const bool programmatic = gemv_launch_programmatic((p.steps_per_slice + kUnroll - 1) / kUnroll);
  auto s = static_cast<cudaStream_t>(stream.handle);
  dispatch_float_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {  // f32 is refused by the applicable checks
      if (batch > 1) {
        if (p.m > 8)
          launch_dependent_if(programmatic, gemv_kernel<T, true, true>, blocks, threads, 0, s, p);
        else
          launch_dependent_if(programmatic, gemv_kernel<T, false, true>, blocks, threads, 0, s, p);
      } else if (p.m > 8) {
        launch_dependent_if(programmatic, gemv_kernel<T, true, false>, blocks, threads, 0, s, p);
      } else {
        launch_dependent_if(programmatic, gemv_kernel<T, false, false>, blocks, threads, 0, s, p);
      }
    }
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace

void gemv(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out,
          const GemvLaunch& launch, Stream stream) {
  check_launch(launch);
  GemvArgs p{};
  p.a = a.data;
  p.w = w.data;
  p.bias = bias.data;
  p.out = out.data;
  p.m = static_cast<int>(a.size(0));
  p.k = static_cast<int>(a.size(1));
  p.n = static_cast<int>(w.size(0));
  // With one row the row strides are never used (and may be anything).
  p.lda = p.m > 1 ? a.row_stride() : 0;
  p.ldo = p.m > 1 ? out.row_stride() : 0;
  p.ldw = p.k;
  p.out_f32 = out.dtype == DType::f32;
  launch_gemv(p, launch, 1, a.dtype, stream);
}

bool gemv_batched_applicable(const Tensor& a, const Tensor& w, const Tensor& out) {
  (void)out;  // any out gemm_batched accepts: the epilogue stores single elements
  if (!a.device.is_cuda() || (a.dtype != DType::f16 && a.dtype != DType::bf16)) return false;
  const int64_t m = a.size(0), batch = a.size(1), k = a.size(2), n = w.size(1);
  if (m < 1 || m > kGemvMaxRows || batch < 1 || batch > 65535 || k % 8 != 0) return false;
  if (n > INT_MAX / 2 || k > INT_MAX / 2) return false;
  // 16-byte loads along k: w[b]'s rows of k (the layout a Hugging Face weight has) on 16-byte
  // boundaries, and a's parts likewise.
  if (w.stride(2) != 1 && k > 1) return false;
  if (!aligned16(a.data) || !aligned16(w.data)) return false;
  if (w.stride(1) % 8 != 0 || w.stride(0) % 8 != 0 || a.stride(1) % 8 != 0) return false;
  return m == 1 || a.stride(0) % 8 == 0;
}

GemvLaunch gemv_batched_launch(int64_t k) {
  // The 8 warps of a block split one tile's k as in gemv, but a short k (MLA's W_UK: 128
  // columns, 4 steps) has fewer steps than warps: a block then takes several tiles.
  const int64_t steps = (k + kStepCols - 1) / kStepCols;
  int split = kMaxWarps;
  while (split > 1 && split > steps) split /= 2;
  return {kMaxWarps / split, split};
}

void gemv_batched(const Tensor& a, const Tensor& w, const Tensor& out, Stream stream) {
  GemvArgs p{};
  p.a = a.data;
  p.w = w.data;
  p.out = out.data;
  p.m = static_cast<int>(a.size(0));
  p.k = static_cast<int>(a.size(2));
  p.n = static_cast<int>(w.size(1));
  p.lda = p.m > 1 ? a.stride(0) : 0;
  p.ldo = p.m > 1 ? out.stride(0) : 0;
  p.ldw = w.stride(1);
  p.a_batch = a.stride(1);
  p.w_batch = w.stride(0);
  p.out_batch = out.stride(1);
  launch_gemv(p, gemv_batched_launch(p.k), static_cast<int>(a.size(1)), a.dtype, stream);
}

}  // namespace braid::cuda
