// fp8 e4m3 on the device, as moe_fp8_quantize defines the block scaling (ops.h); shared by its
// kernel, the FP8 grouped GEMM's quantizing epilogues, the per-row quantizer (fp8_quantize_rows.cu)
// and moe_experts' quantized tile, so that they agree bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "ops/cuda/common.cuh"

namespace braid::cuda::fp8 {

constexpr float kE4m3Max = 448.0f;

// Rounded to nearest even, saturated to +-448 (NaN stays NaN).
__device__ __forceinline__ uint8_t to_e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// Exact: every e4m3 value is an f16 value.
__device__ __forceinline__ float e4m3_value(uint8_t c) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3)));
}

// A block's scale: amax / 448 (IEEE division, whatever the compiler's settings), or 1 where that
// is 0 (an all-zero block, or one so small that amax / 448 underflows; dividing by 0 would turn
// zeros into NaN).
__device__ __forceinline__ float block_scale(float amax) {
  const float s = __fdiv_rn(amax, kE4m3Max);
  return s == 0.0f ? 1.0f : s;
}

// The largest |x| of eight elements of T packed in a 16-byte word, and amax.
template <typename T>
__device__ __forceinline__ float amax8(uint4 v, float amax) {
  const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(to_float(e[i])));
  return amax;
}

// The e4m3 codes of eight elements of T divided by s, as an 8-byte word.
template <typename T>
__device__ __forceinline__ uint2 codes8(uint4 v, float s) {
  const T* e = reinterpret_cast<const T*>(&v);
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    lo |= uint32_t{fp8::to_e4m3(__fdiv_rn(to_float(e[i]), s))} << (8 * i);
    hi |= uint32_t{fp8::to_e4m3(__fdiv_rn(to_float(e[i + 4]), s))} << (8 * i);
  }
  return make_uint2(lo, hi);
}

}  // namespace braid::cuda::fp8
