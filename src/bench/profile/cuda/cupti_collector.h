// The CUPTI activity collector behind `braidinfer profile` (CUDA builds only: cupti_collector.cpp).
// libcupti ships only as a shared library, so it is not linked: the collector dlopens it
// ("libcupti.so.13", "libcupti.so", then $CUDA_HOME and /usr/local/cuda under lib64 and
// extras/CUPTI/lib64) and resolves the functions it uses, so every other command runs where
// libcupti is missing.
#pragma once

#include <cstdint>
#include <memory>

#include "bench/profile/profile.h"

namespace braid::bench {

class CuptiCollector {
 public:
  // Loads libcupti and checks that it is a CUDA 13 CUPTI (the record layouts read here:
  // CUpti_ActivityKernel10, Memcpy6, Memset4, API). Throws braid::Error (unsupported) naming
  // every path tried, or the version found.
  CuptiCollector();
  ~CuptiCollector();  // disables the record kinds it enabled
  CuptiCollector(const CuptiCollector&) = delete;
  CuptiCollector& operator=(const CuptiCollector&) = delete;

  // Enables runtime and driver API, concurrent kernel, memcpy and memset records. One collector
  // records at a time (CUPTI's buffer callbacks are process-wide).
  void start();
  // Flushes and disables the records; returns them (ranges empty: the caller adds its own).
  ProfileTrace stop();
  // CUPTI's clock (ns), the clock of every record: host ranges must be taken with it.
  uint64_t now() const;

  struct Library;

 private:
  std::unique_ptr<Library> lib_;
  bool started_ = false;
};

}  // namespace braid::bench
