// Checked CUDA and cuBLAS calls: a failure throws braid::Error naming the call, the code and
// the source location. Only for .cu/.cpp files built with the CUDA toolkit.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "braid/error.h"

namespace braid::detail {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line);

}  // namespace braid::detail

#define BRAID_CUDA_CHECK(expr)                                                   \
  do {                                                                           \
    cudaError_t braid_err_ = (expr);                                             \
    if (braid_err_ != cudaSuccess)                                               \
      ::braid::detail::throw_cuda_error(braid_err_, #expr, __FILE__, __LINE__);  \
  } while (0)

// After a kernel launch: catches bad launch configurations (not asynchronous faults).
#define BRAID_CUDA_CHECK_LAUNCH() BRAID_CUDA_CHECK(cudaGetLastError())

#define BRAID_CUBLAS_CHECK(expr)                                                   \
  do {                                                                             \
    cublasStatus_t braid_st_ = (expr);                                             \
    if (braid_st_ != CUBLAS_STATUS_SUCCESS)                                        \
      ::braid::detail::throw_cublas_error(braid_st_, #expr, __FILE__, __LINE__);   \
  } while (0)
