// The FlashAttention kernel for head_dim 64 (f16/bf16, contiguous or paged K/V).
#include "ops/cuda/attention/flash_prefill_launch.cuh"

namespace braid::cuda::flash {

template <>
void launch<64>(const Params& p, DType dtype, bool paged, int64_t batch, int64_t max_q,
                cudaStream_t stream) {
  launch_any<64>(p, dtype, paged, batch, max_q, stream);
}

}  // namespace braid::cuda::flash
