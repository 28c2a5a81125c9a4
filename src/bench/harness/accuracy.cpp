#include "bench/harness/accuracy.h"

#include <algorithm>
#include <cmath>

#include "braid/dtype.h"

namespace braid::bench {

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

bool Accuracy::passed() const {
  const ErrorSummary& e = error;
  if (std::isnan(e.max_abs) || std::isnan(e.rel_l2) || std::isnan(e.mean_abs)) return false;
  return other_checks_passed && e.rel_l2 <= rel_l2_tolerance;
}

double rel_l2_tolerance_for(int dtype_bytes) { return dtype_bytes >= 4 ? 1e-5 : 1e-2; }

}  // namespace braid::bench
