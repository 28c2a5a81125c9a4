// attention_prefill (K/V in contiguous tensors): argument checks and dispatch. The CPU reference
// is attention()'s, over a page table of one-token pages that name the rows of k and v.
#include <cmath>
#include <string>
#include <vector>

#include "braid/buffer.h"
#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/attention/paged_kv_check.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

constexpr const char* kOp = "attention_prefill";

void check_kv(const char* arg, const Tensor& t, const Tensor& q) {
  check::defined(kOp, arg, t);
  check::dtype_eq(kOp, arg, t, q.dtype);
  check::ndim_eq(kOp, arg, t, 3);
  check::dense_last_dim(kOp, arg, t);
  check::dim_eq(kOp, arg, t, 2, q.shape[2], "head_dim, as in q");
  const int64_t kv_heads = t.shape[1];
  if (kv_heads == 0 || q.shape[1] % kv_heads != 0)
    check::fail(ErrorKind::shape, kOp, arg,
                "a kv_heads (dimension 1) that divides q's " + std::to_string(q.shape[1]) + " heads",
                shape_string(t));
  if (t.strides[1] != t.shape[2])
    check::fail(ErrorKind::shape, kOp, arg, "heads packed (stride of dimension 1 = head_dim)",
                "stride " + std::to_string(t.strides[1]));
}

void check_offsets(const char* arg, const Tensor& cu, int64_t batch_plus_one) {
  check::defined(kOp, arg, cu);
  check::dtype_eq(kOp, arg, cu, DType::i32);
  check::ndim_eq(kOp, arg, cu, 1);
  if (batch_plus_one >= 0) check::shape_eq(kOp, arg, cu, {batch_plus_one});
  if (cu.shape[0] < 1) check::fail(ErrorKind::shape, kOp, arg, "[batch + 1] offsets", shape_string(cu));
  check::contiguous(kOp, arg, cu);
}

// CPU only: offsets start at 0, never decrease and end at the tensor's rows; every q_len is at
// most max_seqlen_q and, with causal masking, at most its kv_len.
void check_values(const Tensor& q, const Tensor& k, const Tensor& cu_q, const Tensor& cu_kv,
                  int max_seqlen_q, bool causal) {
  const int64_t batch = cu_q.shape[0] - 1;
  auto offsets = [&](const char* arg, const Tensor& cu, int64_t rows) {
    const int32_t* c = cu.ptr<int32_t>();
    if (c[0] != 0)
      check::fail(ErrorKind::invalid_argument, kOp, arg, "a first offset of 0", std::to_string(c[0]));
    for (int64_t b = 0; b < batch; ++b)
      if (c[b + 1] < c[b])
        check::fail(ErrorKind::invalid_argument, kOp, arg, "non-decreasing offsets",
                    "offset " + std::to_string(b + 1) + " = " + std::to_string(c[b + 1]) + " < " +
                        std::to_string(c[b]));
    if (c[batch] != rows)
      check::fail(ErrorKind::invalid_argument, kOp, arg,
                  "a last offset equal to the " + std::to_string(rows) + " rows",
                  std::to_string(c[batch]));
  };
  offsets("cu_seqlens_q", cu_q, q.shape[0]);
  offsets("cu_seqlens_kv", cu_kv, k.shape[0]);
  const int32_t* cq = cu_q.ptr<int32_t>();
  const int32_t* ck = cu_kv.ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q_len = cq[b + 1] - cq[b], kv_len = ck[b + 1] - ck[b];
    if (q_len > max_seqlen_q)
      check::fail(ErrorKind::invalid_argument, kOp, "max_seqlen_q",
                  ">= every q_len (sequence " + std::to_string(b) + " has " + std::to_string(q_len) + ")",
                  std::to_string(max_seqlen_q));
    if (causal && kv_len < q_len)
      check::fail(ErrorKind::invalid_argument, kOp, "cu_seqlens_kv",
                  "kv_len >= q_len for causal attention (sequence " + std::to_string(b) + " has " +
                      std::to_string(q_len) + " queries)",
                  "kv_len " + std::to_string(kv_len));
  }
}

