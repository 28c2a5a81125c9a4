// The fp8-weight GEMV on the fp8 tensor cores: the decode path of gemv_fused.h's ops on e4m3
// weights when their activations are quantized (fp8_gemv_activations() == e4m3).
//
// Why (docs/perf/fp8.md, "instructions per byte"): converting e4m3 weights to bf16 in registers
// (gemv_fused.cu) costs 3x the 16-bit kernel's issue slots per byte streamed, and with fewer than
// two eligible warps per scheduler that keeps the stream at 60-75 % of the copy bandwidth. Fed to
// mma.m16n8k32.e4m3 as loaded, the weights need no conversion; the activations are quantized
// instead, once per block:
//   1. The block's prologue (after its first weight loads are issued, and after rms_norm's row
//      statistics) transforms the m x k activations (rms_norm / swiglu with their roundings, as
//      gemv_fused.cu), quantizes them per row and 128 columns exactly as moe_fp8_quantize does
//      (s = amax / 448 with an IEEE division, q = e4m3(a / s)) and keeps the codes and scales in
//      shared memory. All 256 threads do it, 8 columns each; in gemv_fused.cu's in-loop transform
//      28 of a warp's 32 lanes idle at m = 1.
//   2. The blocks are persistent: a grid of at most two blocks per SM walks the 16-row tiles of w,
//      so the prologue is paid once per block, not per tile, and the next tile's first weight
//      loads are issued before this tile's reduction. The prologue is not hidden (only the first
//      group of weight loads is in flight during it), so this kernel is taken only where a block
//      has at least kMinTilesPerBlock tiles: the exact kernel is faster on smaller n.
//   3. Per tile, gemv_fused.cu's layout: k split over 8 warps, 64-column steps of 16 bytes per
//      lane and row, kGroup steps in flight; activation rows are the mma's A rows (g, g + 8), the
//      tile's rows its B columns. The A fragment is the same 16 bytes of the row's codes, so the
//      mma sums the lane's columns in a permuted order that both operands share. Each 128-column
//      block's sums go into `part` and are closed by acc += (w scale * a scale) * part.
// The order of the fp32 sum aside, the result is the unfused chain's: rms_norm / silu_mul, then
// moe_fp8_quantize, then the dequantized product (tests/ops/test_gemv_fp8.cpp checks it).

#include <algorithm>
#include <type_traits>

#include "core/cuda_check.h"
#include "ops/cuda/gemv/gemv_device.cuh"
#include "ops/cuda/gemv/gemv_fused_device.cuh"
#include "ops/cuda/launch_util.h"
#include "ops/cuda/moe/fp8_codes.cuh"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda::gemv_fused {

