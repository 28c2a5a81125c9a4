// Reference multi-head latent attention over a paged cache of latent rows (see ops.h): plain
// loops, double accumulation, as attention() does it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

void attention_mla(const Tensor& q_latent, const Tensor& q_rope, const Tensor& cu_seqlens_q,
                   const Tensor& cache, const Tensor& page_table, const Tensor& kv_lens,
                   bool causal, float softmax_scale, const Tensor& out, const Tensor& lse) {
  const int64_t heads = q_latent.shape[1], r = q_latent.shape[2], dr = q_rope.shape[2];
  const int64_t width = r + dr;  // one cached row: [latent (r) | rope key (dr)]
  const int64_t page_size = cache.shape[1];
  const int64_t batch = page_table.shape[0], max_pages = page_table.shape[1];
  const int32_t* cu = cu_seqlens_q.ptr<int32_t>();
  const bool write_lse = lse.ndim != 0;

  std::vector<float> rows, qv(static_cast<size_t>(width));
  std::vector<double> scores, acc(static_cast<size_t>(r));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q_begin = cu[b], q_len = cu[b + 1] - cu[b];
    const int64_t kv_len = kv_lens.ptr<int32_t>()[b];
    if (q_len == 0) continue;
    // The sequence's rows gathered from its pages as floats: [kv_len, width].
    const int32_t* table_row = page_table.ptr<int32_t>() + b * max_pages;
    rows.resize(static_cast<size_t>(kv_len * width));
    for (int64_t j = 0; j < kv_len; ++j) {
      const int64_t slot = table_row[j / page_size] * page_size + j % page_size;
      for (int64_t e = 0; e < width; ++e)
        rows[static_cast<size_t>(j * width + e)] =
            load_as_float(cache.data, cache.dtype, slot * width + e);
    }

    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t t = q_begin + i;
      // Queries are the sequence's last q_len tokens: query i sits at position kv_len - q_len + i.
      const int64_t visible = causal ? kv_len - q_len + i + 1 : kv_len;
      scores.resize(static_cast<size_t>(visible));
      for (int64_t h = 0; h < heads; ++h) {
        // The query as one row [q_latent | q_rope], matching the cached row's layout.
        for (int64_t d = 0; d < r; ++d)
          qv[d] = load_as_float(q_latent.data, q_latent.dtype,
                                t * q_latent.strides[0] + h * q_latent.strides[1] + d);
        for (int64_t d = 0; d < dr; ++d)
          qv[r + d] = load_as_float(q_rope.data, q_rope.dtype,
                                    t * q_rope.strides[0] + h * q_rope.strides[1] + d);

        double max_score = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          const float* row = rows.data() + j * width;
          double dot = 0.0;
          for (int64_t d = 0; d < width; ++d) dot += static_cast<double>(qv[d]) * row[d];
          scores[j] = dot * softmax_scale;
          max_score = std::max(max_score, scores[j]);
        }
        double denom = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < visible; ++j) {
          const double p = std::exp(scores[j] - max_score);
          denom += p;
          const float* latent = rows.data() + j * width;  // the value is the latent part only
          for (int64_t d = 0; d < r; ++d) acc[d] += p * latent[d];
        }
        void* out_head = out.at(t * out.strides[0] + h * out.strides[1]);
        for (int64_t d = 0; d < r; ++d)
          store_from_float(out_head, out.dtype, d, static_cast<float>(acc[d] / denom));
        if (write_lse)
          lse.ptr<float>()[t * heads + h] = static_cast<float>(max_score + std::log(denom));
      }
    }
  }
}

}  // namespace braid::cpu
