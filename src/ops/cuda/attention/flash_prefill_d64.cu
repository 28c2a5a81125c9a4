// The FlashAttention kernel for head_dim 64 (f16/bf16, contiguous or paged K/V).
#include "core/cuda_check.h"
#include "ops/cuda/attention/flash_prefill.cuh"
#include "ops/cuda/attention/flash_prefill.h"

namespace braid::cuda::flash {

namespace {

template <typename T, bool kPaged>
void launch_typed(const Params& p, int batch, int m_blocks, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<64>();
  // Past 48 KB of dynamic shared memory a kernel must opt in, once.
  static const bool opted_in = [] {
    BRAID_CUDA_CHECK(cudaFuncSetAttribute(flash_prefill_kernel<T, 64, kPaged>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>(p.q_heads), static_cast<unsigned>(batch),
                  static_cast<unsigned>(m_blocks));
  flash_prefill_kernel<T, 64, kPaged><<<grid, kThreads, kSmem, stream>>>(p);
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <>
void launch<64>(const Params& p, DType dtype, bool paged, int batch, int m_blocks,
                cudaStream_t stream) {
  if (dtype == DType::bf16) {
    if (paged) return launch_typed<__nv_bfloat16, true>(p, batch, m_blocks, stream);
    return launch_typed<__nv_bfloat16, false>(p, batch, m_blocks, stream);
  }
  if (paged) return launch_typed<__half, true>(p, batch, m_blocks, stream);
  launch_typed<__half, false>(p, batch, m_blocks, stream);
}

}  // namespace braid::cuda::flash
