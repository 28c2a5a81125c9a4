// Querying the CUDA device for reports.
#pragma once

#include <optional>
#include <string>

#include "bench/harness/report.h"

namespace braid::bench {

// What the runtime, driver and cuBLASLt report about CUDA device `index`. Returns nullopt and sets
// *reason ("this build of braidinfer has no CUDA support", "no CUDA device: ...") when there is
// none; throws braid::Error for a failing CUDA call on a device that exists.
std::optional<DeviceInfo> query_device(int index, std::string* reason);

// query_device's answer, or braid::Error (unsupported) "WHAT: REASON" when there is none.
DeviceInfo require_device(int index, const std::string& what);

}  // namespace braid::bench
