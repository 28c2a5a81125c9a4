// The CUDA-event timer: configuration checks and labels (CPU, run in CI), then on a GPU the set
// rotation of each mode and the time it measures (skipped without one).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "bench/harness/cuda/timer.h"
#include "bench/harness/cuda_only.h"
#include "braid/buffer.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid::bench {
namespace {

TimingConfig config(TimingMode mode, int sets, int warmup, int reps, int batch) {
  TimingConfig c;
  c.mode = mode;
  c.sets = sets;
  c.warmup = warmup;
  c.reps = reps;
  c.batch = batch;
  return c;
}

TEST(BenchTimer, ValidateAcceptsSensibleConfigs) {
  EXPECT_NO_THROW(validate(config(TimingMode::per_launch, 1, 0, 1, 1)));
  EXPECT_NO_THROW(validate(config(TimingMode::back_to_back, 4, 10, 20, 100)));
  EXPECT_NO_THROW(validate(config(TimingMode::graph, 3, 3, 20, 1000)));
}

TEST(BenchTimer, ValidateNamesTheBadField) {
  using M = TimingMode;
  test::expect_error([] { validate(config(M::per_launch, 0, 1, 1, 1)); },
                     ErrorKind::invalid_argument, {"bench timer", "'sets'", "at least 1", "got 0"});
  test::expect_error([] { validate(config(M::per_launch, 1, -1, 1, 1)); },
                     ErrorKind::invalid_argument, {"'warmup'", "got -1"});
  test::expect_error([] { validate(config(M::graph, 1, 1, 0, 1)); },
                     ErrorKind::invalid_argument, {"'reps'", "got 0"});
  test::expect_error([] { validate(config(M::back_to_back, 1, 1, 1, 0)); },
                     ErrorKind::invalid_argument, {"'batch'", "got 0"});
  test::expect_error([] { validate(config(M::per_launch, 1, 1, 1, 5)); },
                     ErrorKind::invalid_argument, {"'batch'", "per_launch", "got 5"});
}

TEST(BenchTimer, LabelsSayHowAResultWasTimed) {
  EXPECT_EQ(timing_label(config(TimingMode::per_launch, 1, 0, 1, 1)), "per_launch");
  EXPECT_EQ(timing_label(config(TimingMode::back_to_back, 1, 0, 1, 50)), "back_to_back x50");
  EXPECT_EQ(timing_label(config(TimingMode::graph, 1, 0, 1, 1000)), "graph x1000");
}

TEST(BenchTimer, RotatingSetsExceedTwiceTheL2) {
  const size_t l2 = 50'000'000;
  // Each returned count is the smallest one whose total exceeds 2 * L2.
  for (size_t per_set : {size_t{1000}, size_t{25'165'824}, size_t{33'333'333}, size_t{50'000'000},
                         size_t{99'999'999}, size_t{100'000'000}, size_t{100'000'001}}) {
    const int n = rotating_sets(per_set, l2);
    EXPECT_GT(n * per_set, 2 * l2) << per_set;
    if (n > 1) EXPECT_LE((n - 1) * per_set, 2 * l2) << per_set;
  }
  EXPECT_EQ(rotating_sets(100'000'001, l2), 1);
  EXPECT_EQ(rotating_sets(100'000'000, l2), 2);  // exactly 2x L2 is not "more than"
  EXPECT_EQ(rotating_sets(90'177'536, l2, 3), 3);  // the GEMV weights: at least 3 copies
  EXPECT_EQ(rotating_sets(1 << 30, l2, 0), 1);      // never fewer than one
  EXPECT_EQ(rotating_sets(0, l2, 2), 2);
}

#if BRAID_WITH_CUDA

// Records which set each call asked for, and enqueues a small memset so captures are not empty.
struct Recorder {
  std::vector<int> sets;
  OwnedTensor scratch{DType::u8, {256}, Device::cuda()};
  LaunchFn fn() {
    return [this](int set, Stream s) {
      sets.push_back(set);
      ASSERT_EQ(cudaMemsetAsync(scratch.data(), set, 256, static_cast<cudaStream_t>(s.handle)),
                cudaSuccess);
    };
  }
};

TEST(BenchTimerGpu, PerLaunchCyclesSetsThroughWarmupAndReps) {
  BRAID_REQUIRE_CUDA();
  Recorder r;
  Stats s = time_launches(r.fn(), config(TimingMode::per_launch, 3, 2, 5, 1));
  EXPECT_EQ(s.count, 5);
  EXPECT_EQ(r.sets, (std::vector<int>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_GT(s.median_us, 0.0);
  EXPECT_LE(s.min_us, s.median_us);
  EXPECT_LE(s.median_us, s.max_us);
}

TEST(BenchTimerGpu, BackToBackCyclesSetsAcrossSamples) {
  BRAID_REQUIRE_CUDA();
  Recorder r;
  Stats s = time_launches(r.fn(), config(TimingMode::back_to_back, 2, 1, 2, 3));
  EXPECT_EQ(s.count, 2);
  EXPECT_EQ(r.sets, (std::vector<int>{0, 1, 0, 1, 0, 1, 0}));
}

TEST(BenchTimerGpu, GraphCapturesBatchLaunchesOnce) {
  BRAID_REQUIRE_CUDA();
  Recorder r;
  Stats s = time_launches(r.fn(), config(TimingMode::graph, 3, 5, 4, 4));
  EXPECT_EQ(s.count, 4);
  EXPECT_EQ(r.sets, (std::vector<int>{0, 1, 2, 0}));  // replays do not call back
}

// A host function that sleeps sits between the events: every mode must report at least the
// sleep per launch, and (having divided by the batch) not the batch's total.
TEST(BenchTimerGpu, MeasuresTheTimeBetweenTheEventsPerLaunch) {
  BRAID_REQUIRE_CUDA();
  auto sleep_2ms = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  LaunchFn fn = [&](int, Stream s) {
    ASSERT_EQ(cudaLaunchHostFunc(static_cast<cudaStream_t>(s.handle), sleep_2ms, nullptr),
              cudaSuccess);
  };
  for (TimingConfig c : {config(TimingMode::per_launch, 1, 1, 3, 1),
                         config(TimingMode::back_to_back, 1, 1, 3, 4),
                         config(TimingMode::graph, 1, 1, 3, 4)}) {
    SCOPED_TRACE(timing_label(c));
    Stats s = time_launches(fn, c);
    EXPECT_GE(s.min_us, 1900.0);
    EXPECT_LT(s.median_us, 7500.0);  // 4 launches undivided would be >= 8000
  }
}

TEST(BenchTimerGpu, AnErrorDuringCaptureEndsTheCaptureAndPropagates) {
  BRAID_REQUIRE_CUDA();
  Recorder r;
  LaunchFn inner = r.fn();
  int calls = 0;
  LaunchFn failing = [&](int set, Stream s) {
    if (++calls == 2) throw Error(ErrorKind::internal, "planted failure");
    inner(set, s);
  };
  test::expect_error([&] { time_launches(failing, config(TimingMode::graph, 1, 1, 2, 3)); },
                     ErrorKind::internal, {"planted failure"});
  // The device is still usable afterwards.
  Stats s = time_launches(inner, config(TimingMode::graph, 1, 1, 2, 3));
  EXPECT_EQ(s.count, 2);
}

#else

TEST(BenchTimer, CpuOnlyBuildSaysItCannotTime) {
  // The timer is in harness/cuda/, which this build lacks: reaching it says so.
  test::expect_error(
      [] {
        cuda_only(BRAID_CUDA_ONLY(time_launches), "bench timer")([](int, Stream) {}, TimingConfig{});
      },
      ErrorKind::unsupported, {"no CUDA support"});
}

#endif

}  // namespace
}  // namespace braid::bench
