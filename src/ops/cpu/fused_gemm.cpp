// Reference fused decode ops: exactly the primitive references in sequence (see ops.h), through
// the caller's scratch tensors, which are host tensors here.
#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

void add_inplace(const Tensor& x, const Tensor& residual) {
  const int64_t rows = x.rows(), d = x.size(-1);
  const DType t = x.dtype;
  for (int64_t r = 0; r < rows; ++r) {
    const void* xr = x.at(r * x.row_stride());
    void* rr = residual.at(r * residual.row_stride());
    for (int64_t j = 0; j < d; ++j)
      store_from_float(rr, t, j, load_as_float(rr, t, j) + load_as_float(xr, t, j));
  }
}

void rms_norm_gemm(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                   const Tensor& bias, const Tensor& out, const Tensor& normed,
                   const Tensor& w_scale) {
  rms_norm(x, norm_weight, eps, normed);
  gemm(normed, w, bias, out, w_scale);
}

void rms_norm_gemm_argmax(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                          const Tensor& ids, const Tensor& logits, const Tensor& normed) {
  rms_norm_gemm(x, norm_weight, eps, w, Tensor{}, logits, normed);
  argmax(logits, ids);
}

void gemm_add(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& residual,
              const Tensor& scratch, const Tensor& w_scale) {
  gemm(a, w, bias, scratch, w_scale);
  add_inplace(scratch, residual);
}

void swiglu_gemm_add(const Tensor& gate_up, const Tensor& w, const Tensor& residual,
                     const Tensor& act, const Tensor& scratch, const Tensor& w_scale) {
  silu_mul(gate_up, act);
  gemm(act, w, Tensor{}, scratch, w_scale);
  add_inplace(scratch, residual);
}

}  // namespace braid::cpu
