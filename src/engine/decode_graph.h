// One decode step captured as a CUDA graph and replayed: the step's inputs are copied from
// pinned host memory at the start of the graph and the chosen tokens back at its end, so a step
// costs one graph launch and one synchronisation, however many kernels the model needs.
#pragma once

#include <cstdint>
#include <functional>

#include "braid/stream.h"

namespace braid::engine {

class DecodeGraph {
 public:
  // `kernels` enqueues the step's device work on the stream it is given; it reads its inputs
  // from device_inputs (`input_count` i32) and leaves the chosen tokens in device_tokens
  // (`token_count` i32).
  DecodeGraph(int input_count, int32_t* device_inputs, int token_count, int32_t* device_tokens,
              std::function<void(Stream)> kernels);
  ~DecodeGraph();
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;

  int32_t* inputs() { return host_inputs_; }  // fill before run()
  // Replays the graph (capturing it on the first call) and returns the chosen tokens (pinned
  // host memory, valid until the next run).
  const int32_t* run();
  int kernel_count() const { return kernel_count_; }

 private:
  void capture();

  int input_count_;
  int32_t* device_inputs_;
  int token_count_;
  int32_t* device_tokens_;
  std::function<void(Stream)> kernels_;
  int32_t* host_inputs_ = nullptr;  // pinned
  int32_t* host_tokens_ = nullptr;  // pinned
  void* stream_ = nullptr;          // cudaStream_t
  void* exec_ = nullptr;            // cudaGraphExec_t
  int kernel_count_ = 0;
};

}  // namespace braid::engine
