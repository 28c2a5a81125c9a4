// Per-token (per-row) fp8 quantization of the activations for the per-channel fp8 GEMM
// (cuda_gemm_fp8.cpp): the dynamic per-token scheme that compressed-tensors FP8-dynamic
// checkpoints are made for. For each row r of x [m, k]:
//   s[r] = amax|x[r, :]| / 448 (1 where that is 0), q[r, c] = e4m3(x[r, c] / s[r])
// with moe_fp8_quantize's arithmetic (fp8_codes.cuh: IEEE division, round to nearest even,
// saturating), so a row quantizes as one 128-column block of moe_fp8_quantize would if it were
// the whole row.
//
// Two kernels, one block per row (grid-stride over rows), the same arithmetic and so the same bits:
// - one trip (rows of 16-byte pieces, k <= 32768): up to 1024 threads a row, each loading its (up
//   to four) pieces at once and keeping them in registers for the codes;
// - looping (any other row): 256 threads read the row twice in loops of dependent loads, once for
//   the amax and once to write the codes (the second from L1/L2): at k = 14336, 7 trips and 7
//   more, the ~10 us latency chain that the one-trip kernel takes off (docs/perf/fp8.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/moe/fp8_codes.cuh"

namespace braid::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;  // elements per 16-byte load of a 16-bit row

struct RowArgs {
  const void* x;
  int64_t x_stride;  // elements
  uint8_t* q;
  int64_t q_stride;  // bytes
  float* scale;
  int64_t rows;
  int k;
  bool vec;  // 16-byte loads of x and 8-byte stores of q
};

template <typename T>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(RowArgs a) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* x = static_cast<const T*>(a.x) + r * a.x_stride;
    uint8_t* q = a.q + r * a.q_stride;
    float amax = 0.0f;
    if (a.vec) {
      for (int c = threadIdx.x * kVec; c < a.k; c += kThreads * kVec)
        amax = fp8::amax8<T>(*reinterpret_cast<const uint4*>(x + c), amax);
    } else {
      for (int c = threadIdx.x; c < a.k; c += kThreads) amax = fmaxf(amax, fabsf(to_float(x[c])));
    }
    const float s = fp8::block_scale(block_max(amax, scratch));
    if (a.vec) {
      for (int c = threadIdx.x * kVec; c < a.k; c += kThreads * kVec)
        *reinterpret_cast<uint2*>(q + c) = fp8::codes8<T>(*reinterpret_cast<const uint4*>(x + c), s);
    } else {
      for (int c = threadIdx.x; c < a.k; c += kThreads) q[c] = fp8::to_e4m3(__fdiv_rn(to_float(x[c]), s));
    }
    if (threadIdx.x == 0) a.scale[r] = s;
    // block_max's next call writes scratch only after a barrier of its own.
  }
}

// The one-trip kernel: piece j of this thread is the row's 16-byte piece threadIdx.x + j *
// blockDim.x; blockDim.x * kPieces >= k / kVec (the launch sees to it).
constexpr int kPieces = 4;
constexpr int kMaxThreadsOneTrip = 1024;

template <typename T>
__global__ void __launch_bounds__(kMaxThreadsOneTrip) quantize_rows_one_trip_kernel(RowArgs a) {
  __shared__ float scratch[32];
  const int pieces = a.k / kVec;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* x = static_cast<const T*>(a.x) + r * a.x_stride;
    uint8_t* q = a.q + r * a.q_stride;
    uint4 v[kPieces];
#pragma unroll
    for (int j = 0; j < kPieces; ++j) {
      const int p = static_cast<int>(threadIdx.x) + j * static_cast<int>(blockDim.x);
      v[j] = p < pieces ? *reinterpret_cast<const uint4*>(x + p * kVec) : make_uint4(0, 0, 0, 0);
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kPieces; ++j) amax = fp8::amax8<T>(v[j], amax);
    const float s = fp8::block_scale(block_max(amax, scratch));
#pragma unroll
    for (int j = 0; j < kPieces; ++j) {
      const int p = static_cast<int>(threadIdx.x) + j * static_cast<int>(blockDim.x);
      if (p < pieces) *reinterpret_cast<uint2*>(q + p * kVec) = fp8::codes8<T>(v[j], s);
    }
    if (threadIdx.x == 0) a.scale[r] = s;
  }
}

}  // namespace

void fp8_quantize_rows(const Tensor& x, const Tensor& q, const Tensor& scale, Stream stream,
                       bool looping_only) {
  RowArgs a{};
  a.x = x.data;
  a.x_stride = x.row_stride();
  a.q = q.ptr<uint8_t>();
  a.q_stride = q.row_stride();
  a.scale = scale.ptr<float>();
  a.rows = x.shape[0];
  a.k = static_cast<int>(x.shape[1]);
  a.vec = a.k % kVec == 0 && aligned16(x.data) && (a.x_stride * 2) % 16 == 0 &&
          reinterpret_cast<uintptr_t>(q.data) % 8 == 0 && a.q_stride % 8 == 0;
  if (a.rows == 0) return;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(a.rows, int64_t{1} << 16));
  const auto s = static_cast<cudaStream_t>(stream.handle);
  // One trip needs 16-byte pieces and a row of at most kPieces x 1024 of them (k <= 32768).
  const int pieces = a.k / kVec;
  if (!looping_only && a.vec && pieces <= kPieces * kMaxThreadsOneTrip) {
    const int needed = (pieces + kPieces - 1) / kPieces;
    const auto threads = static_cast<unsigned>(std::max(32, (needed + 31) / 32 * 32));
    if (x.dtype == DType::f16)
      quantize_rows_one_trip_kernel<__half><<<grid, threads, 0, s>>>(a);
    else
      quantize_rows_one_trip_kernel<__nv_bfloat16><<<grid, threads, 0, s>>>(a);
    BRAID_CUDA_CHECK_LAUNCH();
    return;
  }
  if (x.dtype == DType::f16)
    quantize_rows_kernel<__half><<<grid, kThreads, 0, s>>>(a);
  else
    quantize_rows_kernel<__nv_bfloat16><<<grid, kThreads, 0, s>>>(a);
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
