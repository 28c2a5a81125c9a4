// attention_decode (one query per sequence over a paged KV cache): argument checks, the
// workspace bound, and dispatch.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
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

void dense_last_dim(const char* arg, const Tensor& t) {
  if (t.strides[t.ndim - 1] != 1 && t.shape[t.ndim - 1] > 1)
    check::fail(ErrorKind::shape, kOp, arg, "a dense last dimension (stride 1)",
                "stride " + std::to_string(t.strides[t.ndim - 1]));
}

void check_shapes(const Tensor& q, const PagedKV& kv, float softmax_scale, const Tensor& out,
                  const Tensor& lse, const Tensor& workspace) {
  check::defined(kOp, "q", q);
  check::defined(kOp, "kv.k_pages", kv.k_pages);
  check::defined(kOp, "kv.v_pages", kv.v_pages);
  check::defined(kOp, "kv.page_table", kv.page_table);
  check::defined(kOp, "kv.kv_lens", kv.kv_lens);
  check::defined(kOp, "out", out);
  check::defined(kOp, "workspace", workspace);

  check::dtype_in(kOp, "q", q, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(kOp, "q", q, 3);
  dense_last_dim("q", q);
  const int64_t batch = q.shape[0], q_heads = q.shape[1], head_dim = q.shape[2];

  check::dtype_eq(kOp, "kv.k_pages", kv.k_pages, q.dtype);
  check::ndim_eq(kOp, "kv.k_pages", kv.k_pages, 4);
  check::dim_eq(kOp, "kv.k_pages", kv.k_pages, 3, head_dim, "head_dim, as in q");
  check::contiguous(kOp, "kv.k_pages", kv.k_pages);
  if (kv.k_pages.shape[1] == 0)
    check::fail(ErrorKind::shape, kOp, "kv.k_pages", "a page_size (dimension 1) > 0",
                shape_string(kv.k_pages));
  const int64_t kv_heads = kv.k_pages.shape[2];
  if (kv_heads == 0 || q_heads % kv_heads != 0)
    check::fail(ErrorKind::shape, kOp, "kv.k_pages",
                "a kv_heads (dimension 2) that divides q's " + std::to_string(q_heads) + " heads",
                shape_string(kv.k_pages));
  check::dtype_eq(kOp, "kv.v_pages", kv.v_pages, q.dtype);
  check::same_shape(kOp, "kv.v_pages", kv.v_pages, kv.k_pages);
  check::contiguous(kOp, "kv.v_pages", kv.v_pages);

  check::dtype_eq(kOp, "kv.page_table", kv.page_table, DType::i32);
  check::ndim_eq(kOp, "kv.page_table", kv.page_table, 2);
  check::dim_eq(kOp, "kv.page_table", kv.page_table, 0, batch, "batch, as q's dimension 0");
  check::contiguous(kOp, "kv.page_table", kv.page_table);
  check::dtype_eq(kOp, "kv.kv_lens", kv.kv_lens, DType::i32);
  check::shape_eq(kOp, "kv.kv_lens", kv.kv_lens, {batch});
  check::contiguous(kOp, "kv.kv_lens", kv.kv_lens);

  check::dtype_eq(kOp, "out", out, q.dtype);
  check::same_shape(kOp, "out", out, q);
  dense_last_dim("out", out);
  if (lse.data != nullptr || lse.ndim != 0) {  // optional
    check::defined(kOp, "lse", lse);
    check::dtype_eq(kOp, "lse", lse, DType::f32);
    check::shape_eq(kOp, "lse", lse, {batch, q_heads});
    check::contiguous(kOp, "lse", lse);
  }

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

// The CPU can afford to look at the index tensors; a CUDA kernel could not without a host
// synchronisation, so there they are the caller's promise.
void check_values(const PagedKV& kv) {
  const int64_t batch = kv.page_table.shape[0], max_pages = kv.page_table.shape[1];
  const int64_t num_pages = kv.k_pages.shape[0], page_size = kv.k_pages.shape[1];
  const int32_t* kv_lens = kv.kv_lens.ptr<int32_t>();
  const int32_t* table = kv.page_table.ptr<int32_t>();
  const int64_t capacity = max_pages * page_size;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t kv_len = kv_lens[b];
    if (kv_len < 1 || kv_len > capacity)
      check::fail(ErrorKind::invalid_argument, kOp, "kv.kv_lens",
                  "kv_lens[" + std::to_string(b) + "] between 1 and the page table's capacity " +
                      std::to_string(capacity),
                  std::to_string(kv_len));
    const int64_t used = (kv_len + page_size - 1) / page_size;
    for (int64_t p = 0; p < used; ++p) {
      const int32_t page = table[b * max_pages + p];
      if (page < 0 || page >= num_pages)
        check::fail(ErrorKind::invalid_argument, kOp, "kv.page_table",
                    "page ids in [0, " + std::to_string(num_pages) + ")",
                    "page_table[" + std::to_string(b) + ", " + std::to_string(p) +
                        "] = " + std::to_string(page));
    }
  }
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
    check_values(kv);
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
