// Host-side facts and settings that kernel launchers share: the current device's SM count and
// whether it runs sm_90a code (each read once per process), and the opt-in for more than 48 KB of
// dynamic shared memory.
#pragma once

#include <cuda_runtime.h>

#include "core/cuda_check.h"

namespace braid::cuda {

inline int sm_count() {
  static const int n = [] {
    int dev = 0, count = 0;
    BRAID_CUDA_CHECK(cudaGetDevice(&dev));
    BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev));
    return count;
  }();
  return n;
}

// True on compute capability 9.0 in a build with sm_90a code (wgmma, TMA, setmaxnreg).
inline bool device_runs_sm90a() {
#ifndef BRAID_HAS_SM90A
  return false;
#else
  static const bool yes = [] {
    int dev = 0, major = 0, minor = 0;
    BRAID_CUDA_CHECK(cudaGetDevice(&dev));
    BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return major == 9 && minor == 0;
  }();
  return yes;
#endif
}

// Past 48 KB of dynamic shared memory a kernel must opt in; callers do it once per kernel, through
// a function-local static.
template <typename Kernel>
bool opt_in(Kernel* kernel, int smem) {
  BRAID_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  return true;
}

}  // namespace braid::cuda
