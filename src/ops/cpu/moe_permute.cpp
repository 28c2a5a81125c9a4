// Reference MoE permutation (see ops.h): a counting sort of the pairs by expert, stable in pair
// order; the gather of token rows and the weighted combine in fp32.
#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

// Bucket E takes the pairs of other ranks' experts (kMoeNotLocal: the ids are checked before):
// they sort after every valid pair, in pair order, with pair_rows -1 (moe_combine skips them).
void moe_permute(const Tensor& topk_ids, int num_experts, const Tensor& expert_offsets,
                 const Tensor& sorted_pairs, const Tensor& pair_rows) {
  const int64_t pairs = topk_ids.numel();
  const int32_t* ids = topk_ids.ptr<int32_t>();
  int32_t* offsets = expert_offsets.ptr<int32_t>();
  auto bucket = [&](int64_t p) { return ids[p] >= 0 ? ids[p] : num_experts; };
  std::vector<int32_t> next(static_cast<size_t>(num_experts) + 2, 0);
  for (int64_t p = 0; p < pairs; ++p) ++next[static_cast<size_t>(bucket(p)) + 1];
  for (int e = 0; e <= num_experts; ++e) next[e + 1] += next[e];  // next[e] = first row of e
  for (int e = 0; e <= num_experts; ++e) offsets[e] = next[e];
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t row = next[bucket(p)]++;
    sorted_pairs.ptr<int32_t>()[row] = static_cast<int32_t>(p);
    pair_rows.ptr<int32_t>()[p] = ids[p] >= 0 ? row : -1;
  }
}

void moe_local_expert_ids(const Tensor& topk_ids, int first, int count, const Tensor& local_ids) {
  const int32_t* ids = topk_ids.ptr<int32_t>();
  int32_t* out = local_ids.ptr<int32_t>();
  for (int64_t p = 0; p < topk_ids.numel(); ++p)
    out[p] = ids[p] >= first && ids[p] - first < count ? ids[p] - first : ops::kMoeNotLocal;
}

void moe_gather(const Tensor& x, const Tensor& sorted_pairs, int k, const Tensor& xs) {
  const int64_t rows = xs.shape[0], hidden = x.shape[1];
  const int64_t elem = static_cast<int64_t>(dtype_size(x.dtype));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = sorted_pairs.ptr<int32_t>()[r] / k;
    const char* src = static_cast<const char*>(x.data) + t * x.row_stride() * elem;
    char* dst = static_cast<char*>(xs.data) + r * xs.row_stride() * elem;
    std::copy(src, src + hidden * elem, dst);
  }
}

void moe_combine(const Tensor& ys, const Tensor& pair_rows, const Tensor& topk_weights,
                 const Tensor& out) {
  const int64_t tokens = out.shape[0], hidden = out.shape[1], k = topk_weights.shape[1];
  const float* w = topk_weights.ptr<float>();
  const int32_t* rows = pair_rows.ptr<int32_t>();
  std::vector<float> acc(static_cast<size_t>(hidden));
  for (int64_t t = 0; t < tokens; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = rows[t * k + j];
      if (r < 0) continue;
      for (int64_t h = 0; h < hidden; ++h)
        acc[h] += w[t * k + j] * load_as_float(ys.data, ys.dtype, r * ys.row_stride() + h);
    }
    for (int64_t h = 0; h < hidden; ++h)
      store_from_float(out.data, out.dtype, t * out.row_stride() + h, acc[h]);
  }
}

}  // namespace braid::cpu
