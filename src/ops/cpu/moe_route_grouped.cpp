// Reference for the grouped routers (see ops.h): DeepSeek-V3's sigmoid one (moe_route_grouped)
// and DeepSeek-V2's softmax one (moe_route_softmax_grouped), one routine in two scoring modes,
// written as the contracts read, with sorts where the CUDA kernel uses warp reductions.
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

// The two scoring modes. Each expert has a value v (what its weight is made of) and a key (what
// the choices compare; NaN as -inf):
//   sigmoid_bias: v = s = sigmoid(x), key = s + bias; a group scores the sum of its two largest
//                 keys; weights v / (sum of the chosen v + 1e-20) * scale, always;
//   softmax:      v = p = softmax(x) (router_softmax, moe_route_topk_softmax's bits), key = p; a
//                 group scores its largest key; weights v / (sum of the chosen v) * scale when
//                 renormalize, else v * scale.
enum class Scoring { sigmoid_bias, softmax };

struct GroupedRouting {
  Scoring scoring;
  const Tensor* bias;  // sigmoid_bias only
  int n_group, topk_group, k;
  bool renormalize;  // softmax only (sigmoid_bias always renormalises)
  float scale;
};

void route_grouped(const Tensor& logits, const GroupedRouting& r, const Tensor& topk_weights,
                   const Tensor& topk_ids) {
  const int64_t tokens = logits.shape[0];
  const int experts = static_cast<int>(logits.shape[1]);
  const int n_group = r.n_group, k = r.k, group_size = experts / n_group;
  const bool softmax = r.scoring == Scoring::softmax;
  std::vector<float> x(experts), v(experts), key(experts), group_scores(n_group), top;
  std::vector<bool> kept(experts);

  for (int64_t t = 0; t < tokens; ++t) {
    if (softmax) {
      for (int e = 0; e < experts; ++e)
        x[e] = load_as_float(logits.data, logits.dtype, t * logits.row_stride() + e);
      router_softmax(x.data(), experts, v.data());
      for (int e = 0; e < experts; ++e) key[e] = choice_key(v[e]);
    } else {
      for (int e = 0; e < experts; ++e) {
        v[e] = sigmoid(load_as_float(logits.data, logits.dtype, t * logits.row_stride() + e));
        key[e] = choice_key(v[e] + load_as_float(r.bias->data, r.bias->dtype, e));
      }
    }

    // Group score: softmax, the group's largest key; sigmoid_bias, the sum of its two largest
    // (its only one when a group has one).
    for (int g = 0; g < n_group; ++g) {
      top.assign(key.begin() + g * group_size, key.begin() + (g + 1) * group_size);
      std::sort(top.begin(), top.end(), std::greater<float>());
      group_scores[g] = softmax ? top[0] : choice_key(group_size == 1 ? top[0] : top[0] + top[1]);
    }
    const std::vector<int> group_order = ranked(group_scores);
    std::fill(kept.begin(), kept.end(), false);
    for (int i = 0; i < r.topk_group; ++i)
      for (int j = 0; j < group_size; ++j) kept[group_order[i] * group_size + j] = true;

    // The dropped groups' experts are out of the race altogether (not scored 0, as in
    // transformers): sort the kept ones only.
    std::vector<int> candidates;
    std::vector<float> candidate_keys;
    for (int e = 0; e < experts; ++e)
      if (kept[e]) {
        candidates.push_back(e);
        candidate_keys.push_back(key[e]);
      }
    const std::vector<int> expert_order = ranked(candidate_keys);

    float* w = topk_weights.ptr<float>() + t * k;
    int32_t* ids = topk_ids.ptr<int32_t>() + t * k;
    float chosen_sum = 0;  // fp32, in order j = 0 .. k-1
    for (int j = 0; j < k; ++j) {
      ids[j] = candidates[expert_order[j]];
      w[j] = v[ids[j]];
      chosen_sum += w[j];
    }
    if (!softmax) {
      for (int j = 0; j < k; ++j) w[j] = w[j] / (chosen_sum + 1e-20f) * r.scale;
    } else if (r.renormalize) {
      for (int j = 0; j < k; ++j) w[j] = w[j] / chosen_sum * r.scale;
    } else {
      for (int j = 0; j < k; ++j) w[j] = w[j] * r.scale;
    }
  }
}

}  // namespace

void moe_route_grouped(const Tensor& logits, const Tensor& bias, int n_group, int topk_group,
                       int k, float routed_scaling_factor, const Tensor& topk_weights,
                       const Tensor& topk_ids) {
  route_grouped(logits,
                {Scoring::sigmoid_bias, &bias, n_group, topk_group, k, /*renormalize=*/true,
                 routed_scaling_factor},
                topk_weights, topk_ids);
}

void moe_route_softmax_grouped(const Tensor& logits, int n_group, int topk_group, int k,
                               bool renormalize, float routed_scaling_factor,
                               const Tensor& topk_weights, const Tensor& topk_ids) {
  route_grouped(logits,
                {Scoring::softmax, nullptr, n_group, topk_group, k, renormalize,
                 routed_scaling_factor},
                topk_weights, topk_ids);
}

}  // namespace braid::cpu
