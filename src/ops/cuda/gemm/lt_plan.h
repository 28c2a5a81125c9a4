// The cuBLASLt pieces a cached GEMM plan owns, shared by ops::gemm (cuda_gemm_lt.cpp) and the
// fp8 GEMM ceiling of the benchmarks (bench/cuda_fp8_gemm.cpp): the matmul descriptor, the three
// matrix layouts and the heuristic's choice, destroyed together; and each device's handle and
// workspace.
#pragma once

#include <mutex>

#include <cublasLt.h>

#include "braid/buffer.h"
#include "core/cuda_check.h"

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

// Asks cuBLASLt's heuristic for the plan's algorithm (descriptor and layouts already set) within
// workspace_bytes; false when it has none for them. Other cuBLAS failures throw.
inline bool choose_algorithm(cublasLtHandle_t handle, LtPlan& plan, size_t workspace_bytes) {
  cublasLtMatmulPreference_t pref = nullptr;
  BRAID_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(workspace_bytes));
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.w_layout, plan.a_layout,
                                        plan.out_layout, plan.out_layout, pref, 1, &plan.choice,
                                        &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0) ||
      (st == CUBLAS_STATUS_SUCCESS && plan.choice.state != CUBLAS_STATUS_SUCCESS))
    return false;
  BRAID_CUBLAS_CHECK(st);
  return true;
}

struct LtDeviceState {
  cublasLtHandle_t handle = nullptr;
  Buffer workspace;
  // Held around a launch on this device (its workspace, and the pointers set per call in its
  // plans' descriptors). One lock per device, not one for all: in a tensor-parallel group a rank
  // holding a shared lock while CUDA waits for its GPU, whose collective waits for a rank blocked
  // on that lock, would deadlock the group.
  std::mutex launch_mutex;
};

}  // namespace braid::cuda
