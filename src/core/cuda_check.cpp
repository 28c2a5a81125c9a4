#include "core/cuda_check.h"

namespace braid::detail {

static std::string where(const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line);
}

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  ErrorKind kind = err == cudaErrorMemoryAllocation ? ErrorKind::out_of_memory : ErrorKind::cuda;
  throw Error(kind, std::string("CUDA error ") + cudaGetErrorName(err) + " (" +
                        cudaGetErrorString(err) + ") in " + expr + " at " + where(file, line));
}

void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line) {
  ErrorKind kind = st == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::out_of_memory : ErrorKind::cublas;
  throw Error(kind, std::string("cuBLAS error ") + cublasGetStatusName(st) + " (" +
                        cublasGetStatusString(st) + ") in " + expr + " at " + where(file, line));
}

}  // namespace braid::detail
