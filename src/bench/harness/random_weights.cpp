#include "bench/harness/random_weights.h"

#include <random>

#include "bench/harness/cuda/kernels.h"
#include "braid/dtype.h"

namespace braid::bench {

model::Weights random_weights(const model::ModelConfig& c, Device device, DType dtype,
                              std::vector<std::pair<std::string, Tensor>>* named) {
  uint64_t seed = 1;
  return model::build_weights(
      c, device, dtype, [&](const std::string& name, const std::vector<int64_t>&, const Tensor& dst) {
        const bool norm = name.find("norm") != std::string::npos;
        const float lo = norm ? 0.9f : -0.03f, hi = norm ? 1.1f : 0.03f;
        if (device.is_cuda()) {
          fill_uniform(dst, seed++, lo, hi, {});
        } else {
          std::mt19937_64 rng(seed++);
          std::uniform_real_distribution<float> u(lo, hi);
          for (int64_t i = 0; i < dst.numel(); ++i) store_from_float(dst.data, dst.dtype, i, u(rng));
        }
        if (named) named->emplace_back(name, dst);
      });
}

}  // namespace braid::bench
