// The timer of every benchmark row: CUDA events around launches of a callable, as
// harness/timer.h describes its modes.
#pragma once

#include "bench/harness/stats.h"
#include "bench/harness/timer.h"

namespace braid::bench {

// Times `launch` on the current CUDA device. Every CUDA call is checked; an error in `launch`
// during graph capture ends the capture before the error propagates.
Stats time_launches(const LaunchFn& launch, const TimingConfig& config);

}  // namespace braid::bench
