// Programmatic dependent launch (PDL, sm_90): a kernel launched with it may start while the
// kernel before it in the stream is still running, so that its launch, and whatever it can do
// without that kernel's results (load its first weights), overlaps the other's tail. A decode
// step is a chain of ~100-500 short kernels, each paying a launch and a first DRAM round trip
// (docs/perf/decode.md, version 4, for what this gained and where it lost).
//
// The contract every kernel launched as a programmatic dependent keeps:
//   - before pdl::wait() it touches no global memory but read-only weights (nothing an earlier
//     kernel of the stream writes, nothing it reads that this kernel writes);
//   - pdl::wait() returns once the kernel before it has completed and its writes are visible;
//     since that kernel itself waited for its own predecessor before completing, everything
//     earlier in the stream is complete too;
//   - pdl::launch_dependents() lets the next kernel's blocks be scheduled once every block of this
//     one has issued it (or exited). The small kernels issue it right after their wait; the GEMVs
//     after their weight stream (the next kernel's early loads would compete with it); the
//     attention split kernel and its combine before their wait, so that what follows is staged
//     with them; gemv_chain at the start of its last stage.
// Both instructions do nothing in a kernel launched the ordinary way, so the kernels stay correct
// under either launch. BRAID_PDL=0 in the environment launches everything the ordinary way (to
// measure one against the other in the same call).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda_check.h"

namespace braid::cuda {

#ifdef __CUDACC__
namespace pdl {

__device__ __forceinline__ void wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

__device__ __forceinline__ void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Both, in the order the contract asks for: what a kernel with nothing to do early starts with.
__device__ __forceinline__ void wait_then_release() {
  wait();
  launch_dependents();
}

}  // namespace pdl
#endif

// Whether kernels are launched as programmatic dependents (BRAID_PDL unset or not "0").
bool programmatic_launch_enabled();

// The GEMVs' choice (gemv.cu, gemv_fused.cu), which read their first group of weight loads
// before the wait: within ops::ConstantWeights only (else the kernel before may still be writing
// them), and only for a GEMV whose warps stream at most two such groups each, so that the early
// group is at least half of the work. Past that, overlapping a long weight stream with the kernel
// before it made the decode step slower (H200: Llama-3.1-8B 4.907 ms with its GEMVs launched the
// ordinary way, 5.004 ms with all of them programmatic; docs/perf/decode.md, version 4).
bool gemv_launch_programmatic(int groups);

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent of the kernel
// before it in the stream when `programmatic`. The kernel must keep the contract above.
template <typename... KernelArgs, typename... Args>
void launch_dependent_if(bool programmatic, void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                         size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = programmatic ? 1 : 0;
  BRAID_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<KernelArgs>(args)...));
}

// The same, programmatic unless BRAID_PDL=0.
template <typename... KernelArgs, typename... Args>
void launch_programmatic(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, Args&&... args) {
  launch_dependent_if(programmatic_launch_enabled(), kernel, grid, block, smem, stream,
                      std::forward<Args>(args)...);
}

}  // namespace braid::cuda
