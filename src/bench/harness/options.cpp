#include "bench/harness/options.h"

#include "braid/buffer.h"
#include "braid/error.h"

namespace braid::bench {

Device device_from_option(const std::string& name, const char* command) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") {
    if (!cuda_available())
      throw Error(ErrorKind::unsupported,
                  std::string(command) +
                      ": --device cuda, but no CUDA device is usable here (or this build has no "
                      "CUDA support); use --device cpu");
    return Device::cuda(0);
  }
  if (name == "auto") return cuda_available() ? Device::cuda(0) : Device::cpu();
  throw Error(ErrorKind::invalid_argument,
              std::string(command) + ": --device must be cpu, cuda or auto, got '" + name + "'");
}

model::Quantize quantize_from_option(const std::string& name, const char* command) {
  if (const auto q = model::quantize_from_name(name)) return *q;
  throw Error(ErrorKind::invalid_argument, std::string(command) +
                                               ": --quantize must be none or fp8, got '" + name + "'");
}

}  // namespace braid::bench
