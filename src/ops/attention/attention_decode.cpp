// attention_decode (one query per sequence over a paged KV cache) and the decode step's
// qk_norm_rope_kv_append_attention_decode: argument checks, the workspace bound, and dispatch.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/attention/decode_step_check.h"
#include "ops/attention/paged_kv_check.h"
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

}  // namespace

namespace detail {

Device check_attention_decode(const char* op, const Tensor& q, const PagedKV& kv,
                              float softmax_scale, const Tensor& out, const Tensor& lse,
                              const Tensor& workspace) {
  const int64_t batch = check_paged_kv_shapes(op, q, kv, /*one_query_per_sequence=*/true);
  const int64_t q_heads = q.shape[1], head_dim = q.shape[2];
  check::defined(op, "out", out);
  check::defined(op, "workspace", workspace);

  check_attention_outputs(op, q, out, lse);

  check::dtype_eq(op, "workspace", workspace, DType::f32);
  check::contiguous(op, "workspace", workspace);
  const int64_t capacity = kv.page_table.shape[1] * kv.k_pages.shape[1];
  const int64_t needed = attention_decode_workspace_floats(batch, q_heads, head_dim, capacity);
  if (workspace.numel() < needed)
    check::fail(ErrorKind::shape, op, "workspace",
                "at least " + std::to_string(needed) +
                    " elements (attention_decode_workspace_floats for a page-table capacity of " +
                    std::to_string(capacity) + " keys)",
                std::to_string(workspace.numel()) + " elements");

  if (!std::isfinite(softmax_scale))
    check::fail(ErrorKind::invalid_argument, op, "softmax_scale", "a finite value",
                std::to_string(softmax_scale));
  Device dev = check::same_device(op, {{"q", &q},
                                       {"kv.k_pages", &kv.k_pages},
                                       {"kv.v_pages", &kv.v_pages},
                                       {"kv.page_table", &kv.page_table},
                                       {"kv.kv_lens", &kv.kv_lens},
                                       {"out", &out},
                                       {"lse", &lse},
                                       {"workspace", &workspace}});
  // On CUDA the index values are trusted (see check_paged_kv_values).
  if (dev.is_cpu()) check_paged_kv_values(op, kv, std::vector<int64_t>(kv.page_table.shape[0], 1));
#if BRAID_WITH_CUDA
  if (!dev.is_cpu() && !cuda::attention_supports_head_dim(head_dim))
    check::fail(ErrorKind::unsupported, op, "q", "a head_dim of at most 256 on CUDA",
                "head_dim " + std::to_string(head_dim));
#endif
  return dev;
}

}  // namespace detail

int64_t attention_decode_workspace_floats(int64_t batch, int64_t q_heads, int64_t head_dim,
                                          int64_t max_kv_len) {
  const int64_t partials = batch * q_heads * max_splits(batch, max_kv_len) * (head_dim + 1);
  // The fallback (attention()'s kernel) keeps its cu_seqlens_q, batch + 1 ints, here.
  return std::max(partials, batch + 1);
}

void attention_decode(const Tensor& q, const PagedKV& kv, float softmax_scale, const Tensor& out,
                      const Tensor& lse, const Tensor& workspace, Stream stream) {
  const Device dev = detail::check_attention_decode(kOp, q, kv, softmax_scale, out, lse, workspace);
  const int64_t batch = q.shape[0];
  if (q.numel() == 0) return;
  if (dev.is_cpu()) {
    // The reference: attention() with one query per sequence.
    std::vector<int32_t> cu(static_cast<size_t>(batch + 1));
    for (int64_t b = 0; b <= batch; ++b) cu[static_cast<size_t>(b)] = static_cast<int32_t>(b);
    const Tensor cu_seqlens(cu.data(), DType::i32, Device::cpu(), {batch + 1});
    return cpu::attention(q, cu_seqlens, kv, /*causal=*/true, softmax_scale, out, lse);
  }
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  const int64_t capacity = kv.page_table.shape[1] * kv.k_pages.shape[1];
  const int splits =
      cuda::attention_decode_splits(q, kv, static_cast<int>(max_splits(batch, capacity)));
  cuda::attention_decode(q, kv, softmax_scale, out, lse, workspace, splits, stream);
#else
  (void)stream;
#endif
}

