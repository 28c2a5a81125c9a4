// Reference attention over a paged KV cache (see ops.h): plain loops, double accumulation.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

namespace {

// One sequence's keys or values gathered from its pages as floats: [kv_len, kv_heads, head_dim].
std::vector<float> gather_pages(const Tensor& pages, const int32_t* table_row, int64_t kv_len) {
  const int64_t page_size = pages.shape[1];
  const int64_t token_elems = pages.shape[2] * pages.shape[3];
  std::vector<float> out(static_cast<size_t>(kv_len * token_elems));
  for (int64_t j = 0; j < kv_len; ++j) {
    const int64_t slot = table_row[j / page_size] * page_size + j % page_size;
    for (int64_t e = 0; e < token_elems; ++e)
      out[static_cast<size_t>(j * token_elems + e)] =
          load_as_float(pages.data, pages.dtype, slot * token_elems + e);
  }
  return out;
}

}  // namespace

void attention(const Tensor& q, const Tensor& cu_seqlens_q, const ops::PagedKV& kv, bool causal,
               float softmax_scale, const Tensor& out, const Tensor& lse) {
  const int64_t q_heads = q.shape[1], head_dim = q.shape[2];
  const int64_t kv_heads = kv.k_pages.shape[2], group = q_heads / kv_heads;
  const int64_t batch = kv.page_table.shape[0], max_pages = kv.page_table.shape[1];
  const int32_t* cu = cu_seqlens_q.ptr<int32_t>();
  const bool write_lse = lse.ndim != 0;

  std::vector<float> qv(static_cast<size_t>(head_dim));
  std::vector<double> scores, acc(static_cast<size_t>(head_dim));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q_begin = cu[b], q_len = cu[b + 1] - cu[b];
    const int64_t kv_len = kv.kv_lens.ptr<int32_t>()[b];
    if (q_len == 0) continue;
    const int32_t* table_row = kv.page_table.ptr<int32_t>() + b * max_pages;
    const std::vector<float> keys = gather_pages(kv.k_pages, table_row, kv_len);
    const std::vector<float> values = gather_pages(kv.v_pages, table_row, kv_len);

    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t t = q_begin + i;
      // Queries are the sequence's last q_len tokens: query i sits at position kv_len - q_len + i.
      const int64_t visible = causal ? kv_len - q_len + i + 1 : kv_len;
      scores.resize(static_cast<size_t>(visible));
      for (int64_t h = 0; h < q_heads; ++h) {
        const int64_t kh = h / group;
        for (int64_t d = 0; d < head_dim; ++d)
          qv[d] = load_as_float(q.data, q.dtype, t * q.strides[0] + h * q.strides[1] + d);

        double max_score = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          const float* key = keys.data() + (j * kv_heads + kh) * head_dim;
          double dot = 0.0;
          for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(qv[d]) * key[d];
          scores[j] = dot * softmax_scale;
          max_score = std::max(max_score, scores[j]);
        }
        double denom = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < visible; ++j) {
          const double p = std::exp(scores[j] - max_score);
          denom += p;
          const float* value = values.data() + (j * kv_heads + kh) * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) acc[d] += p * value[d];
        }
        void* out_head = out.at(t * out.strides[0] + h * out.strides[1]);
        for (int64_t d = 0; d < head_dim; ++d)
          store_from_float(out_head, out.dtype, d, static_cast<float>(acc[d] / denom));
        if (write_lse)
          lse.ptr<float>()[t * q_heads + h] = static_cast<float>(max_score + std::log(denom));
      }
    }
  }
}

}  // namespace braid::cpu
