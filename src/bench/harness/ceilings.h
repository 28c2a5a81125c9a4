// The ceilings every row is read against: the copy bandwidth, bf16 and fp8 GEMM rates, the bf16
// GEMV rate and fixed launch costs of the GPU in hand, measured in the same run. This header is
// the arithmetic (sizes, rows, the ceilings of a set of rows, the summary); the measurements are
// harness/cuda/ceilings.h; `braidinfer bench ceilings` prints them all (suites/ceilings.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/harness/report.h"
#include "bench/harness/timer.h"

namespace braid::bench {

struct GemmShape {
  int64_t m, n, k;
  std::string anchor;  // the H100 peer figure for this shape (ANCHORS.md), "" if none
};

// Sizes and repetitions; --quick shrinks both for smoke tests.
struct CeilingsPlan {
  size_t copy_bytes;          // per buffer; bytes moved per copy = 2 * copy_bytes
  TimingConfig copy_timing;
  std::vector<GemmShape> gemms;
  TimingConfig gemm_timing;
  std::vector<GemmShape> fp8_gemms;  // cuBLASLt e4m3 x e4m3 -> bf16 (gemm_timing)
  GemmShape gemv;             // m = 1
  int gemv_min_sets;          // weight copies rotated at least
  TimingConfig gemv_timing;
  TimingConfig launch_alone;  // per_launch
  TimingConfig launch_back_to_back;
  TimingConfig launch_graph;
};
CeilingsPlan ceilings_plan(bool quick);

// Rows for a GEMM / GEMV of bf16 in and out: FLOPs 2mnk, bytes = a + w + out, each once.
ResultRow gemm_row(const GemmShape& s, const Stats& stats, const std::string& timing);
ResultRow gemv_row(const GemmShape& s, const Stats& stats, const std::string& timing, int sets);

// A GEMM of fp8 e4m3 a [m, k] and w [n, k] into bf16 out [m, n]: FLOPs 2mnk, bytes = a + w (1 B
// each) + out (2 B). Bound::compute_fp8.
ResultRow fp8_gemm_row(const GemmShape& s, const Stats& stats, const std::string& timing);
// The row of an fp8 GEMM shape that could not be measured (cuBLASLt offered no algorithm, or the
// call failed): no time (median 0, so no rate), the reason in its note. Never a made-up number.
ResultRow fp8_gemm_failed_row(const GemmShape& s, const std::string& reason);
inline constexpr const char* kFp8GemmRow = "gemm_fp8_e4m3";

// copy ceiling = the fastest copy row; GEMM ceiling = the fastest gemm_bf16 row; fp8 GEMM ceiling
// = the fastest measured gemm_fp8_e4m3 row.
Ceilings ceilings_from_rows(const std::vector<ResultRow>& rows);

// The short summary printed under the table: the ceilings and the launch costs.
std::string ceilings_summary(const Report& run);

}  // namespace braid::bench
