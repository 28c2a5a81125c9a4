// kv_append: one block per token copies its K and V heads into the token's slot.
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

struct AppendArgs {
  const char* k;
  const char* v;
  const int32_t* slots;
  char* k_pages;
  char* v_pages;
  int64_t k_token_stride, k_head_stride, v_token_stride, v_head_stride;  // bytes
  int heads;
  int row_bytes;  // head_dim * element size
};

// Copies in units of U (16 bytes when every address allows it, else the element size).
template <typename U>
__global__ void kv_append_kernel(AppendArgs a) {
  pdl::wait_then_release();
  const int64_t token = blockIdx.x;
  const int64_t slot = a.slots[token];
  const int units_per_row = a.row_bytes / static_cast<int>(sizeof(U));
  const int total = a.heads * units_per_row;
  const int64_t slot_bytes = static_cast<int64_t>(a.heads) * a.row_bytes;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int h = i / units_per_row, u = i % units_per_row;
    const int64_t dst = slot * slot_bytes + static_cast<int64_t>(h) * a.row_bytes + u * sizeof(U);
    *reinterpret_cast<U*>(a.k_pages + dst) = *reinterpret_cast<const U*>(
        a.k + token * a.k_token_stride + h * a.k_head_stride + u * sizeof(U));
    if (a.v != nullptr)  // null: keys only (an MLA latent cache)
      *reinterpret_cast<U*>(a.v_pages + dst) = *reinterpret_cast<const U*>(
          a.v + token * a.v_token_stride + h * a.v_head_stride + u * sizeof(U));
  }
}

}  // namespace

void kv_append(const Tensor& k, const Tensor& v, const Tensor& slots, const Tensor& k_pages,
               const Tensor& v_pages, Stream stream) {
  const int64_t elem = static_cast<int64_t>(dtype_size(k.dtype));
  AppendArgs a{static_cast<const char*>(k.data), static_cast<const char*>(v.data),
               slots.ptr<const int32_t>(), static_cast<char*>(k_pages.data),
               static_cast<char*>(v_pages.data), k.stride(0) * elem, k.stride(1) * elem,
               v.data ? v.stride(0) * elem : 0, v.data ? v.stride(1) * elem : 0, static_cast<int>(k.size(1)),
               static_cast<int>(k.size(2) * elem)};
  const bool vec = a.row_bytes % 16 == 0 && aligned16(a.k) && aligned16(a.v) &&
                   aligned16(a.k_pages) && aligned16(a.v_pages) && a.k_token_stride % 16 == 0 &&
                   a.k_head_stride % 16 == 0 && a.v_token_stride % 16 == 0 &&
                   a.v_head_stride % 16 == 0;
  auto s = static_cast<cudaStream_t>(stream.handle);
  const unsigned blocks = static_cast<unsigned>(k.size(0));
  if (vec) {
    launch_programmatic(kv_append_kernel<int4>, blocks, 128, 0, s, a);
  } else if (elem == 4) {
    launch_programmatic(kv_append_kernel<int32_t>, blocks, 128, 0, s, a);
  } else {
    launch_programmatic(kv_append_kernel<int16_t>, blocks, 128, 0, s, a);
  }
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
