#include "core/cuda_check.h"
#include "core/device_guard.h"

namespace braid {

DeviceGuard::DeviceGuard(Device device) {
  if (!device.is_cuda()) return;
  int current = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&current));
  if (current == device.index) return;
  BRAID_CUDA_CHECK(cudaSetDevice(device.index));
  previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace braid
