// Timing device work with CUDA events: how (this header), and the timer itself
// (time_launches, harness/cuda/timer.h).
//
// The caller hands over a callable that enqueues the work for one input set on a stream; the
// timer owns a non-blocking stream, cycles through the input sets (launch j uses set j % sets,
// counting every launch, warm-up included, so consecutive launches never reuse one set while
// there is more than one), warms up, and collects one sample per repetition:
//   per_launch    event / launch / event around every launch, host-synchronised each time, so
//                 the GPU is idle when the first event is recorded and the interval includes the
//                 launch latency (seed 000's "fixed cost of any kernel").
//   back_to_back  events around `batch` launches enqueued without waiting; sample = time/batch.
//   graph         `batch` launches captured once into a CUDA graph (cycling the sets), the graph
//                 instantiated once and replayed; sample = replay time / batch.
// Warm-up counts launches (per_launch, back_to_back) or graph replays (graph).
// The timer synchronises the device before it starts, so work the caller enqueued on other
// streams (fills, copies) is finished.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "bench/harness/stats.h"
#include "braid/stream.h"

namespace braid::bench {

enum class TimingMode { per_launch, back_to_back, graph };

struct TimingConfig {
  TimingMode mode = TimingMode::per_launch;
  int sets = 1;     // rotating input sets
  int warmup = 10;  // untimed launches (graph mode: untimed replays)
  int reps = 100;   // timed samples
  int batch = 1;    // launches per sample in back_to_back and graph mode; must be 1 in per_launch
};

using LaunchFn = std::function<void(int set, Stream stream)>;

// Throws braid::Error (invalid_argument) naming the bad field.
void validate(const TimingConfig& config);

// "per_launch", "back_to_back x50", "graph x1000": how a result was timed, for reports.
std::string timing_label(const TimingConfig& config);
const char* mode_name(TimingMode mode);

// How many copies of the inputs to rotate through so that together they exceed twice the L2
// cache (and so repeated launches read DRAM, not L2): at least `min_sets`, at least 1.
int rotating_sets(size_t bytes_per_set, size_t l2_bytes, int min_sets = 1);

}  // namespace braid::bench
