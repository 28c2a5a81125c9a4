// gemm_batched: out[:, b, :] = a[:, b, :] @ w[b]^T, through the GEMV kernel for up to 16 rows
// (gemv.h: gemv_batched), else cuBLAS's strided-batched GEMM:
//
// As in the cuBLASLt gemm (cuda_gemm_lt.cpp), row-major out[m, n] is column-major out^T[n, m]:
//   C_b(n x m) = op(A_b) * B_b  with A_b = w[b]: rows of k (w.stride(2) == 1) are a column-major
//                                    k x n matrix (lda = w.stride(1)), op = transpose; columns
//                                    of n (w.stride(1) == 1) a column-major n x k one (lda =
//                                    w.stride(2)), op = none; stride w.stride(0) between batches;
//                                    B_b = a[:, b, :], column-major k x m (ldb = a's row stride),
//                                    stride a.stride(1) between batches;
//                                    C_b = out[:, b, :] (ldc = out's row stride, stride
//                                    out.stride(1)).
// One handle per device, with a workspace set once, so calls allocate nothing and can be
// captured in a CUDA graph.
#include <cublas_v2.h>

#include <map>
#include <mutex>

#include "braid/buffer.h"
#include "core/cuda_check.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemv/gemv.h"

namespace braid::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{4} << 20;

struct DeviceHandle {
  cublasHandle_t handle = nullptr;
  Buffer workspace;
};

// Caller has made `device` current. Handles live for the process (as the cuBLASLt ones do).
cublasHandle_t handle_for(int device) {
  static std::mutex mutex;
  static auto* handles = new std::map<int, DeviceHandle>;
  std::lock_guard<std::mutex> lock(mutex);
  DeviceHandle& h = (*handles)[device];
  if (!h.handle) {
    if (h.workspace.size() == 0) h.workspace = Buffer(kWorkspaceBytes, Device::cuda(device));
    BRAID_CUBLAS_CHECK(cublasCreate(&h.handle));
    BRAID_CUBLAS_CHECK(cublasSetWorkspace(h.handle, h.workspace.data(), kWorkspaceBytes));
  }
  return h.handle;
}

}  // namespace

void gemm_batched(const Tensor& a, const Tensor& w, const Tensor& out, Stream stream) {
  // Decode-sized products (up to 16 rows) with w in rows of k: the decode GEMV kernel, one launch
  // for every b, a programmatic dependent like the step's other GEMVs (docs/perf/mla.md, v5).
  if (gemv_batched_applicable(a, w, out)) return gemv_batched(a, w, out, stream);
  int device = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&device));
  cublasHandle_t handle = handle_for(device);
  BRAID_CUBLAS_CHECK(cublasSetStream(handle, static_cast<cudaStream_t>(stream.handle)));
  const cudaDataType_t type = a.dtype == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
  const int m = static_cast<int>(a.size(0)), batch = static_cast<int>(a.size(1));
  const int k = static_cast<int>(a.size(2)), n = static_cast<int>(w.size(1));
  // A single row has no row stride of its own; any leading dimension >= the row length serves.
  const int64_t lda = m > 1 ? a.stride(0) : k, ldc = m > 1 ? out.stride(0) : n;
  const bool w_rows = w.stride(2) == 1 || k == 1;
  const cublasOperation_t op_w = w_rows ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t ldw = w_rows ? (n > 1 ? w.stride(1) : k) : (k > 1 ? w.stride(2) : n);
  const float alpha = 1.0f, beta = 0.0f;
  BRAID_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle, op_w, CUBLAS_OP_N, n, m, k, &alpha, w.data, type, static_cast<int>(ldw), w.stride(0), a.data,
      type, static_cast<int>(lda), a.stride(1), &beta, out.data, type, static_cast<int>(ldc),
      out.stride(1), batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace braid::cuda