namespace {

constexpr int kGroup = 4;           // 64-column steps per group of weight loads (2 scale blocks)
constexpr int kRowPad = 64;         // bytes after each row's codes: rows g and g + 1 in other banks
constexpr int kScaleRows = kMaxRows;  // scales stored [k / 128][16]: a warp's 8 rows side by side
constexpr int kMaxSmem = 96 * 1024;   // dynamic shared memory per block, two blocks per SM
constexpr int kBlocksPerSm = 2;
// Tiles per block below which the prologue costs more than the conversions it saves (H200,
// Llama-3.1-8B's projections at m = 1: 7 tiles a block 34.2 us against the exact kernel's 38.9;
// 1-2 tiles a block 9-15 % slower than it; docs/perf/fp8.md).
constexpr int kMinTilesPerBlock = 4;

__host__ __device__ constexpr int tiles_of(int64_t n) { return static_cast<int>((n + kTileRows - 1) / kTileRows); }

__host__ __device__ constexpr int codes_stride(int k) { return k + kRowPad; }
constexpr int smem_bytes(int m, int k) { return m * codes_stride(k) + kScaleRows * (k / kFp8Block) * 4; }

// The prologue's step 1: codes [m][stride] and scales [k / 128][16] into shared memory. Thread i
// of a pass takes one 8-column chunk; a 128-column block is 16 consecutive chunks, so 16
// consecutive lanes (k % 128 == 0: blocks never straddle rows) and its amax is 4 shuffles away.
template <typename T, Prologue P>
__device__ void quantize_activations(const FusedArgs& p, const float* inv_rms, uint8_t* codes,
                                     float* scales) {
  const int chunks_per_row = p.k / 8, total = p.m * chunks_per_row, stride = codes_stride(p.k);
  const T* a = static_cast<const T*>(p.a);
  const uint4* norm_w = reinterpret_cast<const uint4*>(p.norm_weight);
  for (int base = 0; base < total; base += blockDim.x) {  // the same trips for every thread
    const int chunk = base + static_cast<int>(threadIdx.x);
    const bool live = chunk < total;
    const int row = live ? chunk / chunks_per_row : 0, c = live ? chunk % chunks_per_row : 0;
    Pack8<T> v;
    v.u = make_uint4(0, 0, 0, 0);
    if (live) {
      const uint4* xr = reinterpret_cast<const uint4*>(a + row * p.lda);
      v.u = __ldg(xr + c);
      if constexpr (P == Prologue::rms_norm) v.u = rms_transform<T>(v.u, __ldg(norm_w + c), inv_rms[row]);
      if constexpr (P == Prologue::swiglu) v.u = swiglu_transform<T>(v.u, __ldg(xr + chunks_per_row + c));
    }
    float amax = fp8::amax8<T>(v.u, 0.0f);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (!live) continue;
    const float s = fp8::block_scale(amax);
    *reinterpret_cast<uint2*>(codes + row * stride + c * 8) = fp8::codes8<T>(v.u, s);
    if (c % 16 == 0) scales[(c / 16) * kScaleRows + row] = s;
  }
}

// kWide: m > 8, so activation rows g + 8 exist.
template <typename T, Prologue P, bool kWide, WFormat W>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSm) gemv_fp8_quantized_kernel(FusedArgs p) {
  static_assert(W != WFormat::native);
  constexpr bool kBlockScale = W == WFormat::fp8_block;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float partial[kWarps][kTileRows * 16];
  __shared__ float inv_rms[kMaxRows];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int tiles = tiles_of(p.n), blocks_k = p.k / kFp8Block;
  const int step_begin = warp * p.steps_per_slice;
  const int step_end = min(p.k / kFp8StepCols, step_begin + p.steps_per_slice);
  const int stride = codes_stride(p.k);
  uint8_t* codes = smem;
  float* scales = reinterpret_cast<float*>(smem + p.m * stride);

  // The tile's two weight rows for this lane (rows past n read row n - 1, never stored), and
  // kGroup steps of 16 bytes from each.
  const uint8_t* w = static_cast<const uint8_t*>(p.w);
  const uint4 *w0 = nullptr, *w1 = nullptr;
  auto set_tile = [&](int tile) {
    w0 = reinterpret_cast<const uint4*>(w + int64_t{min(tile * kTileRows + g, p.n - 1)} * p.k);
    w1 = reinterpret_cast<const uint4*>(w + int64_t{min(tile * kTileRows + 8 + g, p.n - 1)} * p.k);
  };
  uint4 wv[kGroup][2];
  auto load_weight_group = [&](int s0) {
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      const int c = (s0 + u) * 4 + t;
      const bool ok = s0 + u < step_end;
      wv[u][0] = gemv_device::load_weights(w0 + c, ok);
      wv[u][1] = gemv_device::load_weights(w1 + c, ok);
    }
  };
  int tile = static_cast<int>(blockIdx.x);
  set_tile(tile);
  load_weight_group(step_begin);  // weights only: before the wait (pdl.cuh)
  pdl::wait();

  if constexpr (P == Prologue::rms_norm) {
    rows_inv_rms<T>(p, inv_rms);
    __syncthreads();
  }
  quantize_activations<T, P>(p, inv_rms, codes, scales);
  __syncthreads();

  const bool has_lo = g < p.m, has_hi = kWide && g + 8 < p.m;
  const uint4* x_lo = reinterpret_cast<const uint4*>(codes + (has_lo ? g : 0) * stride);
  const uint4* x_hi = reinterpret_cast<const uint4*>(codes + (has_hi ? g + 8 : 0) * stride);
  const uint4 zero4 = make_uint4(0, 0, 0, 0);

  while (true) {
    const float* block_scale = kBlockScale ? p.w_scale + int64_t{tile * kTileRows / kFp8Block} * blocks_k : nullptr;
    float acc[2][4] = {};
    for (int s0 = step_begin; s0 < step_end; s0 += kGroup) {
      if (s0 != step_begin) load_weight_group(s0);
      uint4 xl[kGroup], xh[kGroup];
      float scale_lo[kGroup / kStepsPerScale], scale_hi[kGroup / kStepsPerScale];
#pragma unroll
      for (int u = 0; u < kGroup; ++u) {
        const int c = (s0 + u) * 4 + t;
        const bool ok = s0 + u < step_end;
        xl[u] = ok && has_lo ? x_lo[c] : zero4;
        xh[u] = kWide && ok && has_hi ? x_hi[c] : zero4;
        if (u % kStepsPerScale == 0) {
          const int b = (s0 + u) / kStepsPerScale;
          const float ws = !ok ? 0.0f : kBlockScale ? __ldg(block_scale + b) : 1.0f;
          scale_lo[u / kStepsPerScale] = ok && has_lo ? ws * scales[b * kScaleRows + g] : 0.0f;
          scale_hi[u / kStepsPerScale] = ok && has_hi ? ws * scales[b * kScaleRows + g + 8] : 0.0f;
        }
      }
      float part[2][4];
#pragma unroll
      for (int u = 0; u < kGroup; ++u) {
        if (u % kStepsPerScale == 0) zero(part);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          gemv_device::mma_e4m3(part[r], xl[u].x, xh[u].x, xl[u].y, xh[u].y, wv[u][r].x, wv[u][r].y);
          gemv_device::mma_e4m3(part[r], xl[u].z, xh[u].z, xl[u].w, xh[u].w, wv[u][r].z, wv[u][r].w);
        }
        if (u % kStepsPerScale == kStepsPerScale - 1) {
          const float lo = scale_lo[u / kStepsPerScale], hi = scale_hi[u / kStepsPerScale];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            acc[r][0] = fmaf(lo, part[r][0], acc[r][0]);
            acc[r][1] = fmaf(lo, part[r][1], acc[r][1]);
            acc[r][2] = fmaf(hi, part[r][2], acc[r][2]);
            acc[r][3] = fmaf(hi, part[r][3], acc[r][3]);
          }
        }
      }
    }

    // The next tile's first loads go out before this one's reduction; after the block's last
    // weight stream the next kernel may take the SMs (pdl.cuh).
    const int next = tile + static_cast<int>(gridDim.x);
    if (next < tiles) {
      set_tile(next);
      load_weight_group(step_begin);
    } else {
      pdl::launch_dependents();
    }
    gemv_device::store_partial(partial[warp], acc, g, t, has_lo, has_hi);
    __syncthreads();
    // One thread per (column, row) of the tile, as gemv_fused.cu.
    const int i = threadIdx.x, row = i % 16, out_col = tile * kTileRows + i / 16;
    if (row < p.m && out_col < p.n) {
      float sum = 0.0f;
#pragma unroll
      for (int s = 0; s < kWarps; ++s) sum += partial[s][i];
      if constexpr (W == WFormat::fp8_channel) sum *= p.w_scale[out_col];
      store_out<T>(p, row, out_col, sum);
    }
    if (next >= tiles) break;
    __syncthreads();  // partial is rewritten by the next tile
    tile = next;
  }
}

