// The ceilings measured on the GPU (harness/ceilings.h has their arithmetic).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/harness/ceilings.h"
#include "braid/buffer.h"

namespace braid::bench {

struct CeilingsOptions {
  bool quick = false;
  int device = 0;
  std::function<void(const ResultRow&)> on_row;  // called as each row is measured
};

// The copy rows alone (cudaMemcpyAsync and the 16-byte copy kernel, the plan's sizes), for
// benchmarks that read their rows against the copy ceiling of the same run. Each row is passed
// to `add`; ceilings_from_rows of them gives the copy ceiling.
void measure_copy_ceiling(bool quick, int device, const std::function<void(ResultRow)>& add);
// Likewise the bf16 GEMM rows alone (the plan's GEMM shapes through ops::gemm, no GEMV), for
// benchmarks of compute-bound ops; ceilings_from_rows of them gives the GEMM ceiling.
void measure_gemm_ceiling(bool quick, int device, const std::function<void(ResultRow)>& add);
// Likewise the fp8 GEMM rows (the plan's fp8 shapes through cuBLASLt). A shape cuBLASLt cannot run
// gives fp8_gemm_failed_row (the ceiling then stays 0: not measured) instead of an exception.
void measure_fp8_gemm_ceiling(bool quick, int device, const std::function<void(ResultRow)>& add);

// What a suite measures first, its rows passed to `add`: the copy ceiling, with gemm the bf16 GEMM
// ceiling, with fp8 the fp8 GEMM ceiling too. Returns ceilings_from_rows of those rows.
Ceilings measure_ceilings(bool quick, int device, bool gemm, bool fp8,
                          const std::function<void(ResultRow)>& add);

// The fixed cost of any kernel (seed 000): an empty kernel and a one-thread read-write kernel
// (out[0] = in[0] + 1), both <<<1, 1>>>, on device `dev`, and the check that the read-write one
// did its one read and write (else its time means nothing). Not copyable: the probes point into
// it.
class LaunchProbes {
 public:
  struct Probe {
    const char* name;  // "empty_kernel", "minimal_rw_kernel"
    LaunchFn launch;
  };
  explicit LaunchProbes(Device dev);
  LaunchProbes(const LaunchProbes&) = delete;
  LaunchProbes& operator=(const LaunchProbes&) = delete;
  const std::vector<Probe>& probes() const { return probes_; }
  // Throws braid::Error (internal) "WHAT: minimal_rw_kernel wrote X, expected Y".
  void check(const std::string& what) const;

 private:
  OwnedTensor in_, out_;
  std::vector<Probe> probes_;
};

// Measures everything in the plan on CUDA device `options.device` and returns the run, with
// device info, ceilings and provenance filled in. Throws braid::Error (unsupported) without a
// CUDA device.
Report run_ceilings(const CeilingsOptions& options);

}  // namespace braid::bench
