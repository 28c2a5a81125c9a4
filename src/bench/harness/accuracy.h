// How far a kernel's output is from its reference: the error figures every benchmark row can
// carry (seed 001's validation table: max absolute, mean absolute, max relative error), and the
// accumulator that computes them. CPU-only, so it is unit-tested in CI.
#pragma once

#include <cstdint>
#include <string>

namespace braid::bench {

// Error of an output against the reference, over the vectors added to it.
//   max_abs, mean_abs  of |out - ref| over every element
//   max_rel            max |out - ref| / max(|ref|, floor), floor = 0.1 * the RMS of the
//                      element's own reference vector: an element that is a near-cancellation,
//                      far smaller than its neighbours, is measured against its vector's scale
//                      (an elementwise relative error of a near-zero value says nothing)
//   rel_l2             ||out - ref|| / ||ref|| over everything added
//   rounding_max_abs   max |bf16(ref) - ref|: what rounding the exact answer to bf16 alone
//                      costs, the floor under max_abs for a bf16 output
struct ErrorSummary {
  int64_t elements = 0;
  double max_abs = 0, mean_abs = 0, max_rel = 0, rel_l2 = 0, rounding_max_abs = 0;
};

class ErrorAccumulator {
 public:
  // One output vector of n elements and its reference.
  void add(const float* out, const double* ref, int64_t n);
  ErrorSummary summary() const;

 private:
  int64_t elements_ = 0;
  double max_abs_ = 0, sum_abs_ = 0, max_rel_ = 0, diff_sq_ = 0, ref_sq_ = 0, rounding_ = 0;
};

// A row's check against its reference: the error figures, what the reference was ("cpu fp64",
// "torch fp32"), and the pass rule. A row passes when it has no NaN, rel_l2 is at most
// rel_l2_tolerance (DESIGN.md's tolerances by dtype: 1e-5 for fp32 outputs, 1e-2 for bf16) and
// the suite's other checks of the same output passed (a NaN scan of every element where only a
// sample was compared, an auxiliary output such as the log-sum-exp; the suite's own table says
// which).
struct Accuracy {
  ErrorSummary error;
  std::string reference;
  double rel_l2_tolerance = 1e-2;
  bool other_checks_passed = true;
  bool passed() const;
};

// The DESIGN.md tolerance for an output of `dtype_bytes` bytes per element (4: fp32, else 16-bit).
double rel_l2_tolerance_for(int dtype_bytes);

}  // namespace braid::bench
