// The fp8 product of more rows than the GEMV takes, on cuBLASLt: the activations quantized to
// e4m3 at run time, then cuBLASLt's scaled fp8 GEMM in one of two scale layouts.
//
// 128 x 128 weight blocks (quant_method "fp8": DeepSeek-V3, Qwen3-*-FP8): DeepSeek-V3's recipe.
//   1. a (bf16) is quantized per row and 128 columns to fp8 e4m3, one f32 scale per block
//      (moe_fp8_quantize with one term: scale = amax / 448), into a per-device scratch;
//   2. cuBLASLt's block-scaled fp8 GEMM (CUDA 12.9+, Hopper): the weight's scales one per
//      128 x 128 block (BLK128x128_32F, the checkpoint's [n / 128, k / 128] row-major layout),
//      the activations' one per 128 columns of a row (VEC128_32F, stored [k / 128, m]: the
//      layout moe_fp8_quantize writes). tools/device/fp8_block_scale_probe.cu checked both
//      layouts against an fp32 reference on an H100 and measured the rate: 94% of the plain fp8
//      GEMM's (1446-1517 TFLOP/s on the Llama-3.1-8B prefill shapes and 8192^3).
// One scale per weight row ([n, 1]: compressed-tensors FP8-dynamic, and its per-tensor scale
// copied to every row): the dynamic per-token scheme those checkpoints are made for.
//   1. a (bf16 or f16) is quantized per row, one f32 scale per token (fp8_quantize_rows);
//   2. cuBLASLt's fp8 GEMM with outer-vector scales (OUTER_VEC_32F on both sides: out[i, j] =
//      w_scale[j] * a_scale[i] * sum of the codes' products). Where cuBLASLt has no algorithm for
//      that (older libraries) the GEMV runs 16 rows at a time instead, with exact products.
// k below 512 takes the GEMV 16 rows at a time in both layouts (gemm_fp8).
// Row-major out[m, n] is column-major out^T[n, m] (as cuda_gemm_lt.cpp): cuBLASLt's A is w
// (k x n, transposed), B is the quantized a (k x m).
//
// cuBLASLt reads the weight's scale matrix with a row stride of k / 128 rounded up to a multiple
// of 4 (PyTorch's _scaled_mm checks its 128 x 128 scales for that stride); a checkpoint's
// [n / 128, k / 128] scales have row stride k / 128, so for k / 128 not a multiple of 4 (k = 128,
// 256, 640, 1408, ...) they are copied into the scratch at the padded stride first. Without it
// the products were wrong (33-88% relative error on an H200 at k = 128 and 256, where this was
// first taken for a cuBLASLt defect; DeepSeek-V2-Lite's and Moonlight's expert width 1408 and
// DeepSeek-OCR's 896 have such k too).
// cuBLASLt's heuristic takes the block scale modes only when m is a multiple of 4 (measured with
// the probe: m = 1 and 253 are refused, 40, 64, 100 and 128 taken), so the activations are
// quantized into m rounded up to 4 rows (the extra rows zero) and, when m was not a multiple of
// 4, the product lands in the scratch and its first m rows are copied out. The outer-vector
// layout takes the same path (not measured whether it needs it).
//
// The scratch grows on demand, never while a stream is being captured into a CUDA graph: the
// engine's eager warm-up runs every shape it later captures, so the capture finds it large
// enough (and a capture that would need more fails with an error that says so).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "braid/buffer.h"
#include "core/cuda_check.h"
#include "core/device_guard.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm/lt_plan.h"
#include "ops/cuda/gemv/gemv_fused.h"
#include "ops/gemm/weight_check.h"

namespace braid::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int64_t kBlock = 128;
constexpr int64_t kSmallestCublasK = 512;  // smaller k: the GEMV (see gemm_fp8)

// The two scale layouts (top of the file).
enum class Scales { blocks, channels };

struct Key {
  int device;
  Scales scales;
  int64_t m, n, k, ldo;
  DType in, out;
  bool has_bias;
  auto operator<=>(const Key&) const = default;
};

