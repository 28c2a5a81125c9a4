// The CUDA half of device_support.h: a device's name and compute capability, and the
// architectures this build's kernels were compiled for (CMake passes CUDA_ARCHITECTURES).
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "model/device_support.h"

#ifndef BRAID_CUDA_ARCHITECTURES
#error "CMakeLists.txt passes BRAID_CUDA_ARCHITECTURES to this file"
#endif

namespace braid::model {

CudaDeviceInfo cuda_device_info(int index) {
  cudaDeviceProp p{};
  BRAID_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  return {index, p.name, p.major, p.minor};
}

std::string_view cuda_built_architectures() { return BRAID_CUDA_ARCHITECTURES; }

}  // namespace braid::model
