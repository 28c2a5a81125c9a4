// The cuBLASLt pieces a cached GEMM plan owns, shared by ops::gemm (cuda_gemm_lt.cpp) and the
// fp8 GEMM ceiling of the benchmarks (bench/cuda_fp8_gemm.cpp): the matmul descriptor, the three
// matrix layouts and the heuristic's choice, destroyed together; and each device's handle and
// workspace.
#pragma once

#include <cublasLt.h>

#include "braid/buffer.h"

namespace braid::cuda {

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr, a_layout = nullptr, out_layout = nullptr;
  cublasLtMatmulHeuristicResult_t choice{};

  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {  // unchecked: a destructor must not throw
    if (out_layout) cublasLtMatrixLayoutDestroy(out_layout);
    if (a_layout) cublasLtMatrixLayoutDestroy(a_layout);
    if (w_layout) cublasLtMatrixLayoutDestroy(w_layout);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

struct LtDeviceState {
  cublasLtHandle_t handle = nullptr;
  Buffer workspace;
};

}  // namespace braid::cuda
