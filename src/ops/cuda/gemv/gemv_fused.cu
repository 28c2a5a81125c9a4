// GEMV with a fused prologue (rms_norm or swiglu on the activations) and epilogue (add into the
// residual): see gemv_fused.h for the ops and gemv.cu for the product's design, which this kernel
// follows with its default launch (one 16-row tile of w per block, k split over the 8 warps, the
// partial sums added in shared memory). Only the activation loads and the stores differ:
//   - the activations of a step are transformed in registers between their load and the mma:
//     rms_norm rounds x * inv_rms to the dtype and then weight * that (Hugging Face's two
//     roundings); swiglu rounds silu(gate) * up once (silu_mul's rounding). The transform of a
//     zero (a row past m, a predicated-off load) is zero, so padding stays padding;
//   - rms_norm needs each row's 1 / rms before the first step: every block reads the m rows once
//     (m * k elements from L2, against the 16 * k of w the block streams) and keeps 16 floats in
//     shared memory, so there is no second kernel and no grid-wide dependency;
//   - the add epilogue rounds the product (+ bias) to the dtype, adds the residual element, and
//     rounds again: the one thread that owns an output element reads and writes it;
//   - the argmax epilogue (greedy decoding's LM head) writes no logits: each block reduces its 16
//     columns to one (value, index) key per row and stores it; a second, one-block-per-row kernel
//     reduces the blocks' keys to the ids. (Finding the last block with a fence and a global
//     counter instead made the 128k x 2048 head 20 us slower on the H100: each block's fence
//     and atomic round trip prolonged a ~6 us block by ~0.7 us.) Keys order as torch.argmax
//     does (NaN above all numbers, ties to the lower index), and the order is total, so the
//     answer does not depend on the reduction's order.
//
// FP8 weights (e4m3, DeepSeek-V3 / Qwen3-FP8 checkpoints; the activations stay f16/bf16): a step
// is 64 columns, each lane loading 16 bytes (16 weights) per row, as for 16-bit weights, and the
// activations of those 16 columns as two 8-column chunks; each half of the weights becomes the 8
// exact values of T that a 16-bit load would have given (gemv_device::fp8x8_to) and goes with its
// chunk into the same two mmas as a 16-bit step. (Loading 8 bytes per lane in 32-column steps
// instead, the 16-bit kernel's step unchanged, reached only 50-70 % of the copy bandwidth on an
// H200 with 4 or 8 steps in flight alike: every load instruction then fetches 32-byte row
// segments, half the bytes per L1 request of the 16-bit kernel.) The scales:
//   - per output channel (w_scale [n, 1]): constant along k, so the finished sum is scaled once
//     in the epilogue, before the bias and the add;
//   - per 128 x 128 block (w_scale [ceil(n / 128), k / 128]): a 16-row tile lies inside one
//     128-row block, so the warp needs one scale per 128 columns. Each warp's k slice is a whole
//     number of 128-column blocks; the mmas of the steps of one block go into a zeroed `part`
//     and `acc += scale * part` closes the block (one uniform 4-byte load per block, issued with
//     the weight loads).
// The 16-bit kernels are the WFormat::native instantiations, untouched by this. Where
// gemv_fp8_quantizes (the e4m3 activation setting, and n wide enough), fp8 products go to
// gemv_fp8_quantized.cu's kernel instead (launch, below), on the fp8 tensor cores.

#include <atomic>
#include <climits>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "braid/error.h"
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemv/gemv_device.cuh"
#include "ops/cuda/gemv/gemv_fused.h"
#include "ops/cuda/gemv/gemv_fused_device.cuh"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

using namespace gemv_fused;
using gemv_device::load_weights;
using gemv_device::mma;

// 32-column steps in one group of loads (the kernel's kUnroll; fp8 takes half as many 64-column
// steps): swiglu's two activation loads per row halve it when both rows are live, to stay inside
// the 128 registers of 2 blocks per SM.
constexpr int group_steps(Prologue p, bool wide) { return (p == Prologue::swiglu && wide) ? 2 : 4; }

