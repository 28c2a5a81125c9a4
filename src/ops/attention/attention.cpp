// attention over a paged KV cache: argument checks and dispatch.
#include <cmath>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/attention/paged_kv_check.h"
#include "ops/cpu/cpu_ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

constexpr const char* kOp = "attention";

void check_shapes(const Tensor& q, const Tensor& cu_seqlens_q, const PagedKV& kv,
                  float softmax_scale, const Tensor& out, const Tensor& lse) {
  const int64_t batch = detail::check_paged_kv_shapes(kOp, q, kv);
  check::defined(kOp, "cu_seqlens_q", cu_seqlens_q);
  check::defined(kOp, "out", out);
  check::dtype_eq(kOp, "cu_seqlens_q", cu_seqlens_q, DType::i32);
  check::shape_eq(kOp, "cu_seqlens_q", cu_seqlens_q, {batch + 1});
  check::contiguous(kOp, "cu_seqlens_q", cu_seqlens_q);
  detail::check_attention_outputs(kOp, q, out, lse);
  if (!std::isfinite(softmax_scale))
    check::fail(ErrorKind::invalid_argument, kOp, "softmax_scale", "a finite value",
                std::to_string(softmax_scale));
}

// The CPU can afford to look at the index tensors; a CUDA kernel could not without a host
// synchronisation, so there they are the caller's promise.
void check_values(const Tensor& q, const Tensor& cu_seqlens_q, const PagedKV& kv) {
  const int64_t batch = kv.page_table.shape[0];
  const int32_t* cu = cu_seqlens_q.ptr<int32_t>();
  auto at = [](const char* name, int64_t i) { return std::string(name) + "[" + std::to_string(i) + "]"; };

  if (cu[0] != 0)
    check::fail(ErrorKind::invalid_argument, kOp, "cu_seqlens_q", "cu_seqlens_q[0] = 0",
                std::to_string(cu[0]));
  for (int64_t b = 0; b < batch; ++b)
    if (cu[b + 1] < cu[b])
      check::fail(ErrorKind::invalid_argument, kOp, "cu_seqlens_q", "non-decreasing offsets",
                  at("cu_seqlens_q", b + 1) + " = " + std::to_string(cu[b + 1]) + " < " +
                      at("cu_seqlens_q", b) + " = " + std::to_string(cu[b]));
  if (cu[batch] != q.shape[0])
    check::fail(ErrorKind::invalid_argument, kOp, "cu_seqlens_q",
                "a last offset equal to q's " + std::to_string(q.shape[0]) + " tokens",
                at("cu_seqlens_q", batch) + " = " + std::to_string(cu[batch]));

  std::vector<int64_t> q_lens(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) q_lens[b] = cu[b + 1] - cu[b];
  detail::check_paged_kv_values(kOp, kv, q_lens);
}

}  // namespace

void attention(const Tensor& q, const Tensor& cu_seqlens_q, const PagedKV& kv, bool causal,
               float softmax_scale, const Tensor& out, const Tensor& lse, Stream stream) {
  check_shapes(q, cu_seqlens_q, kv, softmax_scale, out, lse);
  Device dev = check::same_device(kOp, {{"q", &q},
                                        {"cu_seqlens_q", &cu_seqlens_q},
                                        {"kv.k_pages", &kv.k_pages},
                                        {"kv.v_pages", &kv.v_pages},
                                        {"kv.page_table", &kv.page_table},
                                        {"kv.kv_lens", &kv.kv_lens},
                                        {"out", &out},
                                        {"lse", &lse}});
  if (dev.is_cpu()) {
    check_values(q, cu_seqlens_q, kv);
    if (q.numel() == 0) return;
    return cpu::attention(q, cu_seqlens_q, kv, causal, softmax_scale, out, lse);
  }
#if BRAID_WITH_CUDA
  // On CUDA the index values are trusted (see check_values).
  if (!cuda::attention_supports_head_dim(q.shape[2]))
    check::fail(ErrorKind::unsupported, kOp, "q", "a head_dim of at most 256 on CUDA",
                "head_dim " + std::to_string(q.shape[2]));
  if (q.numel() == 0) return;
  DeviceGuard guard(dev);
  if (cuda::attention_flash_paged(q, cu_seqlens_q, kv, causal, softmax_scale, out, lse, stream))
    return;
  cuda::attention(q, cu_seqlens_q, kv, causal, softmax_scale, out, lse, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
