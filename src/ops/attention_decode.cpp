// attention_decode (one query per sequence over a paged KV cache): argument checks, the
// workspace bound, and dispatch.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/paged_kv_check.h"
#include "ops/cpu/cpu_ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

constexpr const char* kOp = "attention_decode";

// The workspace holds, per (sequence, query head, split), the split's normalised output
// (head_dim floats) and its log-sum-exp (one float). The split count is bounded so that it
// stays small when the batch alone fills the GPU: a split holds at least kMinSplitKeys keys, and
// splits * batch stays under kMaxSplitBlocks (beyond that the grid has many waves without them).
constexpr int64_t kMinSplitKeys = 64;
constexpr int64_t kMaxSplitBlocks = 1024;

int64_t max_splits(int64_t batch, int64_t max_kv_len) {
  const int64_t by_len = (std::max<int64_t>(max_kv_len, 1) + kMinSplitKeys - 1) / kMinSplitKeys;
  const int64_t by_batch = (kMaxSplitBlocks + std::max<int64_t>(batch, 1) - 1) / std::max<int64_t>(batch, 1);
  return std::max<int64_t>(1, std::min(by_len, by_batch));
}

void check_shapes(const Tensor& q, const PagedKV& kv, float softmax_scale, const Tensor& out,
                  const Tensor& lse, const Tensor& workspace) {
  const int64_t batch = detail::check_paged_kv_shapes(kOp, q, kv, /*one_query_per_sequence=*/true);
  const int64_t q_heads = q.shape[1], head_dim = q.shape[2];
  check::defined(kOp, "out", out);
  check::defined(kOp, "workspace", workspace);

  detail::check_attention_outputs(kOp, q, out, lse);

  check::dtype_eq(kOp, "workspace", workspace, DType::f32);
  check::contiguous(kOp, "workspace", workspace);
  const int64_t capacity = kv.page_table.shape[1] * kv.k_pages.shape[1];
  const int64_t needed = attention_decode_workspace_floats(batch, q_heads, head_dim, capacity);
  if (workspace.numel() < needed)
    check::fail(ErrorKind::shape, kOp, "workspace",
                "at least " + std::to_string(needed) +
                    " elements (attention_decode_workspace_floats for a page-table capacity of " +
                    std::to_string(capacity) + " keys)",
                std::to_string(workspace.numel()) + " elements");

  if (!std::isfinite(softmax_scale))
    check::fail(ErrorKind::invalid_argument, kOp, "softmax_scale", "a finite value",
                std::to_string(softmax_scale));
}

}  // namespace

int64_t attention_decode_workspace_floats(int64_t batch, int64_t q_heads, int64_t head_dim,
                                          int64_t max_kv_len) {
  const int64_t partials = batch * q_heads * max_splits(batch, max_kv_len) * (head_dim + 1);
  // The fallback (attention()'s kernel) keeps its cu_seqlens_q, batch + 1 ints, here.
  return std::max(partials, batch + 1);
}

void attention_decode(const Tensor& q, const PagedKV& kv, float softmax_scale, const Tensor& out,
                      const Tensor& lse, const Tensor& workspace, Stream stream) {
  check_shapes(q, kv, softmax_scale, out, lse, workspace);
  Device dev = check::same_device(kOp, {{"q", &q},
                                        {"kv.k_pages", &kv.k_pages},
                                        {"kv.v_pages", &kv.v_pages},
                                        {"kv.page_table", &kv.page_table},
                                        {"kv.kv_lens", &kv.kv_lens},
                                        {"out", &out},
                                        {"lse", &lse},
                                        {"workspace", &workspace}});
  const int64_t batch = q.shape[0];
  if (dev.is_cpu()) {
    detail::check_paged_kv_values(kOp, kv, std::vector<int64_t>(kv.page_table.shape[0], 1));
    if (q.numel() == 0) return;
    // The reference: attention() with one query per sequence.
    std::vector<int32_t> cu(static_cast<size_t>(batch + 1));
    for (int64_t b = 0; b <= batch; ++b) cu[static_cast<size_t>(b)] = static_cast<int32_t>(b);
    const Tensor cu_seqlens(cu.data(), DType::i32, Device::cpu(), {batch + 1});
    return cpu::attention(q, cu_seqlens, kv, /*causal=*/true, softmax_scale, out, lse);
  }
#if BRAID_WITH_CUDA
  // On CUDA the index values are trusted (see check_values).
  if (!cuda::attention_supports_head_dim(q.shape[2]))
    check::fail(ErrorKind::unsupported, kOp, "q", "a head_dim of at most 256 on CUDA",
                "head_dim " + std::to_string(q.shape[2]));
  if (q.numel() == 0) return;
  DeviceGuard guard(dev);
  const int64_t capacity = kv.page_table.shape[1] * kv.k_pages.shape[1];
  const int splits =
      cuda::attention_decode_splits(q, kv, static_cast<int>(max_splits(batch, capacity)));
  cuda::attention_decode(q, kv, softmax_scale, out, lse, workspace, splits, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