// An argmax key: the value's bits mapped to an unsigned order (NaN highest, -0 as +0) above the
// complement of the index (lower index, larger key). 0 is below every real key.
__device__ __forceinline__ unsigned long long argmax_key(float v, int index) {
  uint32_t bits = __float_as_uint(v == 0.0f ? 0.0f : v);
  bits = isnan(v) ? 0xffffffffu : ((bits & 0x80000000u) ? ~bits : bits | 0x80000000u);
  return (static_cast<unsigned long long>(bits) << 32) | (0xffffffffu - static_cast<uint32_t>(index));
}

__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The argmax epilogue, run by all 256 threads of the block; thread i holds the sum of output
// column tile * 16 + i / 16 for activation row i % 16. Writes keys[row, tile].
__device__ void argmax_epilogue(const FusedArgs& p, int tile, float sum) {
  __shared__ unsigned long long keys[kTileRows * 16];
  const int i = threadIdx.x, row = i % 16, col = tile * kTileRows + i / 16;
  keys[i] = (row < p.m && col < p.n) ? argmax_key(sum, col) : 0ull;
  __syncthreads();
  if (i >= p.m) return;
  unsigned long long best = 0;
#pragma unroll
  for (int c = 0; c < kTileRows; ++c) best = max(best, keys[c * 16 + i]);
  p.argmax_keys[int64_t{i} * gridDim.x + tile] = best;
}

// One block per activation row: the largest of the row's `blocks` keys, as an index. The keys
// are in L2 (the GEMV just wrote them), so the time is round trips: 1024 threads with
// kArgmaxLoads independent loads each cover a 128k vocabulary's 8016 keys in two round trips (a
// 256-thread loop with one load per trip took 8 us, docs/perf/decode.md).
constexpr int kArgmaxThreads = 1024;
constexpr int kArgmaxLoads = 4;
__global__ void __launch_bounds__(kArgmaxThreads) argmax_keys_kernel(const unsigned long long* keys,
                                                                    int blocks, void* ids,
                                                                    bool ids_i64) {
  __shared__ unsigned long long warp_keys[kArgmaxThreads / 32];
  pdl::wait_then_release();
  const int row = static_cast<int>(blockIdx.x), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned long long* row_keys = keys + int64_t{row} * blocks;
  unsigned long long best[kArgmaxLoads] = {};
  for (int b = threadIdx.x; b < blocks; b += kArgmaxLoads * kArgmaxThreads) {
#pragma unroll
    for (int u = 0; u < kArgmaxLoads; ++u) {
      const int i = b + u * kArgmaxThreads;
      if (i < blocks) best[u] = max(best[u], row_keys[i]);
    }
  }
#pragma unroll
  for (int u = 1; u < kArgmaxLoads; ++u) best[0] = max(best[0], best[u]);
  const unsigned long long warp_best = warp_max(best[0]);
  if (lane == 0) warp_keys[warp] = warp_best;
  __syncthreads();
  if (warp != 0) return;
  const unsigned long long top = warp_max(warp_keys[lane]);  // kArgmaxThreads / 32 == 32 warps
  if (lane != 0) return;
  const uint32_t index = 0xffffffffu - static_cast<uint32_t>(top & 0xffffffffu);
  if (ids_i64)
    static_cast<int64_t*>(ids)[row] = index;
  else
    static_cast<int32_t*>(ids)[row] = static_cast<int32_t>(index);
}
static_assert(kArgmaxThreads == 32 * 32, "the last reduction is one warp over one key per warp");

