// moe_grouped_gemm_fp8 on CUDA: the Hopper kernel (grouped_gemm_fp8_sm90.cuh) where it applies,
// else a simple kernel for devices without sm_90a and for tensors TMA cannot address: one warp
// per (row, 128 output columns), four columns per lane, the block scales applied per 128-deep
// slice as the Hopper kernel does, so that a SwiGLU output can be quantized per block with a warp
// maximum. BRAID_GROUPED_GEMM_SM90=0 forces it.
#include <algorithm>

#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/moe/grouped_gemm_fp8_sm90.h"
#include "ops/cuda/moe/fp8_codes.cuh"
#include "ops/cuda/moe/grouped_gemm_sm90.h"
#include "ops/cuda/moe/tile_schedule.cuh"

namespace braid::cuda {

namespace {

constexpr int kBlock = ops::kFp8Block;
constexpr int kWarps = 8;  // rows per block of the simple kernel

enum class Out { f32, bf16, fp8 };

struct SimpleArgs {
  const uint8_t* x;
  const float* x_scale;
  const uint8_t* w;
  const float* w_scale;
  const int32_t* offsets;
  void* y;
  float* y_scale;
  int64_t x_stride, x_scale_stride, y_stride, y_scale_stride, m;
  int experts, w_rows, out_cols, w_blocks, x_slices, y_terms;
  int gate_first;
};

// Row r of x times weight row `w_row` of expert e, with the block scales applied per slice.
__device__ float dot_fp8(const SimpleArgs& a, int64_t r, int e, int w_row) {
  const uint8_t* xr = a.x + r * a.x_stride;
  const uint8_t* wr = a.w + (int64_t{e} * a.w_rows + w_row) * int64_t{a.w_blocks} * kBlock;
  const float* sb = a.w_scale + (int64_t{e} * (a.w_rows / kBlock) + w_row / kBlock) * a.w_blocks;
  float acc = 0.0f;
  for (int kb = 0; kb < a.x_slices; ++kb) {
    const int wk = kb % a.w_blocks;
    float part = 0.0f;
    for (int i = 0; i < kBlock; ++i)
      part += fp8::e4m3_value(xr[kb * kBlock + i]) * fp8::e4m3_value(wr[wk * kBlock + i]);
    acc = fmaf(part, a.x_scale[kb * a.x_scale_stride + r] * sb[wk], acc);
  }
  return acc;
}

template <Out kOut, bool kSwiglu>
__global__ void __launch_bounds__(32 * kWarps) grouped_gemm_fp8_simple_kernel(SimpleArgs a) {
  const int lane = threadIdx.x % 32, block = blockIdx.x;
  for (int64_t r = int64_t{blockIdx.y} * kWarps + threadIdx.x / 32; r < a.m;
       r += int64_t{gridDim.y} * kWarps) {
    const int e = moe_tiles::expert_of_row(a.offsets, a.experts, r);
    if (e < 0) continue;  // the whole warp: one row
    float v[4];
    for (int j = 0; j < 4; ++j) {
      const int col = block * kBlock + lane + 32 * j;
      if constexpr (kSwiglu) {
        const int gate = a.gate_first ? col : a.out_cols + col;
        const int up = a.gate_first ? a.out_cols + col : col;
        const float g = dot_fp8(a, r, e, gate);
        v[j] = g / (1.0f + expf(-g)) * dot_fp8(a, r, e, up);
      } else {
        v[j] = dot_fp8(a, r, e, col);
      }
    }
    if constexpr (kOut == Out::fp8) {
      // As moe_fp8_quantize: per term, s = amax / 448 over the 128 columns, q = e4m3(v / s).
      for (int term = 0; term < a.y_terms; ++term) {
        float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
        for (int d = 16; d > 0; d /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, d));
        const float s = fp8::block_scale(amax);
        uint8_t* y = static_cast<uint8_t*>(a.y) + r * a.y_stride + int64_t{term} * a.out_cols;
        for (int j = 0; j < 4; ++j) {
          const uint8_t q = fp8::to_e4m3(__fdiv_rn(v[j], s));
          y[block * kBlock + lane + 32 * j] = q;
          v[j] = __fsub_rn(v[j], __fmul_rn(fp8::e4m3_value(q), s));
        }
        if (lane == 0)
          a.y_scale[(int64_t{term} * (a.out_cols / kBlock) + block) * a.y_scale_stride + r] = s;
      }
    } else {
      for (int j = 0; j < 4; ++j) {
        const int64_t at = r * a.y_stride + block * kBlock + lane + 32 * j;
        if constexpr (kOut == Out::f32) static_cast<float*>(a.y)[at] = v[j];
        else static_cast<__nv_bfloat16*>(a.y)[at] = __float2bfloat16_rn(v[j]);
      }
    }
  }
}

template <Out kOut, bool kSwiglu>
void launch_simple(const SimpleArgs& a, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(a.out_cols / kBlock),
                  static_cast<unsigned>(std::min<int64_t>((a.m + kWarps - 1) / kWarps, 65535)));
  grouped_gemm_fp8_simple_kernel<kOut, kSwiglu><<<grid, 32 * kWarps, 0, s>>>(a);
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace

void moe_grouped_gemm_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                          const Tensor& w_scale, const Tensor& expert_offsets,
                          ops::MoeActivation activation, const Tensor& y, const Tensor& y_scale,
                          Stream stream) {
  namespace gg = grouped_gemm_fp8;
  auto s = static_cast<cudaStream_t>(stream.handle);
  const bool swiglu = activation != ops::MoeActivation::none;
  const bool gate_first = activation == ops::MoeActivation::swiglu;
  if (grouped_gemm::use_sm90()) {
    bool done = false;
    if (!swiglu && y.dtype == DType::f32)
      done = gg::launch_sm90_f32(x, x_scale, w, w_scale, expert_offsets, y, s);
    else if (!swiglu && y.dtype == DType::bf16)
      done = gg::launch_sm90_bf16(x, x_scale, w, w_scale, expert_offsets, y, s);
    else if (swiglu && y.dtype == DType::f32)
      done = gg::launch_sm90_swiglu_f32(x, x_scale, w, w_scale, expert_offsets, gate_first, y, s);
    else if (swiglu && y.dtype == DType::f8e4m3)
      done = gg::launch_sm90_swiglu_fp8(x, x_scale, w, w_scale, expert_offsets, gate_first, y,
                                        y_scale, s);
    if (done) return;
  }
  const int64_t k = w.shape[2];
  SimpleArgs a{};
  a.x = static_cast<const uint8_t*>(x.data);
  a.x_scale = x_scale.ptr<float>();
  a.w = static_cast<const uint8_t*>(w.data);
  a.w_scale = w_scale.ptr<float>();
  a.offsets = expert_offsets.ptr<int32_t>();
  a.y = y.data;
  a.x_stride = x.row_stride();
  a.x_scale_stride = x_scale.row_stride();
  a.y_stride = y.row_stride();
  a.m = x.shape[0];
  a.experts = static_cast<int>(w.shape[0]);
  a.w_rows = static_cast<int>(w.shape[1]);
  a.out_cols = static_cast<int>(swiglu ? w.shape[1] / 2 : w.shape[1]);
  a.w_blocks = static_cast<int>(k / kBlock);
  a.x_slices = static_cast<int>(x.shape[1] / kBlock);
  a.gate_first = gate_first ? 1 : 0;
  if (y.dtype == DType::f8e4m3) {
    a.y_scale = y_scale.ptr<float>();
    a.y_scale_stride = y_scale.row_stride();
    a.y_terms = static_cast<int>(y.shape[1] / a.out_cols);
    return launch_simple<Out::fp8, true>(a, s);
  }
  if (swiglu) return launch_simple<Out::f32, true>(a, s);
  if (y.dtype == DType::f32) return launch_simple<Out::f32, false>(a, s);
  launch_simple<Out::bf16, false>(a, s);
}

}  // namespace braid::cuda
