#include "bench/attention_prefill_bench.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "braid/dtype.h"

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

void ErrorAccumulator::add(const float* out, const double* ref, int64_t n) {
  double ref_sq = 0;
  for (int64_t i = 0; i < n; ++i) ref_sq += ref[i] * ref[i];
  const double floor = n > 0 ? 0.1 * std::sqrt(ref_sq / double(n)) : 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double diff = std::fabs(double(out[i]) - ref[i]);  // NaN propagates into the maxima
    max_abs_ = std::isnan(diff) ? diff : std::max(max_abs_, diff);
    sum_abs_ += diff;
    diff_sq_ += diff * diff;
    const double denom = std::max(std::fabs(ref[i]), floor);
    if (denom > 0) max_rel_ = std::isnan(diff) ? diff : std::max(max_rel_, diff / denom);
    const double rounded = bf16_to_float(float_to_bf16(float(ref[i])));
    rounding_ = std::max(rounding_, std::fabs(rounded - ref[i]));
  }
  ref_sq_ += ref_sq;
  elements_ += n;
}

ErrorSummary ErrorAccumulator::summary() const {
  ErrorSummary s;
  s.elements = elements_;
  s.max_abs = max_abs_;
  s.mean_abs = elements_ > 0 ? sum_abs_ / double(elements_) : 0.0;
  s.max_rel = max_rel_;
  s.rel_l2 = ref_sq_ > 0 ? std::sqrt(diff_sq_ / ref_sq_) : std::sqrt(diff_sq_);
  s.rounding_max_abs = rounding_;
  return s;
}

}  // namespace braid::bench