// kWide: m > 8, so activation rows g + 8 exist.
template <typename T, Prologue P, bool kWide, WFormat W = WFormat::native>
__global__ void __launch_bounds__(kWarps * 32, 2) gemv_fused_kernel(FusedArgs p) {
  constexpr int kUnroll = group_steps(P, kWide);
  constexpr bool kFp8 = W != WFormat::native;
  constexpr bool kBlockScale = W == WFormat::fp8_block;
  // fp8: steps of 64 columns, half as many in flight (the same weight bytes and activation
  // registers per group as 16-bit's).
  constexpr int kUnroll8 = kUnroll / 2;
  // fp8 steps that share one block scale inside a group (groups start at multiples of kUnroll8,
  // slices at multiples of kStepsPerScale, so a run never straddles two blocks).
  constexpr int kRun = kUnroll8 < kStepsPerScale ? kUnroll8 : kStepsPerScale;
  static_assert(kStepsPerScale % kRun == 0 && kUnroll8 % kRun == 0);
  __shared__ float partial[kWarps][kTileRows * 16];
  __shared__ float inv_rms[kMaxRows];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int tile = static_cast<int>(blockIdx.x);
  const int chunks = p.k / 8;  // 16-byte chunks per row
  const T* a = static_cast<const T*>(p.a);

  constexpr int kCols = kFp8 ? kFp8StepCols : kStepCols;
  const int steps = (p.k + kCols - 1) / kCols;
  const int step_begin = warp * p.steps_per_slice;
  const int step_end = min(steps, step_begin + p.steps_per_slice);

  // Rows past n read row n - 1 (a valid address) and are never stored. Weight pointers are in
  // 16-byte chunks: 8 columns of T, or 16 of fp8.
  using WElem = std::conditional_t<kFp8, uint8_t, T>;
  const int row0 = min(tile * kTileRows + g, p.n - 1), row1 = min(tile * kTileRows + 8 + g, p.n - 1);
  const uint4* w0 = reinterpret_cast<const uint4*>(static_cast<const WElem*>(p.w) + int64_t{row0} * p.k);
  const uint4* w1 = reinterpret_cast<const uint4*>(static_cast<const WElem*>(p.w) + int64_t{row1} * p.k);
  // Block scales: the tile's 16 rows lie in 128-row block tile / 8; one scale per 128 columns.
  const float* block_scale = nullptr;
  if constexpr (kBlockScale) block_scale = p.w_scale + int64_t{tile * kTileRows / kFp8Block} * (p.k / kFp8Block);
  const bool has_lo = g < p.m, has_hi = kWide && g + 8 < p.m;
  const uint4* x_lo = reinterpret_cast<const uint4*>(a + (has_lo ? g * p.lda : 0));
  const uint4* x_hi = reinterpret_cast<const uint4*>(a + (has_hi ? (g + 8) * p.lda : 0));
  const uint4* norm_w = reinterpret_cast<const uint4*>(p.norm_weight);
  // The first group of weight loads depends on nothing: issued before waiting for the kernel
  // before this one (pdl.cuh), they overlap its tail, and so does this kernel's launch.
  constexpr int kGroup = kFp8 ? kUnroll8 : kUnroll;
  uint4 wv[kGroup][2];
  auto load_weight_group = [&](int s0) {
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      const int c = (s0 + u) * 4 + t;  // fp8: k % 128 == 0, so a step's columns all exist
      const bool ok = s0 + u < step_end && (kFp8 || c < chunks);
      wv[u][0] = load_weights(w0 + c, ok);
      wv[u][1] = load_weights(w1 + c, ok);
    }
  };
  load_weight_group(step_begin);
  pdl::wait();

  float scale_lo = 0.0f, scale_hi = 0.0f;
  if constexpr (P == Prologue::rms_norm) {
    rows_inv_rms<T>(p, inv_rms);
    __syncthreads();

    scale_lo = has_lo ? inv_rms[g] : 0.0f;
    scale_hi = has_hi ? inv_rms[g + 8] : 0.0f;
  }

  float acc[2][4] = {};
  if constexpr (kFp8) {
    float part[2][4];  // fp8_block: one run's unscaled sums
    for (int s0 = step_begin; s0 < step_end; s0 += kUnroll8) {
      if (s0 != step_begin) load_weight_group(s0);
      // [step][half]: the activation chunks of the lane's 16 columns (8 each).
      uint4 xl[kUnroll8][2], xh[kUnroll8][2], el[kUnroll8][2], eh[kUnroll8][2], nw[kUnroll8][2];
      [[maybe_unused]] float scale[kUnroll8 / kRun];  // the group's runs' block scales
#pragma unroll
      for (int u = 0; u < kUnroll8; ++u) {
        const int c = (s0 + u) * 4 + t;   // 16-byte weight chunk: columns 16c .. 16c + 15
        const bool ok = s0 + u < step_end;  // k % 128 == 0: a step's columns all exist
        if constexpr (kBlockScale) {
          if (u % kRun == 0) scale[u / kRun] = ok ? __ldg(block_scale + (s0 + u) / kStepsPerScale) : 0.0f;
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int ac = 2 * c + h;  // 8-column activation chunk
          xl[u][h] = load_activations(x_lo + ac, ok && has_lo);
          xh[u][h] = kWide ? load_activations(x_hi + ac, ok && has_hi) : make_uint4(0, 0, 0, 0);
          if constexpr (P == Prologue::rms_norm) nw[u][h] = load_activations(norm_w + ac, ok);
          if constexpr (P == Prologue::swiglu) {
            el[u][h] = load_activations(x_lo + chunks + ac, ok && has_lo);
            eh[u][h] = kWide ? load_activations(x_hi + chunks + ac, ok && has_hi) : make_uint4(0, 0, 0, 0);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll8; ++u) {
        // The run's sums go into `part` (zeroed at its first step) when its scale comes after.
        float (&sums)[2][4] = kBlockScale ? part : acc;
        if (kBlockScale && u % kRun == 0) zero(part);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if constexpr (P == Prologue::rms_norm) {
            xl[u][h] = rms_transform<T>(xl[u][h], nw[u][h], scale_lo);
            if constexpr (kWide) xh[u][h] = rms_transform<T>(xh[u][h], nw[u][h], scale_hi);
          }
          if constexpr (P == Prologue::swiglu) {
            xl[u][h] = swiglu_transform<T>(xl[u][h], el[u][h]);
            if constexpr (kWide) xh[u][h] = swiglu_transform<T>(xh[u][h], eh[u][h]);
          }
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const uint4 wr = gemv_device::fp8x8_to<T>(h == 0 ? make_uint2(wv[u][r].x, wv[u][r].y)
                                                             : make_uint2(wv[u][r].z, wv[u][r].w));
            mma<T>(sums[r], xl[u][h].x, xh[u][h].x, xl[u][h].y, xh[u][h].y, wr.x, wr.y);
            mma<T>(sums[r], xl[u][h].z, xh[u][h].z, xl[u][h].w, xh[u][h].w, wr.z, wr.w);
          }
        }
        if constexpr (kBlockScale) {
          if (u % kRun == kRun - 1) {
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
              for (int j = 0; j < 4; ++j) acc[r][j] = fmaf(scale[u / kRun], part[r][j], acc[r][j]);
          }
        }
      }
    }
  } else {
    for (int s0 = step_begin; s0 < step_end; s0 += kUnroll) {
      if (s0 != step_begin) load_weight_group(s0);
      uint4 xl[kUnroll], xh[kUnroll], el[kUnroll], eh[kUnroll], nw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = (s0 + u) * 4 + t;
        const bool ok = s0 + u < step_end && c < chunks;
        xl[u] = load_activations(x_lo + c, ok && has_lo);
        xh[u] = kWide ? load_activations(x_hi + c, ok && has_hi) : make_uint4(0, 0, 0, 0);
        if constexpr (P == Prologue::rms_norm) nw[u] = load_activations(norm_w + c, ok);
        if constexpr (P == Prologue::swiglu) {  // up sits k columns (chunks chunks) after gate
          el[u] = load_activations(x_lo + chunks + c, ok && has_lo);
          eh[u] = kWide ? load_activations(x_hi + chunks + c, ok && has_hi) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if constexpr (P == Prologue::rms_norm) {
          xl[u] = rms_transform<T>(xl[u], nw[u], scale_lo);
          if constexpr (kWide) xh[u] = rms_transform<T>(xh[u], nw[u], scale_hi);
        }
        if constexpr (P == Prologue::swiglu) {
          xl[u] = swiglu_transform<T>(xl[u], el[u]);
          if constexpr (kWide) xh[u] = swiglu_transform<T>(xh[u], eh[u]);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          mma<T>(acc[r], xl[u].x, xh[u].x, xl[u].y, xh[u].y, wv[u][r].x, wv[u][r].y);
          mma<T>(acc[r], xl[u].z, xh[u].z, xl[u].w, xh[u].w, wv[u][r].z, wv[u][r].w);
        }
      }
    }
  }

  // The next kernel's blocks may take the SMs from here on: only the reduction is left, so
  // their early weight loads no longer compete with this kernel's (pdl.cuh).
  pdl::launch_dependents();
  // rms_norm_gemm_keep_normed: block 0 writes the normed rows (rms_transform's bits, those the
  // product used), after its product so that the loop above stays the same for every block.
  if constexpr (P == Prologue::rms_norm) {
    if (p.normed && tile == 0) {
      const uint4* x = reinterpret_cast<const uint4*>(a);
      uint4* normed = static_cast<uint4*>(p.normed);
      for (int i = threadIdx.x; i < p.m * chunks; i += blockDim.x) {
        const int row = i / chunks, c = i % chunks;
        normed[row * p.ldn / 8 + c] =
            rms_transform<T>(__ldg(x + row * p.lda / 8 + c), __ldg(norm_w + c), inv_rms[row]);
      }
    }
  }
  gemv_device::store_partial(partial[warp], acc, g, t, has_lo, has_hi);
  __syncthreads();

  // One thread per (column, row) of the tile: 256 threads, 256 elements.
  const int i = threadIdx.x, row = i % 16, out_col = tile * kTileRows + i / 16;
  float sum = 0.0f;