// A device's handle, workspace, scratch and plans, all used under lt.launch_mutex. A null plan:
// cuBLASLt has no algorithm for the key (outer-vector scales only; the caller takes the GEMV).
struct DeviceState {
  LtDeviceState lt;
  Buffer scratch;  // the quantized activations, then their scales
  std::map<Key, std::unique_ptr<LtPlan>> plans;
};

// Never destroyed: at static teardown the CUDA context may already be gone.
struct Cache {
  std::mutex mutex;  // the map of devices (its elements never move)
  std::map<int, DeviceState> devices;
};

Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

cudaDataType_t cuda_type(DType t) { return t == DType::f16 ? CUDA_R_16F : CUDA_R_16BF; }

std::string describe_key(const Key& key) {
  return fmt::format("m={} n={} k={} out {}{} on cuda:{}", key.m, key.n, key.k,
                     dtype_name(key.out), key.has_bias ? " with bias" : "", key.device);
}

// The heuristic refuses block-scale modes whose scale pointers are unset (INVALID_VALUE), and
// reads the bias pointer's alignment: it is shown the first call's pointers; each call then sets
// its own (bias pointers of one plan share their alignment: the workspace's and the weights'
// allocations are 256-byte aligned). Null when the heuristic has no algorithm.
std::unique_ptr<LtPlan> make_plan(const Key& key, cublasLtHandle_t handle, const void* w_scale,
                                  const void* a_scale, const void* bias) {
  auto plan = std::make_unique<LtPlan>();
  BRAID_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  const bool blocks = key.scales == Scales::blocks;
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
           blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
           blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scale);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, a_scale);
  if (key.has_bias) {
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, cuda_type(key.out));
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  }
  const auto m = static_cast<uint64_t>(key.m), n = static_cast<uint64_t>(key.n),
             k = static_cast<uint64_t>(key.k);
  BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->w_layout, CUDA_R_8F_E4M3, k, n, k));
  BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a_layout, CUDA_R_8F_E4M3, k, m, k));
  BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->out_layout, cuda_type(key.out), n, m, key.ldo));
  if (!choose_algorithm(handle, *plan, kWorkspaceBytes)) return nullptr;
  return plan;
}

bool capturing(Stream stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  BRAID_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream.handle), &status));
  return status != cudaStreamCaptureStatusNone;
}

