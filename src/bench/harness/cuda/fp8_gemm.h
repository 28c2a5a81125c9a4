// A dense fp8 GEMM through cuBLASLt, for the benchmarks: the fp8 GEMM ceiling (`bench ceilings`)
// and the dense peer of the FP8 MoE layer (`bench moe-fp8`). Not an op: the library's own fp8
// work is moe_grouped_gemm_fp8. Declared without CUDA headers (code outside cuda/ reaches it
// through BRAID_CUDA_ONLY).
#pragma once

#include <string>

#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::bench {

// out[m, n] = a[m, k] @ w[n, k]^T with a, w fp8 e4m3 and out bf16, fp32 accumulation, no scales
// (cuBLASLt's per-tensor scale pointers left unset: scale 1) and no fast accumulation (cuBLASLt's
// default, as torch._scaled_mm's: partial sums are promoted to fp32 periodically).
// This is cuBLASLt's "TN" case, both operands K-major, the only layout Hopper runs fp8 in.
//   a    [m, k] f8e4m3, rows, row stride a multiple of 16 elements, 16-byte aligned
//   w    [n, k] f8e4m3, the same
//   out  [m, n] bf16, rows, row stride a multiple of 8 elements, 16-byte aligned
//   k % 16 == 0, on one CUDA device
// The plan of a shape is made on its first call (a heuristic query: call once before capturing a
// graph); later calls only enqueue cublasLtMatmul. Throws braid::Error: invalid_argument naming
// the argument for bad tensors, unsupported naming the shape when cuBLASLt offers no algorithm.
void fp8_gemm(const Tensor& a, const Tensor& w, const Tensor& out, Stream stream);

// The algorithm cuBLASLt chose for this shape ("algo 66 tile 20 ... workspace 0 B"), making the
// plan if needed; throws as fp8_gemm does.
std::string fp8_gemm_plan_description(const Tensor& a, const Tensor& w, const Tensor& out);

}  // namespace braid::bench