#pragma unroll
  for (int s = 0; s < kWarps; ++s) sum += partial[s][i];  // rows >= m: never used
  if constexpr (W == WFormat::fp8_channel) sum *= p.w_scale[min(out_col, p.n - 1)];
  if (p.argmax_keys) return argmax_epilogue(p, tile, sum);
  if (row >= p.m || out_col >= p.n) return;
  store_out<T>(p, row, out_col, sum);
}

// The format of w: native (its dtype is the activations'), or e4m3 with its scales' layout read
// from w_scale's shape. Throws braid::Error for fp8 scales that fit neither layout.
WFormat weight_format(const char* op, const Tensor& w, const Tensor& w_scale, int64_t k) {
  if (w.dtype != DType::f8e4m3) return WFormat::native;
  const int64_t n = w.size(0);
  const std::string where = std::string(op) + ": 'w_scale' of f8e4m3 'w' [" + std::to_string(n) +
                            ", " + std::to_string(k) + "]";
  if (!w_scale.data || w_scale.dtype != DType::f32 || !w_scale.device.is_cuda() ||
      !w_scale.is_contiguous())
    throw Error(ErrorKind::invalid_argument, where + ": expected a contiguous f32 CUDA tensor");
  if (w_scale.ndim == 2 && w_scale.size(0) == (n + kFp8Block - 1) / kFp8Block &&
      w_scale.size(1) == k / kFp8Block)
    return WFormat::fp8_block;  // (n = 1, k = 128: [1, 1] is both layouts, with one meaning)
  if (w_scale.ndim == 2 && w_scale.size(0) == n && w_scale.size(1) == 1) return WFormat::fp8_channel;
  throw Error(ErrorKind::shape, where + ": expected [" + std::to_string((n + kFp8Block - 1) / kFp8Block) +
                                    ", " + std::to_string(k / kFp8Block) + "] (128 x 128 blocks) or [" +
                                    std::to_string(n) + ", 1] (per channel)");
}

