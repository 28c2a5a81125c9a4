// attention over a paged KV cache: argument checks and dispatch.
#include <cmath>
#include <string>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

constexpr const char* kOp = "attention";

void dense_last_dim(const char* arg, const Tensor& t) {
  if (t.strides[t.ndim - 1] != 1 && t.shape[t.ndim - 1] > 1)
    check::fail(ErrorKind::shape, kOp, arg, "a dense last dimension (stride 1)",
                "stride " + std::to_string(t.strides[t.ndim - 1]));
}

void check_shapes(const Tensor& q, const Tensor& cu_seqlens_q, const PagedKV& kv,
                  float softmax_scale, const Tensor& out, const Tensor& lse) {
  check::defined(kOp, "q", q);
  check::defined(kOp, "cu_seqlens_q", cu_seqlens_q);
  check::defined(kOp, "kv.k_pages", kv.k_pages);
  check::defined(kOp, "kv.v_pages", kv.v_pages);
  check::defined(kOp, "kv.page_table", kv.page_table);
  check::defined(kOp, "kv.kv_lens", kv.kv_lens);
  check::defined(kOp, "out", out);

  check::dtype_in(kOp, "q", q, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(kOp, "q", q, 3);
  dense_last_dim("q", q);
  const int64_t total_q = q.shape[0], q_heads = q.shape[1], head_dim = q.shape[2];

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
  check::contiguous(kOp, "kv.page_table", kv.page_table);
  const int64_t batch = kv.page_table.shape[0];
  check::dtype_eq(kOp, "kv.kv_lens", kv.kv_lens, DType::i32);
  check::shape_eq(kOp, "kv.kv_lens", kv.kv_lens, {batch});
  check::contiguous(kOp, "kv.kv_lens", kv.kv_lens);
  check::dtype_eq(kOp, "cu_seqlens_q", cu_seqlens_q, DType::i32);
  check::shape_eq(kOp, "cu_seqlens_q", cu_seqlens_q, {batch + 1});
  check::contiguous(kOp, "cu_seqlens_q", cu_seqlens_q);

  check::dtype_eq(kOp, "out", out, q.dtype);
  check::same_shape(kOp, "out", out, q);
  dense_last_dim("out", out);
  if (lse.data != nullptr || lse.ndim != 0) {  // optional
    check::defined(kOp, "lse", lse);
    check::dtype_eq(kOp, "lse", lse, DType::f32);
    check::shape_eq(kOp, "lse", lse, {total_q, q_heads});
    check::contiguous(kOp, "lse", lse);
  }
  if (!std::isfinite(softmax_scale))
    check::fail(ErrorKind::invalid_argument, kOp, "softmax_scale", "a finite value",
                std::to_string(softmax_scale));
}

// The CPU can afford to look at the index tensors; a CUDA kernel could not without a host
// synchronisation, so there they are the caller's promise.
void check_values(const Tensor& q, const Tensor& cu_seqlens_q, const PagedKV& kv) {
  const int64_t batch = kv.page_table.shape[0], max_pages = kv.page_table.shape[1];
  const int64_t num_pages = kv.k_pages.shape[0], page_size = kv.k_pages.shape[1];
  const int32_t* cu = cu_seqlens_q.ptr<int32_t>();
  const int32_t* kv_lens = kv.kv_lens.ptr<int32_t>();
  const int32_t* table = kv.page_table.ptr<int32_t>();
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

  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q_len = cu[b + 1] - cu[b], kv_len = kv_lens[b];
    const int64_t capacity = max_pages * page_size;
    if (kv_len < q_len || kv_len > capacity)
      check::fail(ErrorKind::invalid_argument, kOp, "kv.kv_lens",
                  at("kv_lens", b) + " between its query count " + std::to_string(q_len) +
                      " and the page table's capacity " + std::to_string(capacity),
                  std::to_string(kv_len));
    // Only the pages that hold the sequence's tokens are read; entries past them may be padding.
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
  cuda::attention(q, cu_seqlens_q, kv, causal, softmax_scale, out, lse, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
