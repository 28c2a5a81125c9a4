// Device helpers for the benchmarks (see kernels.h).
#include <string>

#include "bench/harness/cuda/kernels.h"
#include "braid/error.h"
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"

namespace braid::bench {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
__global__ void fill_uniform_kernel(T* out, int64_t n, uint64_t seed, float lo, float span) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    // 24 random bits -> [0, 1): exact in fp32.
    const uint64_t h = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(i)));
    const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
    out[i] = cuda::from_float<T>(lo + span * u);
  }
}

__global__ void copy16_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = src[i];
}

__global__ void empty_kernel() {}

__global__ void minimal_rw_kernel(const int* in, int* out) { out[0] = in[0] + 1; }

}  // namespace

void fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi, Stream stream) {
  if (!t.device.is_cuda() || !t.is_contiguous() || !is_floating(t.dtype) ||
      dtype_size(t.dtype) == 1)
    throw_arg_error(ErrorKind::invalid_argument, "fill_uniform", "t",
                    "a contiguous f32/f16/bf16 CUDA tensor", describe(t));
  const int64_t n = t.numel();
  if (n == 0) return;
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < 8192 ? wanted : 8192);
  auto s = static_cast<cudaStream_t>(stream.handle);
  cuda::dispatch_float_type(t.dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_uniform_kernel<T><<<blocks, kThreads, 0, s>>>(t.ptr<T>(), n, seed, lo, hi - lo);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

int copy_kernel_blocks() {
  int device = 0, sms = 0, per_sm = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&device));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  BRAID_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, copy16_kernel, kThreads, 0));
  return sms * (per_sm > 0 ? per_sm : 1);
}

void copy_kernel(const void* src, void* dst, size_t bytes, int blocks, Stream stream) {
  if (bytes % 16 != 0)
    throw_arg_error(ErrorKind::invalid_argument, "copy_kernel", "bytes", "a multiple of 16",
                    std::to_string(bytes));
  if (!cuda::aligned16(src) || !cuda::aligned16(dst))
    throw_arg_error(ErrorKind::invalid_argument, "copy_kernel", "src/dst",
                    "16-byte aligned pointers", "a misaligned pointer");
  if (bytes == 0) return;
  if (blocks <= 0) blocks = copy_kernel_blocks();
  copy16_kernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                  static_cast<cudaStream_t>(stream.handle)>>>(
      static_cast<const uint4*>(src), static_cast<uint4*>(dst), bytes / 16);
  BRAID_CUDA_CHECK_LAUNCH();
}

void launch_empty_kernel(Stream stream) {
  empty_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream.handle)>>>();
  BRAID_CUDA_CHECK_LAUNCH();
}

void launch_minimal_rw_kernel(const int* in, int* out, Stream stream) {
  minimal_rw_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream.handle)>>>(in, out);
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::bench