// The reference: k and v copied dense into one-token pages, page b's table row listing its rows.
void reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_q,
               const Tensor& cu_kv, bool causal, float scale, const Tensor& out, const Tensor& lse) {
  const int64_t batch = cu_q.shape[0] - 1, rows = k.shape[0];
  const int32_t* ck = cu_kv.ptr<int32_t>();
  int64_t max_kv = 1;
  for (int64_t b = 0; b < batch; ++b) max_kv = std::max<int64_t>(max_kv, ck[b + 1] - ck[b]);
  OwnedTensor k_pages(k.dtype, {rows, 1, k.shape[1], k.shape[2]}, Device::cpu());
  OwnedTensor v_pages(v.dtype, {rows, 1, v.shape[1], v.shape[2]}, Device::cpu());
  const int64_t row_elems = k.shape[1] * k.shape[2];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < row_elems; ++e) {
      store_from_float(k_pages.data(), k.dtype, r * row_elems + e,
                       load_as_float(k.data, k.dtype, r * k.strides[0] + e));
      store_from_float(v_pages.data(), v.dtype, r * row_elems + e,
                       load_as_float(v.data, v.dtype, r * v.strides[0] + e));
    }
  OwnedTensor table(DType::i32, {batch, max_kv}, Device::cpu());
  OwnedTensor kv_lens(DType::i32, {batch}, Device::cpu());
  for (int64_t b = 0; b < batch; ++b) {
    kv_lens.view().ptr<int32_t>()[b] = ck[b + 1] - ck[b];
    for (int64_t j = 0; j < max_kv; ++j)
      table.view().ptr<int32_t>()[b * max_kv + j] = j < ck[b + 1] - ck[b] ? ck[b] + static_cast<int32_t>(j) : 0;
  }
  cpu::attention(q, cu_q, PagedKV{k_pages.view(), v_pages.view(), table.view(), kv_lens.view()},
                 causal, scale, out, lse);
}

}  // namespace

void attention_prefill(const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_kv, int max_seqlen_q,
                       bool causal, float softmax_scale, const Tensor& out, const Tensor& lse,
                       Stream stream) {
  check::defined(kOp, "q", q);
  check::dtype_in(kOp, "q", q, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(kOp, "q", q, 3);
  check::dense_last_dim(kOp, "q", q);
  if (q.strides[1] != q.shape[2])
    check::fail(ErrorKind::shape, kOp, "q", "heads packed (stride of dimension 1 = head_dim)",
                "stride " + std::to_string(q.strides[1]));
  check_kv("k", k, q);
  check_kv("v", v, q);
  check::same_shape(kOp, "v", v, k);
  check_offsets("cu_seqlens_q", cu_seqlens_q, -1);
  check_offsets("cu_seqlens_kv", cu_seqlens_kv, cu_seqlens_q.shape[0]);
  detail::check_attention_outputs(kOp, q, out, lse);
  if (out.strides[1] != out.shape[2])
    check::fail(ErrorKind::shape, kOp, "out", "heads packed (stride of dimension 1 = head_dim)",
                "stride " + std::to_string(out.strides[1]));
  if (!std::isfinite(softmax_scale))
    check::fail(ErrorKind::invalid_argument, kOp, "softmax_scale", "a finite value",
                std::to_string(softmax_scale));
  if (max_seqlen_q < 0)
    check::fail(ErrorKind::invalid_argument, kOp, "max_seqlen_q", ">= 0", std::to_string(max_seqlen_q));
  Device dev = check::same_device(kOp, {{"q", &q}, {"k", &k}, {"v", &v},
                                        {"cu_seqlens_q", &cu_seqlens_q},
                                        {"cu_seqlens_kv", &cu_seqlens_kv}, {"out", &out},
                                        {"lse", &lse}});
  if (dev.is_cpu()) {
    check_values(q, k, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, causal);
    if (q.numel() == 0) return;
    return reference(q, k, v, cu_seqlens_q, cu_seqlens_kv, causal, softmax_scale, out, lse);
  }
#if BRAID_WITH_CUDA
  if (q.dtype == DType::f32)
    check::fail(ErrorKind::dtype, kOp, "q", "dtype f16 or bf16 on CUDA (f32 is CPU-only)", describe(q));
  if (q.shape[2] != 64 && q.shape[2] != 128)
    check::fail(ErrorKind::unsupported, kOp, "q", "a head_dim of 64 or 128 on CUDA",
                "head_dim " + std::to_string(q.shape[2]));
  if (q.numel() == 0 || max_seqlen_q == 0) return;
  DeviceGuard guard(dev);
  cuda::attention_prefill(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, causal,
                          softmax_scale, out, lse, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
