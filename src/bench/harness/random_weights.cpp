#include "bench/harness/random_weights.h"

#include <random>

#include "bench/harness/cuda/kernels.h"
#include "bench/harness/cuda_only.h"
#include "braid/dtype.h"

namespace braid::bench {

void fill_random(const Tensor& t, uint64_t seed, float lo, float hi) {
  if (t.device.is_cuda())
    return cuda_only(BRAID_CUDA_ONLY(fill_uniform), "fill_random")(t, seed, lo, hi, Stream{});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) store_from_float(t.data, t.dtype, i, dist(rng));
}

model::Weights random_weights(const model::ModelConfig& c, Device device, DType dtype,
                              std::vector<std::pair<std::string, Tensor>>* named) {
  uint64_t seed = 1;
  return model::build_weights(
      c, device, dtype, [&](const std::string& name, const std::vector<int64_t>&, const Tensor& dst) {
        const bool norm = name.find("norm") != std::string::npos;
        const float lo = norm ? 0.9f : -0.03f, hi = norm ? 1.1f : 0.03f;
        fill_random(dst, seed++, lo, hi);
        if (named) named->emplace_back(name, dst);
      });
}

}  // namespace braid::bench
