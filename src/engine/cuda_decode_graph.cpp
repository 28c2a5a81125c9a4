#include <cuda_runtime.h>

#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_graph.h"
#include "engine/decode_graph.h"

namespace braid::engine {

DecodeGraph::DecodeGraph(int input_count, int32_t* device_inputs, int token_count,
                         int32_t* device_tokens, std::function<void(Stream)> kernels)
    : input_count_(input_count),
      device_inputs_(device_inputs),
      token_count_(token_count),
      device_tokens_(device_tokens),
      kernels_(std::move(kernels)) {
  BRAID_CUDA_CHECK(cudaHostAlloc(&host_inputs_, sizeof(int32_t) * input_count, cudaHostAllocDefault));
  BRAID_CUDA_CHECK(cudaHostAlloc(&host_tokens_, sizeof(int32_t) * token_count, cudaHostAllocDefault));
  cudaStream_t s;
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}

DecodeGraph::~DecodeGraph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  cudaFreeHost(host_inputs_);
  cudaFreeHost(host_tokens_);
}

void DecodeGraph::capture() {
  auto s = static_cast<cudaStream_t>(stream_);
  cudaGraph_t graph = nullptr;
  BRAID_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    BRAID_CUDA_CHECK(cudaMemcpyAsync(device_inputs_, host_inputs_, sizeof(int32_t) * input_count_,
                                     cudaMemcpyHostToDevice, s));
    kernels_(Stream{s});
    BRAID_CUDA_CHECK(cudaMemcpyAsync(host_tokens_, device_tokens_, sizeof(int32_t) * token_count_,
                                     cudaMemcpyDeviceToHost, s));
  } catch (...) {
    cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  BRAID_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  kernel_count_ = detail::count_kernel_nodes(graph);
  cudaGraphExec_t exec;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  BRAID_CUDA_CHECK(err);
  exec_ = exec;
}

const int32_t* DecodeGraph::run() {
  if (!exec_) capture();
  auto s = static_cast<cudaStream_t>(stream_);
  BRAID_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), s));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(s));
  return host_tokens_;
}

}  // namespace braid::engine
