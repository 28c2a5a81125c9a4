// Device side of the FP8 benchmarks' input generators (fp8_fill.h): normal fills and block
// quantization into e4m3 with fp32 scales. One thread block of 128 threads per quantization block:
// thread t owns column t of the block, takes the block's largest magnitude over its rows, and
// the block reduces it; a second pass (the values re-read, or re-drawn) writes q.
#include <cuda_fp8.h>

#include "bench/harness/cuda/fp8_fill.h"
#include "bench/harness/fp8_fill.h"
#include "bench/harness/fp8_random.h"
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"

namespace braid::bench::fp8_fill_cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kBlockCols = 128;  // one thread per column of a quantization block

__device__ __forceinline__ uint8_t to_e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

unsigned grid_for(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(wanted < 8192 ? wanted : 8192);
}

template <typename T>
__global__ void fill_normal_kernel(T* out, int64_t n, uint64_t seed, float mean, float stddev) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = cuda::from_float<T>(mean + stddev * fp8rand::normal(seed, static_cast<uint64_t>(i)));
}

__global__ void fill_fp8_normal_kernel(uint8_t* out, int64_t n, uint64_t seed, float stddev) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = to_e4m3(stddev * fp8rand::normal(seed, static_cast<uint64_t>(i)));
}

// The value of element i: read from a tensor, or drawn (src == nullptr).
template <typename T>
struct Source {
  const T* src;
  uint64_t seed;
  float stddev;
  __device__ __forceinline__ float operator()(int64_t i) const {
    if (src) return cuda::to_float(src[i]);
    return stddev * fp8rand::normal(seed, static_cast<uint64_t>(i));
  }
};

template <typename T>
__global__ void __launch_bounds__(kBlockCols)
    quantize_blocks_kernel(Source<T> source, BlockLayout l, uint8_t* q, float* scale) {
  const int64_t col_blocks = l.cols / kBlockCols, row_blocks = l.rows / l.block_rows;
  const int64_t b = blockIdx.x;
  const int64_t cb = b % col_blocks, rb = (b / col_blocks) % row_blocks,
                e = b / (col_blocks * row_blocks);
  const int64_t col = cb * kBlockCols + threadIdx.x;
  const int64_t first = (e * l.rows + rb * l.block_rows) * l.cols + col;  // row 0 of the block

  float amax = 0.0f;
  for (int r = 0; r < l.block_rows; ++r) amax = fmaxf(amax, fabsf(source(first + r * l.cols)));
  for (int off = 16; off > 0; off >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  __shared__ float warp_max[kBlockCols / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = fmaxf(fmaxf(warp_max[0], warp_max[1]), fmaxf(warp_max[2], warp_max[3]));

  const float s = fp8rand::block_scale(amax);
  if (threadIdx.x == 0)
    scale[e * l.scale_matrix_stride + rb * l.scale_row_stride + cb * l.scale_col_stride] = s;
  for (int r = 0; r < l.block_rows; ++r) {
    const int64_t i = first + r * l.cols;
    q[i] = to_e4m3(source(i) / s);
  }
}

}  // namespace

void fill_normal(const Tensor& t, uint64_t seed, float mean, float stddev, Stream stream) {
  const int64_t n = t.numel();
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (t.dtype == DType::f32)
    fill_normal_kernel<float><<<grid_for(n), kThreads, 0, s>>>(t.ptr<float>(), n, seed, mean,
                                                                stddev);
  else
    fill_normal_kernel<__nv_bfloat16><<<grid_for(n), kThreads, 0, s>>>(
        t.ptr<__nv_bfloat16>(), n, seed, mean, stddev);
  BRAID_CUDA_CHECK_LAUNCH();
}

void fill_fp8_normal(const Tensor& t, uint64_t seed, float stddev, Stream stream) {
  const int64_t n = t.numel();
  if (n == 0) return;
  fill_fp8_normal_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream.handle)>>>(
      t.ptr<uint8_t>(), n, seed, stddev);
  BRAID_CUDA_CHECK_LAUNCH();
}

void quantize_blocks(const Tensor& src, const BlockLayout& layout, uint64_t seed, float stddev,
                     const Tensor& q, const Tensor& scale, Stream stream) {
  const int64_t blocks =
      layout.matrices * (layout.rows / layout.block_rows) * (layout.cols / kBlockCols);
  if (blocks == 0) return;
  auto s = static_cast<cudaStream_t>(stream.handle);
  // One thread block per quantization block: at most 2^31 - 1 of them in x.
  const unsigned grid = static_cast<unsigned>(blocks);
  if (src.data != nullptr && src.dtype == DType::bf16)
    quantize_blocks_kernel<__nv_bfloat16><<<grid, kBlockCols, 0, s>>>(
        {src.ptr<__nv_bfloat16>(), seed, stddev}, layout, q.ptr<uint8_t>(), scale.ptr<float>());
  else
    quantize_blocks_kernel<float><<<grid, kBlockCols, 0, s>>>(
        {src.ptr<float>(), seed, stddev}, layout, q.ptr<uint8_t>(), scale.ptr<float>());
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::bench::fp8_fill_cuda
