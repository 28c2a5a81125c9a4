// CUDA implementations, launched on `stream`. Called by src/ops/*.cpp after the arguments are
// checked; see include/braid/ops.h for the contracts. Only built with the CUDA toolkit.
#pragma once

#include "braid/ops.h"

namespace braid::cuda {

void embedding(const Tensor& ids, const Tensor& table, const Tensor& out, Stream stream);
void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out, Stream stream);
void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                  const Tensor& out, Stream stream);
void rope_apply(const Tensor& q, const Tensor& k, const Tensor& positions,
                const ops::RopeTable& table, Stream stream);
void silu_mul(const Tensor& x, const Tensor& out, Stream stream);
void gemm(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out, Stream stream);
void softmax(const Tensor& x, const Tensor& out, Stream stream);
void argmax(const Tensor& x, const Tensor& out, Stream stream);

}  // namespace braid::cuda
