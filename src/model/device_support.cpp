// Whether a CUDA device can run a model with this build (device_support.h).
#include "model/device_support.h"

#include <charconv>

#include "braid/error.h"

namespace braid::model {

namespace {

// 90 for 9.0: CUDA_ARCHITECTURES' numbering.
int arch_number(int major, int minor) { return major * 10 + minor; }

// "9.0" for 9, 0.
std::string capability(int major, int minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// Whether one CUDA_ARCHITECTURES entry ("90a", "80", "86-real", "90-virtual") runs on
// major.minor; an entry that does not parse runs nowhere.
bool arch_runs_on(std::string_view arch, int major, int minor) {
  int number = 0;
  const auto [end, ec] = std::from_chars(arch.data(), arch.data() + arch.size(), number);
  if (ec != std::errc() || number < 10) return false;
  const std::string_view suffix(end, static_cast<size_t>(arch.data() + arch.size() - end));
  const int device = arch_number(major, minor);
  if (suffix == "a") return device == number;
  if (suffix == "-real") return major == number / 10 && minor >= number % 10;
  if (suffix.empty() || suffix == "-virtual") return device >= number;
  return false;
}

}  // namespace

bool cuda_archs_run_on(std::string_view archs, int major, int minor) {
  size_t begin = 0;
  while (begin <= archs.size()) {
    size_t end = archs.find_first_of(",;", begin);
    if (end == std::string_view::npos) end = archs.size();
    if (arch_runs_on(archs.substr(begin, end - begin), major, minor)) return true;
    begin = end + 1;
  }
  return false;
}

void check_cuda_device(const ModelConfig& c, const CudaDeviceInfo& device, std::string_view archs) {
  const std::string which = "cuda:" + std::to_string(device.index) + " (" + device.name +
                            ", compute capability " + capability(device.major, device.minor) + ")";
  if (!cuda_archs_run_on(archs, device.major, device.minor))
    throw Error(ErrorKind::unsupported,
                "device: " + which + " cannot run this build's CUDA kernels, which are for " +
                    "architectures " + std::string(archs) +
                    " (braidinfer's kernels target Hopper, compute capability 9.0: 90a)");
  const bool fp8 = c.weights != WeightFormat::dense;
  if (fp8 && arch_number(device.major, device.minor) < 89)
    throw Error(ErrorKind::unsupported,
                "quantization_config (or --quantize fp8): " +
                    std::string(weight_format_name(c.weights)) +
                    " weights (float8_e4m3fn) need a GPU with fp8, compute capability 8.9 or "
                    "newer; " + which + " has none");
}

}  // namespace braid::model
