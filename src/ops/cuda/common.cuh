// Shared device helpers for braidinfer kernels: element conversion, 16-byte vectors, reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "braid/dtype.h"

namespace braid::cuda {

template <typename T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Two floats as one register of two T (low half = first: the mma operand packing, and two
// consecutive columns in memory).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// SwiGLU with the rounding of a gemm followed by silu_mul: g and u rounded to T, then
// silu(g) * u in fp32 (expf: __expf loses accuracy for large |g|); the caller rounds the result.
template <typename T>
__device__ __forceinline__ float swiglu_rounded(float g, float u) {
  const float gr = to_float(from_float<T>(g)), ur = to_float(from_float<T>(u));
  return gr / (1.0f + expf(-gr)) * ur;
}

// The shared-state-space address of a pointer into shared memory (for PTX operands).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes of T, for vectorised global loads and stores.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum; every thread gets the result. `scratch` holds 32 floats in shared memory.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Launch shape of an element-wise kernel over rows: columns in x (per_thread elements per
// thread, at most 256 threads), rows in y up to gridDim.y's 65535 (kernels stride past it).
struct RowwiseLaunch {
  dim3 grid;
  unsigned threads;
};
inline RowwiseLaunch rowwise_launch(int64_t rows, int columns_per_row, int per_thread) {
  const int columns = (columns_per_row + per_thread - 1) / per_thread;
  int threads = (columns + 31) / 32 * 32;
  threads = threads > 256 ? 256 : threads;
  return {dim3(static_cast<unsigned>((columns + threads - 1) / threads),
               static_cast<unsigned>(rows < 65535 ? rows : 65535)),
          static_cast<unsigned>(threads)};
}

// Calls f with a value of the CUDA element type for `t` (f32, f16, bf16): f(float{}) etc.
template <typename F>
void dispatch_float_type(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return;
    case DType::f16: f(__half{}); return;
    case DType::bf16: f(__nv_bfloat16{}); return;
    default: return;  // callers checked the dtype
  }
}

}  // namespace braid::cuda
