// Introspection of the cuBLASLt gemm's plan cache, for the bench suite and tests. The op itself is
// braid::cuda::gemm (ops/cuda/cuda_ops.h), reached through braid::ops::gemm.
#pragma once

#include <cstddef>
#include <string>

#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::cuda {

// The cuBLASLt path of gemm, without its GEMV fast path (ops/cuda/gemv/gemv.h): for benchmarks
// that compare the two. Arguments as braid::cuda::gemm's (checked by the caller).
void gemm_cublaslt(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out,
                   Stream stream);

// Number of cached plans (one per shape / dtype / leading-dimension / alignment key).
size_t gemm_plan_count();

// Destroys every cached plan; the next call with a shape asks the heuristic again. Callers must
// make sure no other thread is inside gemm; work already enqueued is unaffected.
void gemm_clear_plans();

// The algorithm the heuristic chose for these (already checked) arguments, creating the plan if
// needed, e.g. "algo 66 tile 196 stages 35 split-k 1 reduction 0 cluster 5 workspace 0 B
// waves 1.00".
// Tile, stages and cluster are cublasLtMatmulTile_t / cublasLtMatmulStages_t /
// cublasLtClusterShape_t ids. Throws ErrorKind::unsupported where gemm would.
std::string gemm_plan_description(const Tensor& a, const Tensor& w, const Tensor& bias,
                                  const Tensor& out);

}  // namespace braid::cuda