// The product's arguments; the output is set by with_out (or the argmax epilogue's fields).
FusedArgs make_args(const Tensor& a, int64_t k, const Tensor& w, const Tensor& bias,
                    WFormat format = WFormat::native, const Tensor& w_scale = Tensor{}) {
  FusedArgs p{};
  p.a = a.data;
  p.w = w.data;
  p.bias = bias.data;
  p.m = static_cast<int>(a.size(0));
  p.k = static_cast<int>(k);
  p.n = static_cast<int>(w.size(0));
  p.lda = p.m > 1 ? a.row_stride() : 0;
  const int step_cols = format == WFormat::native ? kStepCols : kFp8StepCols;
  const int steps = (p.k + step_cols - 1) / step_cols;
  p.steps_per_slice = (steps + kWarps - 1) / kWarps;
  // fp8: whole 128-column blocks per warp (k % 128 == 0), for the weights' block scales and the
  // quantized path's activation scales.
  if (format != WFormat::native)
    p.steps_per_slice = (p.steps_per_slice + kStepsPerScale - 1) / kStepsPerScale * kStepsPerScale;
  if (format != WFormat::native) p.w_scale = static_cast<const float*>(w_scale.data);
  return p;
}

FusedArgs with_out(FusedArgs p, const Tensor& out) {
  p.out = out.data;
  p.ldo = p.m > 1 ? out.row_stride() : 0;
  p.out_f32 = out.dtype == DType::f32;
  return p;
}