int64_t attention_decode_counters(int64_t batch, int64_t q_heads, int64_t kv_heads) {
  // One per (sequence, KV head, block of 16 query heads): the split kernel's unit.
  constexpr int64_t kHeadsPerBlock = 16;
  if (batch <= 0 || q_heads <= 0 || kv_heads <= 0) return 0;
  return batch * kv_heads * ((q_heads / kv_heads + kHeadsPerBlock - 1) / kHeadsPerBlock);
}

void qk_norm_rope_kv_append_attention_decode(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& q_norm, const Tensor& k_norm, float eps,
                                             const Tensor& positions, const RopeConfig& rope,
                                             const Tensor& slots, const PagedKV& kv,
                                             float softmax_scale, const Tensor& out,
                                             const Tensor& lse, const Tensor& workspace,
                                             const Tensor& counters, Stream stream) {
  constexpr const char* op = "qk_norm_rope_kv_append_attention_decode";
  const detail::QkRopeKvChecked rope_checked = detail::check_qk_norm_rope_kv_append(
      op, q, k, v, q_norm, k_norm, eps, positions, rope, slots, kv.k_pages, kv.v_pages);
  const Device dev = detail::check_attention_decode(op, q, kv, softmax_scale, out, lse, workspace);
  check::defined(op, "counters", counters);
  check::dtype_eq(op, "counters", counters, DType::i32);
  check::contiguous(op, "counters", counters);
  const int64_t batch = q.shape[0];
  const int64_t needed = attention_decode_counters(batch, q.shape[1], kv.k_pages.shape[2]);
  if (counters.numel() < needed)
    check::fail(ErrorKind::shape, op, "counters",
                "at least " + std::to_string(needed) + " elements (attention_decode_counters)",
                std::to_string(counters.numel()) + " elements");
  const Tensor none;
  check::same_device(op, {{"q", &q}, {"kv.k_pages", &kv.k_pages}, {"counters", &counters}});
  if (dev.is_cpu()) {
    // The new key goes where attention_decode will look for it.
    const int32_t* table = kv.page_table.ptr<int32_t>();
    const int64_t page_size = kv.k_pages.shape[1], max_pages = kv.page_table.shape[1];
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t key = kv.kv_lens.ptr<int32_t>()[b] - 1;
      const int64_t slot = int64_t{table[b * max_pages + key / page_size]} * page_size + key % page_size;
      if (slots.ptr<int32_t>()[b] != slot)
        check::fail(ErrorKind::invalid_argument, op, "slots",
                    "slots[" + std::to_string(b) + "] = " + std::to_string(slot) +
                        ", the page table's slot for key kv_lens[b] - 1",
                    std::to_string(slots.ptr<int32_t>()[b]));
    }
  }
  if (q.numel() == 0) return;
  const Tensor& qn = rope_checked.norm ? q_norm : none;
  const Tensor& kn = rope_checked.norm ? k_norm : none;
#if BRAID_WITH_CUDA
  if (!dev.is_cpu() && cuda::attention_decode_append_supported(q, kv)) {
    DeviceGuard guard(dev);
    const int64_t capacity = kv.page_table.shape[1] * kv.k_pages.shape[1];
    const int splits =
        cuda::attention_decode_splits(q, kv, static_cast<int>(max_splits(batch, capacity)));
    return cuda::attention_decode_append(q, k, v, qn, kn, eps, positions, rope_checked.table,
                                         slots, kv, softmax_scale, out, lse, workspace, counters,
                                         splits, stream);
  }
#endif
  // The two ops in sequence (checked again: cheap next to either).
  qk_norm_rope_kv_append(q, k, v, qn, kn, eps, positions, rope, slots, kv.k_pages, kv.v_pages,
                         stream);
  attention_decode(q, kv, softmax_scale, out, lse, workspace, stream);
}

}  // namespace braid::ops
