// Host-side facts and settings that kernel launchers share: the current device's SM count and
// whether it runs sm_90a code (each read once per process: the GPUs of one host are alike), and
// the opt-in for more than 48 KB of dynamic shared memory (per device).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include "core/cuda_check.h"

namespace braid::cuda {

// An attribute of the current device.
inline int current_device_attribute(cudaDeviceAttr attr) {
  int dev = 0, value = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, dev));
  return value;
}

inline int sm_count() {
  static const int n = current_device_attribute(cudaDevAttrMultiProcessorCount);
  return n;
}

// True on compute capability 9.0 or later (cp.async.bulk, transaction barriers).
inline bool device_is_sm90_or_later() {
  static const bool yes = current_device_attribute(cudaDevAttrComputeCapabilityMajor) >= 9;
  return yes;
}

// The dynamic shared memory a block may opt into on the current device.
inline int smem_optin_limit() {
  static const int n = current_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  return n;
}

// True on compute capability 9.0 in a build with sm_90a code (wgmma, TMA, setmaxnreg).
inline bool device_runs_sm90a() {
#ifndef BRAID_HAS_SM90A
  return false;
#else
  static const bool yes = current_device_attribute(cudaDevAttrComputeCapabilityMajor) == 9 &&
                          current_device_attribute(cudaDevAttrComputeCapabilityMinor) == 0;
  return yes;
#endif
}

// Past 48 KB of dynamic shared memory a kernel must opt in, on every device it runs on (the
// attribute is the device's: a tensor-parallel group launches the same kernel on several GPUs).
// Called before each launch; sets the attribute once per kernel and device.
template <typename Kernel>
void opt_in(Kernel* kernel, int smem) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;  // (kernel, device)
  int dev = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard lock(mutex);
  if (done.count({reinterpret_cast<const void*>(kernel), dev})) return;
  BRAID_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  done.insert({reinterpret_cast<const void*>(kernel), dev});
}

// BRAID_SMEM_CARVEOUT=max: the kernels that share SMs with gemv_chain in a decode step (its own,
// the decode attention's) ask for the largest shared-memory carveout, so that an SM's L1 /
// shared split is the same for all of them (an SM changes it only when idle). An experiment
// switch (docs/perf/decode.md, version 17); called where their other attributes are set.
inline void prefer_max_shared_if_asked(const void* kernel) {
  static const bool asked = [] {
    const char* v = std::getenv("BRAID_SMEM_CARVEOUT");
    return v != nullptr && std::strcmp(v, "max") == 0;
  }();
  if (asked)
    BRAID_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                          cudaSharedmemCarveoutMaxShared));
}

}  // namespace braid::cuda