template <Prologue P, WFormat W>
void launch_as(const FusedArgs& p, DType dtype, cudaStream_t s) {
  const auto blocks = static_cast<unsigned>((p.n + kTileRows - 1) / kTileRows);
  const int group = group_steps(P, p.m > 8) / (W == WFormat::native ? 1 : 2);  // kUnroll(8)
  const bool programmatic = gemv_launch_programmatic((p.steps_per_slice + group - 1) / group);
  dispatch_float_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {  // f32 is refused by gemv_fused_applicable
      if (p.m > 8)
        launch_dependent_if(programmatic, gemv_fused_kernel<T, P, true, W>, blocks, kWarps * 32, 0,
                            s, p);
      else
        launch_dependent_if(programmatic, gemv_fused_kernel<T, P, false, W>, blocks, kWarps * 32,
                            0, s, p);
    }
  });
}

template <Prologue P>
void launch(const FusedArgs& p, DType dtype, Stream stream, WFormat format = WFormat::native) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (format != WFormat::native && gemv_fp8_quantizes(p.m, p.n, p.k)) {
    launch_fp8_quantized(p, P, format, dtype, s);
    BRAID_CUDA_CHECK_LAUNCH();
    return;
  }
  switch (format) {
    case WFormat::native: launch_as<P, WFormat::native>(p, dtype, s); break;
    case WFormat::fp8_channel: launch_as<P, WFormat::fp8_channel>(p, dtype, s); break;
    case WFormat::fp8_block: launch_as<P, WFormat::fp8_block>(p, dtype, s); break;
  }
  BRAID_CUDA_CHECK_LAUNCH();
}

std::atomic<Fp8GemvActivations>& fp8_activations_setting() {
  static std::atomic<Fp8GemvActivations> setting{[] {
    const char* v = std::getenv("BRAID_FP8_GEMV");
    return v && std::string(v) == "exact" ? Fp8GemvActivations::exact : Fp8GemvActivations::e4m3;
  }()};
  return setting;
}

}  // namespace

Fp8GemvActivations fp8_gemv_activations() { return fp8_activations_setting().load(); }
void set_fp8_gemv_activations(Fp8GemvActivations a) { fp8_activations_setting().store(a); }
bool gemv_fp8_quantizes(int64_t m, int64_t n, int64_t k) {
  return fp8_gemv_activations() == Fp8GemvActivations::e4m3 && fp8_quantized_takes(m, n, k);
}

