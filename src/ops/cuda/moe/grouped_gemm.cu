// moe_grouped_gemm on CUDA: the Hopper kernel (grouped_gemm_sm90.cuh) where it applies, else a
// simple kernel, correct for every dtype, stride and size and meant for those leftovers (f32,
// K < 64 or not a multiple of 8, devices without sm_90a): one thread per output element, a warp
// on 32 consecutive columns of one row, each row's expert found by binary search in the offsets.
// BRAID_GROUPED_GEMM_SM90=0 forces the simple kernel, here and for the FP8 grouped GEMM (for
// comparison and for testing it on H100).
#include <cstdlib>
#include <string>

#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/launch_util.h"
#include "ops/cuda/moe/grouped_gemm_sm90.h"
#include "ops/cuda/moe/tile_schedule.cuh"

namespace braid::cuda {

namespace {

constexpr int kRowsPerBlock = 8;

struct SimpleArgs {
  const void* x;
  const void* w;
  const int32_t* offsets;
  void* y;
  int64_t x_stride, y_stride, m, k;
  int experts, w_rows, out_cols;
};

template <typename T>
__device__ float dot_row(const T* a, const T* b, int64_t k) {
  float s = 0.0f;
  for (int64_t i = 0; i < k; ++i) s += to_float(a[i]) * to_float(b[i]);
  return s;
}

template <typename T, bool kSwiglu>
__global__ void __launch_bounds__(32 * kRowsPerBlock) grouped_gemm_simple_kernel(SimpleArgs a) {
  const int col = blockIdx.x * 32 + threadIdx.x % 32;
  for (int64_t r = int64_t{blockIdx.y} * kRowsPerBlock + threadIdx.x / 32; r < a.m;
       r += int64_t{gridDim.y} * kRowsPerBlock) {
    const int e = moe_tiles::expert_of_row(a.offsets, a.experts, r);
    if (e < 0 || col >= a.out_cols) continue;
    const T* xr = static_cast<const T*>(a.x) + r * a.x_stride;
    const T* wr = static_cast<const T*>(a.w) + (int64_t{e} * a.w_rows + col) * a.k;
    float v = dot_row(xr, wr, a.k);
    if constexpr (kSwiglu) v = swiglu_rounded<T>(v, dot_row(xr, wr + int64_t{a.out_cols} * a.k, a.k));
    static_cast<T*>(a.y)[r * a.y_stride + col] = from_float<T>(v);
  }
}

}  // namespace

bool grouped_gemm::use_sm90() {
  static const bool use = [] {
    const char* e = std::getenv("BRAID_GROUPED_GEMM_SM90");
    return !(e && std::string(e) == "0") && device_runs_sm90a();
  }();
  return use;
}

void moe_grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& expert_offsets,
                      ops::MoeActivation activation, const Tensor& y, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  const bool swiglu = activation == ops::MoeActivation::swiglu;
  if (grouped_gemm::use_sm90()) {
    if (x.dtype == DType::bf16 && grouped_gemm::launch_sm90_bf16(x, w, expert_offsets, swiglu, y, s))
      return;
    if (x.dtype == DType::f16 && grouped_gemm::launch_sm90_f16(x, w, expert_offsets, swiglu, y, s))
      return;
  }
  SimpleArgs a{x.data, w.data, expert_offsets.ptr<int32_t>(), y.data, x.row_stride(),
               y.row_stride(), x.shape[0], x.shape[1], static_cast<int>(w.shape[0]),
               static_cast<int>(w.shape[1]), static_cast<int>(swiglu ? w.shape[1] / 2 : w.shape[1])};
  const dim3 grid(static_cast<unsigned>((a.out_cols + 31) / 32),
                  static_cast<unsigned>(std::min<int64_t>((a.m + kRowsPerBlock - 1) / kRowsPerBlock, 65535)));
  dispatch_float_type(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (swiglu)
      grouped_gemm_simple_kernel<T, true><<<grid, 32 * kRowsPerBlock, 0, s>>>(a);
    else
      grouped_gemm_simple_kernel<T, false><<<grid, 32 * kRowsPerBlock, 0, s>>>(a);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
