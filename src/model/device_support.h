// Whether a CUDA device can run a model with this build: checked before any weight is read, so
// that a GPU the kernels were not built for, or fp8 weights on a GPU without fp8, is a clear error
// naming the device and what it lacks instead of a failed kernel launch halfway through loading.
#pragma once

#include <string>
#include <string_view>

#include "model/config.h"

namespace braid::model {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
};

// Whether code built for `archs` (CMake's CUDA_ARCHITECTURES, ';' or ',' separated: "90a",
// "80;90a") runs on compute capability major.minor: "NNa" (architecture-specific) only on NN
// itself, "NN-real" (machine code only) on the same major from NN's minor up, "NN" and
// "NN-virtual" (with PTX, compiled for newer GPUs when loaded) on NN and every newer one.
bool cuda_archs_run_on(std::string_view archs, int major, int minor);

// Throws ErrorKind::unsupported when the device cannot run a model of config c: the build's
// kernels (for `archs`) do not run on it, or c has fp8 weights and the device has no fp8 (compute
// capability below 8.9: no e4m3 tensor cores, no fp8 cuBLASLt GEMM).
void check_cuda_device(const ModelConfig& c, const CudaDeviceInfo& device, std::string_view archs);

#if BRAID_WITH_CUDA
// The device's name and compute capability, and the architectures this build's kernels are for
// (src/model/cuda_device_info.cpp).
CudaDeviceInfo cuda_device_info(int index);
std::string_view cuda_built_architectures();
#endif

}  // namespace braid::model
