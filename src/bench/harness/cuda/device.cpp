// Device description for reports, from the CUDA runtime and cuBLASLt.
#include <cublasLt.h>

#include <dlfcn.h>

#include <fstream>
#include <regex>
#include <string>

#include "bench/harness/cuda/device.h"
#include "braid/error.h"
#include "core/cuda_check.h"

namespace braid::bench {

namespace {

// The NVIDIA driver's version ("580.159.04"), as nvidia-smi shows it: from NVML, loaded at run
// time so the binary does not depend on it, else from /proc/driver/nvidia/version; "" if neither.
std::string kernel_driver_version() {
  if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    using InitFn = int (*)();
    using VersionFn = int (*)(char*, unsigned);
    auto init = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlInit_v2"));
    auto version = reinterpret_cast<VersionFn>(dlsym(nvml, "nvmlSystemGetDriverVersion"));
    auto shutdown = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlShutdown"));
    char buf[96] = {};
    const bool ok = init && version && shutdown && init() == 0;  // 0 = NVML_SUCCESS
    const bool got = ok && version(buf, sizeof(buf)) == 0;
    if (ok) shutdown();
    dlclose(nvml);
    if (got) return buf;
  }
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  std::getline(f, line);
  std::smatch m;
  if (std::regex_search(line, m, std::regex(R"(Kernel Module[^0-9]*([0-9]+(\.[0-9]+)+))"))) return m[1];
  return "";
}

}  // namespace

DeviceInfo require_device(int index, const std::string& what) {
  std::string reason;
  const auto info = query_device(index, &reason);
  if (!info) throw Error(ErrorKind::unsupported, what + ": " + reason);
  return *info;
}

std::optional<DeviceInfo> query_device(int index, std::string* reason) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    if (reason) *reason = std::string("no CUDA device: ") + cudaGetErrorString(err);
    return std::nullopt;
  }
  if (index < 0 || index >= count) {
    if (reason)
      *reason = "no CUDA device " + std::to_string(index) + " (" + std::to_string(count) +
                " visible)";
    return std::nullopt;
  }
  cudaDeviceProp p{};
  BRAID_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  auto attr = [index](cudaDeviceAttr a) {
    int v = 0;
    BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&v, a, index));
    return v;
  };
  DeviceInfo d;
  d.index = index;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.memory_bytes = p.totalGlobalMem;
  d.l2_bytes = static_cast<uint64_t>(p.l2CacheSize);
  d.sm_clock_mhz = attr(cudaDevAttrClockRate) / 1000;  // attributes report kHz
  d.memory_clock_mhz = attr(cudaDevAttrMemoryClockRate) / 1000;
  d.memory_bus_bits = attr(cudaDevAttrGlobalMemoryBusWidth);
  BRAID_CUDA_CHECK(cudaDriverGetVersion(&d.driver_version));
  d.kernel_driver = kernel_driver_version();
  BRAID_CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime_version));
  d.cublas_version = static_cast<int>(cublasLtGetVersion());
  return d;
}

}  // namespace braid::bench
