#include "core/cuda_graph.h"

#include <vector>

#include "core/cuda_check.h"

namespace braid::detail {

int count_kernel_nodes(cudaGraph_t graph) {
  size_t nodes = 0;
  BRAID_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  std::vector<cudaGraphNode_t> list(nodes);
  BRAID_CUDA_CHECK(cudaGraphGetNodes(graph, list.data(), &nodes));
  int kernels = 0;
  for (cudaGraphNode_t n : list) {
    cudaGraphNodeType type;
    BRAID_CUDA_CHECK(cudaGraphNodeGetType(n, &type));
    kernels += type == cudaGraphNodeTypeKernel;
  }
  return kernels;
}

}  // namespace braid::detail
