// CUDA-event timing of enqueued work; see harness/timer.h for the three modes.
#include <vector>

#include "bench/harness/cuda/timer.h"
#include "braid/buffer.h"
#include "core/cuda_check.h"

namespace braid::bench {

namespace {

// Owned CUDA objects, so that an exception in the middle of timing leaks nothing.
class Event {
 public:
  Event() { BRAID_CUDA_CHECK(cudaEventCreate(&e_)); }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Microseconds between two recorded events, after waiting for the second.
double elapsed_us(const Event& start, const Event& stop) {
  BRAID_CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0.0f;
  BRAID_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return static_cast<double>(ms) * 1000.0;
}

// Captures `count` launches (sets continuing from *next) into one graph and instantiates it.
void capture(const LaunchFn& launch, int sets, int count, int* next, cudaStream_t s,
             GraphExec& g) {
  BRAID_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < count; ++i) launch((*next)++ % sets, Stream{s});
  } catch (...) {
    // Leave the stream usable: end the capture and drop whatever was captured.
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(s, &partial);
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
    throw;
  }
  BRAID_CUDA_CHECK(cudaStreamEndCapture(s, &g.graph_));
  BRAID_CUDA_CHECK(cudaGraphInstantiate(&g.exec_, g.graph_, 0));
  BRAID_CUDA_CHECK(cudaGraphUpload(g.exec_, s));
}

}  // namespace

Stats time_launches(const LaunchFn& launch, const TimingConfig& c) {
  validate(c);
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());  // the caller's setup work is done before timing
  StreamOwner owner;
  const cudaStream_t s = static_cast<cudaStream_t>(owner.get().handle);
  const Stream stream{s};
  Event start, stop;
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(c.reps));
  int next = 0;  // launch counter: launch j uses set j % sets

  switch (c.mode) {
    case TimingMode::per_launch: {
      for (int i = 0; i < c.warmup; ++i) launch(next++ % c.sets, stream);
      owner.synchronize();
      for (int r = 0; r < c.reps; ++r) {
        BRAID_CUDA_CHECK(cudaEventRecord(start.get(), s));
        launch(next++ % c.sets, stream);
        BRAID_CUDA_CHECK(cudaEventRecord(stop.get(), s));
        samples.push_back(elapsed_us(start, stop));  // waits: the next launch starts alone
      }
      break;
    }
    case TimingMode::back_to_back: {
      for (int i = 0; i < c.warmup; ++i) launch(next++ % c.sets, stream);
      owner.synchronize();
      for (int r = 0; r < c.reps; ++r) {
        BRAID_CUDA_CHECK(cudaEventRecord(start.get(), s));
        for (int b = 0; b < c.batch; ++b) launch(next++ % c.sets, stream);
        BRAID_CUDA_CHECK(cudaEventRecord(stop.get(), s));
        samples.push_back(elapsed_us(start, stop) / c.batch);
      }
      break;
    }
    case TimingMode::graph: {
      GraphExec g;
      capture(launch, c.sets, c.batch, &next, s, g);
      for (int i = 0; i < c.warmup; ++i) BRAID_CUDA_CHECK(cudaGraphLaunch(g.exec_, s));
      owner.synchronize();
      for (int r = 0; r < c.reps; ++r) {
        BRAID_CUDA_CHECK(cudaEventRecord(start.get(), s));
        BRAID_CUDA_CHECK(cudaGraphLaunch(g.exec_, s));
        BRAID_CUDA_CHECK(cudaEventRecord(stop.get(), s));
        samples.push_back(elapsed_us(start, stop) / c.batch);
      }
      break;
    }
  }
  owner.synchronize();
  BRAID_CUDA_CHECK(cudaGetLastError());  // an asynchronous fault in the timed work
  return summarize(std::move(samples));
}

}  // namespace braid::bench