// The product on cuBLASLt (top of the file); false, having launched nothing, where cuBLASLt has
// no algorithm for outer-vector scales. Block scales without an algorithm throw.
bool gemm_fp8_cublaslt(const Tensor& a, const Tensor& w, const Tensor& w_scale, const Tensor& bias,
                       const Tensor& out, Scales scales, Stream stream) {
  const int64_t m = a.size(0), k = a.size(1), n = w.size(0);
  const bool blocks = scales == Scales::blocks;
  const int64_t m4 = (m + 3) / 4 * 4;
  const bool padded = m4 != m;
  const Key key{out.device.index, scales, m4, n, k, padded || m == 1 ? n : out.row_stride(),
                a.dtype, out.dtype, bias.defined()};
  DeviceGuard guard(out.device);
  Cache& c = cache();
  DeviceState* found = nullptr;
  {
    std::lock_guard lock(c.mutex);
    found = &c.devices[key.device];
  }
  DeviceState& dev = *found;
  std::lock_guard lock(dev.lt.launch_mutex);  // the workspace and the scratch are one per device
  if (!dev.lt.handle) {
    dev.lt.workspace = Buffer(kWorkspaceBytes, Device::cuda(key.device));
    BRAID_CUBLAS_CHECK(cublasLtCreate(&dev.lt.handle));
  }
  auto known = dev.plans.find(key);
  if (known != dev.plans.end() && !known->second) return false;  // refused before

  const size_t q_bytes = static_cast<size_t>((m4 * k + 255) / 256 * 256);
  const int64_t a_scales = blocks ? k / kBlock * m4 : m4;
  const size_t scale_bytes = static_cast<size_t>((a_scales * 4 + 255) / 256 * 256);
  const size_t out_bytes = padded ? static_cast<size_t>(m4 * n) * dtype_size(out.dtype) : 0;
  const int64_t kb = k / kBlock, kb4 = (kb + 3) / 4 * 4, nb = w_scale.size(0);
  const size_t w_scale_bytes =
      blocks && kb4 != kb ? static_cast<size_t>((nb * kb4 * 4 + 255) / 256 * 256) : 0;
  const size_t need = q_bytes + scale_bytes + out_bytes + w_scale_bytes;
  if (dev.scratch.size() < need) {
    if (capturing(stream))
      throw Error(ErrorKind::internal,
                  fmt::format("gemm: the fp8 activation scratch ({} bytes) is too small for {} "
                              "while a CUDA graph is being captured; run the shape eagerly first",
                              dev.scratch.size(), describe_key(key)));
    BRAID_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle)));
    dev.scratch = Buffer(need, Device::cuda(key.device));
  }
  auto* base = static_cast<uint8_t*>(dev.scratch.data());
  uint8_t* a_scale_ptr = base + q_bytes;
  uint8_t* padded_out = a_scale_ptr + scale_bytes;
  uint8_t* padded_w_scales = padded_out + out_bytes;
  const void* w_scale_ptr = w_scale_bytes > 0 ? padded_w_scales : w_scale.data;

  if (known == dev.plans.end()) {
    std::unique_ptr<LtPlan> plan;
    try {
      plan = make_plan(key, dev.lt.handle, w_scale_ptr, a_scale_ptr, bias.data);
    } catch (const Error&) {
      // A library that does not know the outer-vector mode refuses the descriptor itself: the
      // GEMV then, as for no algorithm. Block scales have no fallback.
      if (blocks) throw;
    }
    known = dev.plans.emplace(key, std::move(plan)).first;
    if (!known->second) {
      if (blocks)
        throw Error(ErrorKind::unsupported,
                    "gemm: cuBLASLt has no block-scaled fp8 algorithm for " + describe_key(key) +
                        " (it needs CUDA 12.9+ on a Hopper GPU)");
      return false;
    }
  }
  LtPlan& plan = *known->second;

  const auto s = static_cast<cudaStream_t>(stream.handle);
  const Tensor q(base, DType::f8e4m3, out.device, {m4, k});
  // Padded: the extra rows quantize zeros; the product's rows are zeroed too, although cuBLASLt
  // writes them all: initcheck reported copying them out as reading uninitialized memory, most
  // likely because it does not track the TMA stores of cuBLASLt's Hopper kernels.
  if (padded) BRAID_CUDA_CHECK(cudaMemsetAsync(base, 0, q_bytes + scale_bytes + out_bytes, s));
  if (blocks) {
    // The first m rows, their scales at row stride m4 (moe_fp8_quantize's q_scale is [K/128, M] rows).
    const Tensor q_scale(a_scale_ptr, DType::f32, out.device, {k / kBlock, m4});
    moe_fp8_quantize(a, q.slice(0, 0, m), q_scale.slice(1, 0, m), stream);
  } else {
    const Tensor q_scale(a_scale_ptr, DType::f32, out.device, {m4});
    fp8_quantize_rows(a, q.slice(0, 0, m), q_scale.slice(0, 0, m), stream);
  }
  void* d = padded ? static_cast<void*>(padded_out) : out.data;
  if (w_scale_bytes > 0) {
    // The weight's scales at cuBLASLt's row stride (see the top of this file); the padding
    // columns stand for no k block and are zeroed only so that nothing reads uninitialized memory.
    BRAID_CUDA_CHECK(cudaMemsetAsync(padded_w_scales, 0, w_scale_bytes, s));
    BRAID_CUDA_CHECK(cudaMemcpy2DAsync(padded_w_scales, static_cast<size_t>(kb4) * 4, w_scale.data,
                                       static_cast<size_t>(w_scale.row_stride()) * 4,
                                       static_cast<size_t>(kb) * 4, static_cast<size_t>(nb),
                                       cudaMemcpyDeviceToDevice, s));
  }
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scale_ptr);
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(a_scale_ptr));
  if (key.has_bias) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.data));
  const float alpha = 1.0f, beta = 0.0f;
  BRAID_CUBLAS_CHECK(cublasLtMatmul(dev.lt.handle, plan.desc, &alpha, w.data, plan.w_layout, q.data,
                                    plan.a_layout, &beta, d, plan.out_layout, d, plan.out_layout,
                                    &plan.choice.algo, dev.lt.workspace.data(),
                                    dev.lt.workspace.size(), s));
  if (padded) {
    const size_t row = static_cast<size_t>(n) * dtype_size(out.dtype);
    const size_t pitch = m > 1 ? static_cast<size_t>(out.row_stride()) * dtype_size(out.dtype) : row;
    BRAID_CUDA_CHECK(cudaMemcpy2DAsync(out.data, pitch, d, row, row, static_cast<size_t>(m),
                                       cudaMemcpyDeviceToDevice, s));
  }
  return true;
}

}  // namespace

