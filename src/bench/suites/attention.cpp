#include "bench/suites/attention.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>


namespace braid::bench {

double attention_visible_pairs(int64_t q_len, int64_t kv_len, bool causal) {
  const double q = double(q_len), kv = double(kv_len);
  if (!causal) return q * kv;
  return q * (kv - q) + q * (q + 1) / 2;
}

double attention_prefill_flops(const PrefillShape& s) {
  return 4.0 * double(s.head_dim) * double(s.batch) * double(s.q_heads) *
         attention_visible_pairs(s.seq_len, s.seq_len, s.causal);
}

double attention_prefill_bytes(const PrefillShape& s, size_t elem_bytes) {
  const double tokens = double(s.batch) * double(s.seq_len);
  const double q_out =
      2.0 * tokens * double(s.q_heads) * double(s.head_dim);                  // q read, out written
  const double k_v = 2.0 * tokens * double(s.kv_heads) * double(s.head_dim);  // k and v read
  return (q_out + k_v) * double(elem_bytes);
}

double naive_attention_extra_bytes(const PrefillShape& s, size_t score_bytes,
                                   size_t softmax_bytes) {
  const double entries =
      double(s.batch) * double(s.q_heads) * double(s.seq_len) * double(s.seq_len);
  return entries * double(score_bytes + softmax_bytes);
}

std::vector<int64_t> validation_rows(int64_t seq_len, int count, uint64_t seed) {
  std::vector<int64_t> rows;
  if (seq_len <= 0) return rows;
  if (seq_len <= count) {
    for (int64_t i = 0; i < seq_len; ++i) rows.push_back(i);
    return rows;
  }
  std::set<int64_t> picked;
  auto pick = [&](int64_t r) {
    if (r >= 0 && r < seq_len && int(picked.size()) < count) picked.insert(r);
  };
  // Ends and tile edges first: that is where masking and partial tiles go wrong.
  pick(0);
  pick(seq_len - 1);
  for (int64_t edge = 64; edge <= 512; edge += 64) {
    pick(edge - 1);
    pick(edge);
  }
  for (int64_t back : {64, 65, 128, 129}) pick(seq_len - back);
  pick(seq_len / 2 - 1);
  pick(seq_len / 2);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> any(0, seq_len - 1);
  while (int(picked.size()) < count) pick(any(rng));
  return {picked.begin(), picked.end()};
}

double reference_attention_row(const float* q, const float* k, const float* v, int64_t n,
                               int64_t head_dim, int64_t kv_stride, double scale, double* out) {
  std::vector<double> score(static_cast<size_t>(n));
  double max_score = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const float* kj = k + j * kv_stride;
    double dot = 0;
    for (int64_t d = 0; d < head_dim; ++d) dot += double(q[d]) * double(kj[d]);
    score[j] = dot * scale;
    max_score = std::max(max_score, score[j]);
  }
  std::fill(out, out + head_dim, 0.0);
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double p = std::exp(score[j] - max_score);
    sum += p;
    const float* vj = v + j * kv_stride;
    for (int64_t d = 0; d < head_dim; ++d) out[d] += p * double(vj[d]);
  }
  for (int64_t d = 0; d < head_dim; ++d) out[d] /= sum;
  return max_score + std::log(sum);
}

}  // namespace braid::bench
