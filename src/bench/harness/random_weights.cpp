#include "bench/harness/random_weights.h"

#include <random>

#include "bench/harness/cuda/kernels.h"
#include "bench/harness/cuda_only.h"
#include "bench/harness/fp8_fill.h"
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
        const bool scale = name.ends_with("_scale_inv") || name.ends_with("_scale");
        // fp8 linear layers and routed experts: e4m3 values of stddev 64 times scales near
        // 2.7e-4 (every "_scale_inv" / "_scale", the experts' per-block ones too), so the weights
        // they stand for spread like the 16-bit ones (uniform +-0.03: stddev 0.017).
        const float lo = norm ? 0.9f : scale ? 2.5e-4f : -0.03f;
        const float hi = norm ? 1.1f : scale ? 2.9e-4f : 0.03f;
        if (dst.dtype == DType::f8e4m3)
          fill_fp8_normal(dst, seed++, 64.0f);
        else
          fill_random(dst, seed++, lo, hi);
        if (named) named->emplace_back(name, dst);
      });
}

}  // namespace braid::bench
