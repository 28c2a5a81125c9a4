// moe_fp8_quantize and moe_gather_fp8 on the GPU (contracts in ops.h, "FP8 block scale"). Neither
// synchronises with the host, so both can be captured in a CUDA graph.
//
// Quantize: one warp per (row, 128-column block). Lane l holds the block's columns 4l .. 4l + 3
// in registers for all the terms: per term, the warp's amax by shuffles, the scale, four codes
// and the residual. The results are bit-identical to cpu::fp8_quantize_block: the divisions are
// __fdiv_rn (IEEE, whatever the compiler's division settings), the e4m3 rounding is the
// hardware's conversion (nearest even, saturating to 448, as float_to_f8e4m3), and the residual's
// product and difference are rounded separately (__fmul_rn / __fsub_rn, never fused into an FMA).
// The amax is exact in any order.
//
// Gather: one block per destination row (grid-stride), 16-byte copies where both rows allow them,
// and the row's scales (one per 128 columns, a column of the transposed scale tensors).
#include <cuda_fp8.h>

#include <algorithm>

#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/moe/fp8_codes.cuh"

namespace braid::cuda {

namespace {

constexpr int kQuantizeWarps = 8;                  // warps per block of the quantize kernel
constexpr int kPerLane = ops::kFp8Block / 32;      // columns of a block per lane

struct QuantizeArgs {
  const void* x;
  int64_t x_stride;      // elements
  uint8_t* q;
  int64_t q_stride;      // bytes
  float* scale;
  int64_t scale_stride;  // elements between scale rows
  int64_t rows;
  int k, blocks, terms;
  bool vec_x;            // 4 elements of x per load (aligned rows)
  bool vec_q;            // 4 codes per store (aligned rows)
};

__device__ __forceinline__ void load4(const float* p, bool vec, float v[kPerLane]) {
  if (vec) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  } else {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) v[i] = p[i];
  }
}

__device__ __forceinline__ void load4(const __nv_bfloat16* p, bool vec, float v[kPerLane]) {
  if (vec) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
  } else {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) v[i] = __bfloat162float(p[i]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kQuantizeWarps * 32) quantize_kernel(QuantizeArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t units = a.rows * a.blocks, stride = int64_t{gridDim.x} * kQuantizeWarps;
  // The loop is uniform across a warp, so every lane takes part in the shuffles.
  for (int64_t u = int64_t{blockIdx.x} * kQuantizeWarps + threadIdx.x / 32; u < units; u += stride) {
    const int64_t r = u / a.blocks;
    const int b = static_cast<int>(u % a.blocks);
    const int col = b * ops::kFp8Block + lane * kPerLane;
    float v[kPerLane];
    load4(static_cast<const T*>(a.x) + r * a.x_stride + col, a.vec_x, v);
    uint8_t* q = a.q + r * a.q_stride + col;
    float* scale = a.scale + b * a.scale_stride + r;
    for (int t = 0; t < a.terms; ++t) {
      float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
      amax = warp_max(amax);
      const float s = fp8::block_scale(amax);
      uint32_t codes = 0;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const uint8_t c = fp8::to_e4m3(__fdiv_rn(v[i], s));
        v[i] = __fsub_rn(v[i], __fmul_rn(fp8::e4m3_value(c), s));
        codes |= uint32_t{c} << (8 * i);  // little endian: column order
      }
      uint8_t* qt = q + int64_t{t} * a.k;
      if (a.vec_q) {
        *reinterpret_cast<uint32_t*>(qt) = codes;
      } else {
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) qt[i] = static_cast<uint8_t>(codes >> (8 * i));
      }
      if (lane == 0) scale[int64_t{t} * a.blocks * a.scale_stride] = s;
    }
  }
}

struct GatherArgs {
  const uint8_t* x;
  int64_t x_stride;        // bytes
  const float* x_scale;
  int64_t x_scale_stride;  // elements
  const int32_t* sorted_pairs;
  int k;
  int64_t tokens;
  uint8_t* xs;
  int64_t xs_stride;
  float* xs_scale;
  int64_t xs_scale_stride;
  int64_t rows;
  int width, blocks;
  bool vec16;  // 16-byte copies
};

