// record_activity: a CUPTI trace around any GPU work (profile.h).
#include <cuda_runtime.h>

#include "bench/profile/cuda/cupti_collector.h"
#include "bench/profile/profile.h"
#include "core/cuda_check.h"

namespace braid::bench {

ProfileTrace record_activity(const RecordBody& body) {
  CuptiCollector cupti;
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  cupti.start();
  const uint64_t start = cupti.now();
  std::vector<HostRange> ranges;
  body([&cupti] { return cupti.now(); }, ranges);
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  ProfileTrace trace = cupti.stop();
  drop_records_before(trace, start);
  trace.ranges = std::move(ranges);
  return trace;
}

}  // namespace braid::bench