void gemm_fp8(const Tensor& a, const Tensor& w, const Tensor& w_scale, const Tensor& bias,
              const Tensor& out, Stream stream) {
  const int64_t m = a.size(0), k = a.size(1), n = w.size(0);
  const bool block_scales = check::scale_blocks({w, w_scale}).rows == kBlock;
  // k of 128 or 256 (and up to 511): cuBLASLt takes such k too (with the padded scales), but such
  // layers are too small to bind any model, and the GEMV keeps its products exact
  // (BRAID_FP8_GEMV=exact) where cuBLASLt's always quantize the activations.
  const bool cublas_k = k >= kSmallestCublasK;
  if (cublas_k && block_scales && k % kBlock == 0 && a.dtype == DType::bf16 &&
      w_scale.dtype == DType::f32) {
    gemm_fp8_cublaslt(a, w, w_scale, bias, out, Scales::blocks, stream);
    return;
  }
  // Scales per row: cuBLASLt's fp8 GEMM needs k a multiple of 16 (its rows of codes 16-byte
  // aligned), and reads the n scales as one contiguous f32 vector.
  const bool channel_scales = !block_scales && w_scale.dtype == DType::f32 &&
                              w_scale.size(0) == n && w_scale.size(1) == 1 &&
                              (n == 1 || w_scale.row_stride() == 1);
  if (cublas_k && channel_scales && k % 16 == 0 &&
      (a.dtype == DType::bf16 || a.dtype == DType::f16) &&
      gemm_fp8_cublaslt(a, w, w_scale, bias, out, Scales::channels, stream))
    return;
  // The GEMV, 16 rows at a time: correct at any m, but it reads the weights once per 16 rows, so a
  // prompt costs m / 16 weight streams (docs/perf/fp8.md, "Per-channel scales on CUDA").
  if (gemv_fused_applicable(a.slice(0, 0, std::min<int64_t>(m, 16)), k, w)) {
    for (int64_t r = 0; r < m; r += 16) {
      const int64_t e = std::min(m, r + 16);
      gemv_plain(a.slice(0, r, e), w, w_scale, bias, out.slice(0, r, e), stream);
    }
    return;
  }
  throw Error(ErrorKind::unsupported,
              fmt::format("gemm: an fp8 product of {} rows (more than the GEMV takes at once) "
                          "needs bf16 activations, k a multiple of 128 and 128 x 128 f32 weight "
                          "scales, or operands the GEMV takes 16 rows at a time; got {} "
                          "activations, k = {}, scales {} {}",
                          m, dtype_name(a.dtype), k, dtype_name(w_scale.dtype),
                          shape_string(w_scale)));
}

}  // namespace braid::cuda
