// What the fused GEMV kernels share (gemv_fused.cu: activations in 16 bits, weights 16-bit or
// converted from e4m3; gemv_fp8_quantized.cu: e4m3 weights on the fp8 tensor cores with the
// activations quantized): the argument block, the prologue transforms with their roundings, the
// rms prologue's row statistics, and the output store. See gemv_fused.h for the ops.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "braid/dtype.h"
#include "ops/cuda/common.cuh"

namespace braid::cuda::gemv_fused {

constexpr int kTileRows = 16;  // rows of w per block
constexpr int kStepCols = 32;  // columns per step: 4 lanes x 8
constexpr int kWarps = 8;      // per block, each a slice of k
constexpr int kMaxRows = 16;   // activation rows

enum class Prologue { none, rms_norm, swiglu };

// How w is stored: in the activations' dtype, or e4m3 with one scale per output channel (applied
// in the epilogue) or per 128 x 128 block (applied per 128 columns in the loop).
enum class WFormat { native, fp8_channel, fp8_block };

constexpr int kFp8Block = 128;                              // columns (and rows) of a scale block
constexpr int kFp8StepCols = 64;                            // fp8 step: 4 lanes x 16
constexpr int kStepsPerScale = kFp8Block / kFp8StepCols;    // 2 fp8 steps per 128-column block

struct FusedArgs {
  const void* a;            // activations; swiglu: [gate | up], up at column k
  const void* w;            // [n, k]
  const void* bias;         // null for none; out's dtype
  const void* norm_weight;  // rms_norm: [k]
  void* out;                // [m, n]; the residual when add_to_out
  int64_t lda, ldo;         // row strides in elements (0 when m = 1)
  int m, n, k;
  int steps_per_slice;      // 32-column steps per warp
  float eps;
  bool out_f32, add_to_out;
  unsigned long long* argmax_keys;  // argmax epilogue (out unused): keys [m, blocks]
  const float* w_scale;     // fp8: [n] per channel, or [ceil(n / 128), k / 128] per block
  void* normed;             // rms_norm, 16-bit weights: block 0 also writes the normed rows
  int64_t ldn;              // normed's row stride
};

// 16 bytes of activations (every warp of the SM reads them: through L1); zeros when !pred.
__device__ __forceinline__ uint4 load_activations(const uint4* p, bool pred) {
  return pred ? __ldg(p) : make_uint4(0, 0, 0, 0);
}

// Eight elements of T in a uint4, as values.
template <typename T>
union Pack8 {
  uint4 u;
  T v[8];
};

// rms_norm's rounding: n = to_dtype(x * inv_rms), out = to_dtype(weight * n).
template <typename T>
__device__ __forceinline__ uint4 rms_transform(uint4 x, uint4 weight, float inv_rms) {
  Pack8<T> xv, wv, r;
  xv.u = x;
  wv.u = weight;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const T n = from_float<T>(to_float(xv.v[i]) * inv_rms);
    r.v[i] = from_float<T>(to_float(wv.v[i]) * to_float(n));
  }
  return r.u;
}

// silu_mul's rounding: to_dtype(silu(g) * u), in fp32. Every block recomputes the whole row's
// silu, and a warp pays for all 32 lanes whatever m is, so this must be a handful of instructions:
// expf and an IEEE division (silu_mul's kernel) made the fused op 3.6x slower than the unfused
// pair on the H100 (docs/perf/gemv_fused.md). __expf and __fdividef differ from them by a few
// fp32 ulps, far below the one rounding to f16/bf16 that follows; for g < -88, 1 + e^-g is inf
// and __fdividef gives -0, the limit of silu.
template <typename T>
__device__ __forceinline__ uint4 swiglu_transform(uint4 gate, uint4 up) {
  Pack8<T> gv, uv, r;
  gv.u = gate;
  uv.u = up;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float g = to_float(gv.v[i]);
    r.v[i] = from_float<T>(__fdividef(g, 1.0f + __expf(-g)) * to_float(uv.v[i]));
  }
  return r.u;
}

__device__ __forceinline__ void zero(float (&v)[2][4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int j = 0; j < 4; ++j) v[r][j] = 0.0f;
}

template <typename T>
__device__ __forceinline__ void store_out(const FusedArgs& p, int row, int col, float v) {
  if (p.out_f32) {
    if (p.bias) v += static_cast<const float*>(p.bias)[col];
    static_cast<float*>(p.out)[row * p.ldo + col] = v;
    return;
  }
  if (p.bias) v += to_float(static_cast<const T*>(p.bias)[col]);
  T* o = static_cast<T*>(p.out) + row * p.ldo + col;
  if (p.add_to_out)
    *o = from_float<T>(to_float(*o) + to_float(from_float<T>(v)));
  else
    *o = from_float<T>(v);
}

// Each row's 1 / rms (fp32 sum of squares, as rms_norm's kernel) into inv_rms[row]: warp r takes
// rows r and r + 8. Every block reads the m rows itself (m * k elements, from L2), so there is no
// second kernel and no grid-wide dependency. The caller synchronises the block after it.
template <typename T>
__device__ __forceinline__ void rows_inv_rms(const FusedArgs& p, float* inv_rms) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* a = static_cast<const T*>(p.a);
  for (int row = warp; row < p.m; row += kWarps) {
    const uint4* xr = reinterpret_cast<const uint4*>(a + row * p.lda);
    float ss = 0.0f;
    for (int c = lane; c < p.k / 8; c += 32) {
      Pack8<T> xv;
      xv.u = __ldg(xr + c);
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += to_float(xv.v[i]) * to_float(xv.v[i]);
    }
    ss = warp_sum(ss);
    if (lane == 0) inv_rms[row] = rsqrtf(ss / static_cast<float>(p.k) + p.eps);
  }
}

// The fp8 product with quantized activations (gemv_fp8_quantized.cu): whether it takes m rows
// of k columns against n rows of w (their e4m3 copy must fit the block's shared memory, and the
// block's prologue must be shared by enough tiles), and its launch, for fp8 formats and f16/bf16
// activations; p as gemv_fused.cu builds it.
bool fp8_quantized_takes(int64_t m, int64_t n, int64_t k);
void launch_fp8_quantized(const FusedArgs& p, Prologue prologue, WFormat format, DType dtype,
                          cudaStream_t stream);

}  // namespace braid::cuda::gemv_fused
