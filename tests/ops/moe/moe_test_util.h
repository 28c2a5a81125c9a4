// Helpers shared by the moe_experts tests: a router-like routing, and the element-wise check
// their CUDA results are held to.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "test_util.h"

namespace braid::test::moe {

// ids [tokens, k] i32 on the CPU: k distinct random experts per token, as a router gives.
inline void distinct_routing(const Tensor& ids, int64_t experts, uint64_t seed) {
  const int64_t tokens = ids.shape[0], k = ids.shape[1];
  std::mt19937_64 rng(seed);
  std::vector<int32_t> all(static_cast<size_t>(experts));
  std::iota(all.begin(), all.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), k, ids.ptr<int32_t>() + t * k);
  }
}

// Uniform weights in [-scale, scale] of `shape`, from `seed`; but a tensor of more than 2^24
// elements is made once per dtype and shape, from a seed of its own, and copied: the
// Qwen3-30B-A3B-sized experts (1.2 G elements) take half a minute to make on the GPU machine's
// CPU, and a dozen GPU tests use them. The test's seed still draws the activations and routing.
inline OwnedTensor expert_weights(DType dtype, const std::vector<int64_t>& shape, uint64_t seed, float scale) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (numel <= (int64_t{1} << 24)) return random_host(dtype, shape, seed, -scale, scale);
  static std::map<std::pair<DType, std::vector<int64_t>>, OwnedTensor> made;
  auto it = made.find({dtype, shape});
  if (it == made.end()) {
    const uint64_t own_seed = static_cast<uint64_t>(numel) * 31 + shape[1];
    it = made.emplace(std::make_pair(dtype, shape), random_host(dtype, shape, own_seed, -scale, scale)).first;
  }
  return to_device(it->second.view(), Device::cpu());
}

// Element by element: |got - ref| <= 3 tol (|ref| + rms(ref)), which a wrong row, expert,
// token or weight breaks by far (its error is of the order of rms); and the norm-wise error
// within tol.
inline void expect_elementwise_close(const std::vector<float>& got, const std::vector<float>& ref,
                                     double tol) {
  ASSERT_EQ(got.size(), ref.size());
  double sq = 0;
  for (float r : ref) sq += static_cast<double>(r) * r;
  const double rms = ref.empty() ? 0.0 : std::sqrt(sq / static_cast<double>(ref.size()));
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = 3 * tol * (std::fabs(static_cast<double>(ref[i])) + rms);
    if (!(std::fabs(static_cast<double>(got[i]) - ref[i]) <= bound)) {
      if (++bad <= 5) ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0) << "of " << got.size() << " elements";
  EXPECT_LE(rel_error(got, ref), tol);
}

}  // namespace braid::test::moe
