// Small helpers for CUDA graphs (CUDA builds only).
#pragma once

#include <cuda_runtime.h>

namespace braid::detail {

// Kernel nodes in a captured graph: the number of kernels one replay launches.
int count_kernel_nodes(cudaGraph_t graph);

}  // namespace braid::detail
