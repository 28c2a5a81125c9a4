#include <cstdlib>
#include <cstring>

#include "ops/cuda/pdl.cuh"

#include "braid/ops.h"

namespace braid::cuda {

bool programmatic_launch_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("BRAID_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

bool gemv_launch_programmatic(int groups) {
  return programmatic_launch_enabled() && ops::ConstantWeights::active() && groups <= 2;
}

}  // namespace braid::cuda
