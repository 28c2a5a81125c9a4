// Makes a tensor's CUDA device current for a scope and restores the previous device on exit,
// so ops launch on the device their tensors live on. Does nothing for the CPU.
#pragma once

#include "braid/tensor.h"

namespace braid {

class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

}  // namespace braid