__global__ void __launch_bounds__(256) gather_kernel(GatherArgs a) {
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const int64_t t = a.sorted_pairs[r] / a.k;
    uint8_t* dst = a.xs + r * a.xs_stride;
    // CUDA trusts sorted_pairs (checking would need a host synchronisation); a value outside
    // [0, T * k) still never reads outside x: its row and scales are written as zeros.
    const bool valid = a.sorted_pairs[r] >= 0 && t < a.tokens;
    const uint8_t* src = a.x + (valid ? t : 0) * a.x_stride;
    if (a.vec16) {
      for (int i = threadIdx.x; i < a.width / 16; i += blockDim.x)
        reinterpret_cast<uint4*>(dst)[i] =
            valid ? reinterpret_cast<const uint4*>(src)[i] : make_uint4(0, 0, 0, 0);
    } else {
      for (int i = threadIdx.x; i < a.width; i += blockDim.x) dst[i] = valid ? src[i] : 0;
    }
    for (int b = threadIdx.x; b < a.blocks; b += blockDim.x)
      a.xs_scale[b * a.xs_scale_stride + r] = valid ? a.x_scale[b * a.x_scale_stride + t] : 0.0f;
  }
}

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

void moe_fp8_quantize(const Tensor& x, const Tensor& q, const Tensor& q_scale, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  QuantizeArgs a{};
  a.x = x.data;
  a.x_stride = x.row_stride();
  a.q = q.ptr<uint8_t>();
  a.q_stride = q.row_stride();
  a.scale = q_scale.ptr<float>();
  a.scale_stride = q_scale.row_stride();
  a.rows = x.shape[0];
  a.k = static_cast<int>(x.shape[1]);
  a.blocks = a.k / ops::kFp8Block;
  a.terms = static_cast<int>(q.shape[1] / x.shape[1]);
  const int vec_bytes = kPerLane * static_cast<int>(dtype_size(x.dtype));
  a.vec_x = aligned(x.data, vec_bytes) && (a.x_stride * dtype_size(x.dtype)) % vec_bytes == 0;
  a.vec_q = aligned(q.data, kPerLane) && a.q_stride % kPerLane == 0;
  const int64_t units = a.rows * a.blocks;
  const int64_t max_grid = int64_t{1} << 20;  // the kernel strides past it
  const auto grid = static_cast<unsigned>(std::min((units + kQuantizeWarps - 1) / kQuantizeWarps, max_grid));
  if (x.dtype == DType::f32)
    quantize_kernel<float><<<grid, kQuantizeWarps * 32, 0, s>>>(a);
  else
    quantize_kernel<__nv_bfloat16><<<grid, kQuantizeWarps * 32, 0, s>>>(a);
  BRAID_CUDA_CHECK_LAUNCH();
}

void moe_gather_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& sorted_pairs, int k,
                    const Tensor& xs, const Tensor& xs_scale, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  GatherArgs a{};
  a.x = x.ptr<uint8_t>();
  a.x_stride = x.row_stride();
  a.x_scale = x_scale.ptr<float>();
  a.x_scale_stride = x_scale.row_stride();
  a.sorted_pairs = sorted_pairs.ptr<int32_t>();
  a.k = k;
  a.tokens = x.shape[0];
  a.xs = xs.ptr<uint8_t>();
  a.xs_stride = xs.row_stride();
  a.xs_scale = xs_scale.ptr<float>();
  a.xs_scale_stride = xs_scale.row_stride();
  a.rows = xs.shape[0];
  a.width = static_cast<int>(x.shape[1]);
  a.blocks = a.width / ops::kFp8Block;
  a.vec16 = aligned(x.data, 16) && aligned(xs.data, 16) && a.x_stride % 16 == 0 &&
            a.xs_stride % 16 == 0;  // the width is a multiple of 128
  const auto grid = static_cast<unsigned>(std::min<int64_t>(a.rows, 65535 * 8));
  gather_kernel<<<grid, 256, 0, s>>>(a);
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
