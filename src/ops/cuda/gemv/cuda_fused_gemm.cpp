// The fused decode ops on CUDA: one fused GEMV kernel (gemv_fused.cu) when it applies, otherwise
// the primitive ops in sequence through the caller's scratch tensors (nothing is allocated, so
// both paths are graph-capturable). Arguments arrive checked by src/ops/gemm/fused_gemm.cpp.
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemv/gemv_fused.h"

namespace braid::cuda {

namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Every block of the fused kernel redoes its prologue (the rows' RMSNorm, or SwiGLU) for all m
// rows, which outgrows the kernel launch it saves as m grows. Measured on the H100 decode step
// (docs/perf/decode.md): fused won at batch 4 (1B 1.303 -> 1.258 ms, 7B 5.615 -> 5.518 ms) and lost
// at batch 16 (1B 1.393 -> 1.654 ms, 7B 6.531 -> 7.644 ms), so more rows take the two-kernel path.
constexpr int64_t kFuseMaxRows = 4;

bool fuse(const Tensor& a, int64_t k, const Tensor& w) {
  return a.size(0) <= kFuseMaxRows && gemv_fused_applicable(a, k, w);
}

// An fp8 block streams half the bytes of a 16-bit one, so the prologue each block redoes (the
// rows' 1 / rms, or SwiGLU over all of k) weighs twice as much: on the H200's Llama-3.1-8B step
// the fused rms_norm + gate_up took 64 us a layer where the plain fp8 GEMV takes 38, and swiglu +
// down 37 against 20. fp8 weights take the prologue as its own kernel, then the GEMV.
bool fuse_prologue(const Tensor& a, int64_t k, const Tensor& w) {
  return w.dtype != DType::f8e4m3 && fuse(a, k, w);
}

}  // namespace

void rms_norm_gemm(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                   const Tensor& w_scale, const Tensor& bias, const Tensor& out,
                   const Tensor& normed, bool keep_normed, Stream stream) {
  // The kernel writes normed in 16-byte chunks.
  const bool normed_ok = !keep_normed || (aligned16(normed.data) &&
                                          (x.size(0) == 1 || normed.row_stride() % 8 == 0));
  if (fuse_prologue(x, x.size(1), w) && aligned16(norm_weight.data) && normed_ok)
    return gemv_rms_norm(x, norm_weight, eps, w, w_scale, bias, out,
                         keep_normed ? normed : Tensor{}, stream);
  rms_norm(x, norm_weight, eps, normed, stream);
  gemm(normed, w, bias, out, stream, w_scale);
}

// Past this many output columns (lm_heads: ~9 waves of the GEMV's blocks and more) the norm runs
// as its own kernel first: every fused block recomputes the rows' 1 / rms before streaming, and
// over many short blocks that cost more than the kernel it saves (H100, Qwen2.5-0.5B's 151936 x
// 896 head: 112.6 us fused against 90.7 us for the plain GEMV; docs/perf/decode.md).
constexpr int64_t kFuseNormMaxCols = 32768;

void rms_norm_gemm_argmax(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                          const Tensor& ids, const Tensor& logits, const Tensor& normed,
                          Stream stream) {
  // The keys live in the logits scratch when it is contiguous, 8-byte aligned and large enough
  // (it is unless n == 1).
  const int64_t key_bytes = 8 * gemv_argmax_keys(x.size(0), w.size(0));
  const bool keys_fit = logits.is_contiguous() && (reinterpret_cast<uintptr_t>(logits.data) & 7u) == 0 &&
                        key_bytes <= static_cast<int64_t>(logits.nbytes());
  if (fuse(x, x.size(1), w) && aligned16(norm_weight.data) && keys_fit) {
    if (w.size(0) <= kFuseNormMaxCols)
      return gemv_argmax(x, norm_weight, eps, w, ids, logits.data, stream);
    rms_norm(x, norm_weight, eps, normed, stream);
    if (gemv_fused_applicable(normed, normed.size(1), w))
      return gemv_argmax(normed, Tensor{}, 0.0f, w, ids, logits.data, stream);
    gemm(normed, w, Tensor{}, logits, stream);
    return argmax(logits, ids, stream);
  }
  rms_norm_gemm(x, norm_weight, eps, w, Tensor{}, Tensor{}, logits, normed, false, stream);
  argmax(logits, ids, stream);
}

void gemm_add(const Tensor& a, const Tensor& w, const Tensor& w_scale, const Tensor& bias,
              const Tensor& residual, const Tensor& scratch, Stream stream) {
  if (fuse(a, a.size(1), w)) return gemv_add(a, w, w_scale, bias, residual, stream);
  gemm(a, w, bias, scratch, stream, w_scale);
  add_inplace(scratch, residual, stream);
}

void swiglu_gemm_add(const Tensor& gate_up, const Tensor& w, const Tensor& w_scale,
                     const Tensor& residual, const Tensor& act, const Tensor& scratch,
                     Stream stream) {
  if (fuse_prologue(gate_up, gate_up.size(1) / 2, w))
    return gemv_swiglu_add(gate_up, w, w_scale, residual, stream);
  silu_mul(gate_up, act, stream);
  if (fuse(act, act.size(1), w)) return gemv_add(act, w, w_scale, Tensor{}, residual, stream);
  gemm(act, w, Tensor{}, scratch, stream, w_scale);
  add_inplace(scratch, residual, stream);
}

}  // namespace braid::cuda