bool gemv_fused_applicable(const Tensor& a, int64_t k, const Tensor& w) {
  if (!a.device.is_cuda() || (a.dtype != DType::f16 && a.dtype != DType::bf16)) return false;
  if (w.dtype != a.dtype && w.dtype != DType::f8e4m3) return false;
  if (w.dtype == DType::f8e4m3 && k % kFp8Block != 0) return false;  // whole scale blocks per warp
  const int64_t m = a.size(0), n = w.size(0);
  if (m < 1 || m > kMaxRows || k % 8 != 0) return false;
  if (n > INT_MAX / 2 || a.size(1) > INT_MAX / 2) return false;  // int column indices
  if (!aligned16(a.data) || !aligned16(w.data)) return false;
  return m == 1 || (a.row_stride() * static_cast<int64_t>(dtype_size(a.dtype))) % 16 == 0;
}

void gemv_rms_norm(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                   const Tensor& w_scale, const Tensor& bias, const Tensor& out,
                   const Tensor& normed, Stream stream) {
  const WFormat format = weight_format("gemv_rms_norm", w, w_scale, x.size(1));
  FusedArgs p = with_out(make_args(x, x.size(1), w, bias, format, w_scale), out);
  p.norm_weight = norm_weight.data;
  p.eps = eps;
  if (normed.data && format != WFormat::native)  // the fp8 kernels do not write it
    throw Error(ErrorKind::internal, "gemv_rms_norm: normed is written with 16-bit weights only");
  p.normed = normed.data;
  p.ldn = p.m > 1 ? normed.row_stride() : 0;
  launch<Prologue::rms_norm>(p, x.dtype, stream, format);
}

int64_t gemv_argmax_keys(int64_t m, int64_t n) { return m * ((n + kTileRows - 1) / kTileRows); }

void gemv_argmax(const Tensor& a, const Tensor& norm_weight, float eps, const Tensor& w,
                 const Tensor& ids, void* keys, Stream stream) {
  FusedArgs p = make_args(a, a.size(1), w, Tensor{});
  p.norm_weight = norm_weight.data;
  p.eps = eps;
  p.argmax_keys = static_cast<unsigned long long*>(keys);
  if (norm_weight.data)
    launch<Prologue::rms_norm>(p, a.dtype, stream);
  else
    launch<Prologue::none>(p, a.dtype, stream);
  const int blocks = (p.n + kTileRows - 1) / kTileRows;
  launch_programmatic(argmax_keys_kernel, static_cast<unsigned>(p.m), kArgmaxThreads, 0,
                      static_cast<cudaStream_t>(stream.handle),
                      static_cast<const unsigned long long*>(p.argmax_keys), blocks, ids.data,
                      ids.dtype == DType::i64);
  BRAID_CUDA_CHECK_LAUNCH();
}

void gemv_add(const Tensor& a, const Tensor& w, const Tensor& w_scale, const Tensor& bias,
              const Tensor& residual, Stream stream) {
  const WFormat format = weight_format("gemv_add", w, w_scale, a.size(1));
  FusedArgs p = with_out(make_args(a, a.size(1), w, bias, format, w_scale), residual);
  p.add_to_out = true;
  launch<Prologue::none>(p, a.dtype, stream, format);
}

void gemv_swiglu_add(const Tensor& gate_up, const Tensor& w, const Tensor& w_scale,
                     const Tensor& residual, Stream stream) {
  const int64_t k = gate_up.size(1) / 2;
  const WFormat format = weight_format("gemv_swiglu_add", w, w_scale, k);
  FusedArgs p = with_out(make_args(gate_up, k, w, Tensor{}, format, w_scale), residual);
  p.add_to_out = true;
  launch<Prologue::swiglu>(p, gate_up.dtype, stream, format);
}

void gemv_plain(const Tensor& a, const Tensor& w, const Tensor& w_scale, const Tensor& bias,
                const Tensor& out, Stream stream) {
  const WFormat format = weight_format("gemv_plain", w, w_scale, a.size(1));
  FusedArgs p = with_out(make_args(a, a.size(1), w, bias, format, w_scale), out);
  launch<Prologue::none>(p, a.dtype, stream, format);
}

}  // namespace braid::cuda
