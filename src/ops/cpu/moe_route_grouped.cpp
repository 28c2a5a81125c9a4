// Reference for moe_route_grouped (see ops.h): DeepSeek-V3's grouped sigmoid router, written as
// the contract reads, with sorts where the CUDA kernel uses warp reductions.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

namespace {

// sigmoid rounded once to fp32; the CUDA kernel uses the same fp64 formula, so both get the same
// bits and the ids they choose agree exactly.
float sigmoid(float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }

// What the choices compare: a NaN counts as -inf (below every number).
float choice_key(float v) { return std::isnan(v) ? -INFINITY : v; }

// Indices 0 .. n-1 ordered by descending key, equal keys in index order (the stable sort).
std::vector<int> ranked(const std::vector<float>& keys) {
  std::vector<int> order(keys.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return keys[a] > keys[b]; });
  return order;
}

}  // namespace

void moe_route_grouped(const Tensor& logits, const Tensor& bias, int n_group, int topk_group,
                       int k, float routed_scaling_factor, const Tensor& topk_weights,
                       const Tensor& topk_ids) {
  const int64_t tokens = logits.shape[0];
  const int experts = static_cast<int>(logits.shape[1]);
  const int group_size = experts / n_group;
  std::vector<float> s(experts), b(experts), group_scores(n_group), top;
  std::vector<bool> kept(experts);

  for (int64_t t = 0; t < tokens; ++t) {
    for (int e = 0; e < experts; ++e) {
      s[e] = sigmoid(load_as_float(logits.data, logits.dtype, t * logits.row_stride() + e));
      b[e] = choice_key(s[e] + load_as_float(bias.data, bias.dtype, e));
    }

    // Group score: the sum of the group's two largest b (its only one when a group has one).
    for (int g = 0; g < n_group; ++g) {
      top.assign(b.begin() + g * group_size, b.begin() + (g + 1) * group_size);
      std::sort(top.begin(), top.end(), std::greater<float>());
      group_scores[g] = choice_key(group_size == 1 ? top[0] : top[0] + top[1]);
    }
    const std::vector<int> group_order = ranked(group_scores);
    std::fill(kept.begin(), kept.end(), false);
    for (int r = 0; r < topk_group; ++r)
      for (int i = 0; i < group_size; ++i) kept[group_order[r] * group_size + i] = true;

    // The dropped groups' experts are out of the race altogether (not scored 0, as in
    // transformers): sort the kept ones only.
    std::vector<int> candidates;
    std::vector<float> candidate_keys;
    for (int e = 0; e < experts; ++e)
      if (kept[e]) {
        candidates.push_back(e);
        candidate_keys.push_back(b[e]);
      }
    const std::vector<int> expert_order = ranked(candidate_keys);

    float* w = topk_weights.ptr<float>() + t * k;
    int32_t* ids = topk_ids.ptr<int32_t>() + t * k;
    float chosen_sum = 0;  // fp32, in order j = 0 .. k-1
    for (int j = 0; j < k; ++j) {
      ids[j] = candidates[expert_order[j]];
      w[j] = s[ids[j]];
      chosen_sum += w[j];
    }
    for (int j = 0; j < k; ++j) w[j] = w[j] / (chosen_sum + 1e-20f) * routed_scaling_factor;
  }
}

}  // namespace braid::cpu