template <typename T, Prologue P, bool kWide, WFormat W>
void launch_as(const FusedArgs& p, cudaStream_t s) {
  auto* kernel = gemv_fp8_quantized_kernel<T, P, kWide, W>;
  opt_in(kernel, kMaxSmem);
  // As few blocks as keep the largest number of tiles per block: the same time as two blocks per
  // SM, with fewer prologues.
  const int tiles = tiles_of(p.n), slots = kBlocksPerSm * sm_count();
  const int per_block = (tiles + slots - 1) / slots;
  const int blocks = (tiles + per_block - 1) / per_block;
  const int groups = per_block * ((p.steps_per_slice + kGroup - 1) / kGroup);
  launch_dependent_if(gemv_launch_programmatic(groups), kernel, blocks, kWarps * 32,
                      smem_bytes(p.m, p.k), s, p);
}

template <typename T, Prologue P>
void launch_prologue(const FusedArgs& p, WFormat format, cudaStream_t s) {
  const bool block = format == WFormat::fp8_block;
  if (p.m > 8)
    block ? launch_as<T, P, true, WFormat::fp8_block>(p, s) : launch_as<T, P, true, WFormat::fp8_channel>(p, s);
  else
    block ? launch_as<T, P, false, WFormat::fp8_block>(p, s) : launch_as<T, P, false, WFormat::fp8_channel>(p, s);
}

}  // namespace

bool fp8_quantized_takes(int64_t m, int64_t n, int64_t k) {
  return m >= 1 && m <= kMaxRows && k % kFp8Block == 0 && k <= (int64_t{1} << 20) &&
         n <= (int64_t{1} << 30) && smem_bytes(static_cast<int>(m), static_cast<int>(k)) <= kMaxSmem &&
         tiles_of(n) >= kMinTilesPerBlock * kBlocksPerSm * sm_count();
}

void launch_fp8_quantized(const FusedArgs& p, Prologue prologue, WFormat format, DType dtype,
                          cudaStream_t stream) {
  dispatch_float_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {  // f32 is refused by gemv_fused_applicable
      switch (prologue) {
        case Prologue::none: launch_prologue<T, Prologue::none>(p, format, stream); break;
        case Prologue::rms_norm: launch_prologue<T, Prologue::rms_norm>(p, format, stream); break;
        case Prologue::swiglu: launch_prologue<T, Prologue::swiglu>(p, format, stream); break;
      }
    }
  });
}

}  // namespace braid::cuda::gemv_fused
