// Which attention calls take the tensor-core FlashAttention kernel, and its parameters:
// attention_prefill (contiguous K/V) always does (its op refuses what the kernel cannot run);
// attention() over a paged cache does for f16/bf16 with head_dim 64 or 128 and 16-byte aligned
// rows, and otherwise keeps its simple exact kernel (attention_paged.cu).
#include <string>
#include <utility>

#include "ops/check.h"
#include "ops/cuda/attention/flash_prefill.h"
#include "ops/cuda/cuda_ops.h"

namespace braid::cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;

// 16-byte aligned base and row stride: the kernel moves rows in 16-byte chunks.
bool rows_aligned(const Tensor& t) {
  const int64_t row_bytes = t.strides[0] * static_cast<int64_t>(dtype_size(t.dtype));
  return (reinterpret_cast<uintptr_t>(t.data) & 15u) == 0 && row_bytes % 16 == 0;
}

bool flash_shape(const Tensor& q, const Tensor& out) {
  const int64_t d = q.shape[2];
  return (q.dtype == DType::f16 || q.dtype == DType::bf16) && (d == 64 || d == 128) &&
         rows_aligned(q) && rows_aligned(out);
}

flash::Params common_params(const Tensor& q, const Tensor& out, const Tensor& lse,
                            float softmax_scale, bool causal) {
  flash::Params p{};
  p.q = q.data;
  p.out = out.data;
  p.lse = lse.ndim != 0 ? lse.ptr<float>() : nullptr;
  p.q_row_stride = q.strides[0];
  p.o_row_stride = out.strides[0];
  p.q_heads = static_cast<int>(q.shape[1]);
  p.scale_log2 = softmax_scale * kLog2e;
  p.causal = causal;
  return p;
}

void launch(const flash::Params& p, DType dtype, int64_t head_dim, bool paged, int64_t batch,
            int64_t max_q, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (head_dim == 64)
    flash::launch<64>(p, dtype, paged, batch, max_q, s);
  else
    flash::launch<128>(p, dtype, paged, batch, max_q, s);
}

}  // namespace

void attention_prefill(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                       const Tensor& cu_seqlens_kv, int max_seqlen_q, bool causal,
                       float softmax_scale, const Tensor& out, const Tensor& lse, Stream stream) {
  const char* op = "attention_prefill";
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"v", &v},
                                {"out", &out}})
    if (!rows_aligned(*t))
      check::fail(ErrorKind::unsupported, op, name,
                  "16-byte aligned data and row stride on CUDA (rows move in 16-byte chunks)",
                  describe(*t));
  if (!(softmax_scale > 0.0f))
    check::fail(ErrorKind::unsupported, op, "softmax_scale", "a softmax_scale > 0 on CUDA",
                std::to_string(softmax_scale));
  flash::Params p = common_params(q, out, lse, softmax_scale, causal);
  p.k = k.data;
  p.v = v.data;
  p.k_row_stride = k.strides[0];
  p.v_row_stride = v.strides[0];
  p.cu_seqlens_q = cu_seqlens_q.ptr<int32_t>();
  p.cu_seqlens_kv = cu_seqlens_kv.ptr<int32_t>();
  p.kv_heads = static_cast<int>(k.shape[1]);
  p.q_rows = q.shape[0];
  p.kv_rows = k.shape[0];
  launch(p, q.dtype, q.shape[2], /*paged=*/false, cu_seqlens_q.shape[0] - 1, max_seqlen_q, stream);
}

bool attention_flash_paged(const Tensor& q, const Tensor& cu_seqlens_q, const ops::PagedKV& kv,
                           bool causal, float softmax_scale, const Tensor& out, const Tensor& lse,
                           Stream stream) {
  // k/v pages are contiguous rows of whole heads; the kernel's softmax assumes a positive scale.
  if (!flash_shape(q, out) || !(softmax_scale > 0.0f)) return false;
  flash::Params p = common_params(q, out, lse, softmax_scale, causal);
  p.k = kv.k_pages.data;
  p.v = kv.v_pages.data;
  p.kv_heads = static_cast<int>(kv.k_pages.shape[2]);
  p.k_row_stride = p.v_row_stride = int64_t{p.kv_heads} * q.shape[2];  // one cache slot
  p.cu_seqlens_q = cu_seqlens_q.ptr<int32_t>();
  p.page_table = kv.page_table.ptr<int32_t>();
  p.kv_lens = kv.kv_lens.ptr<int32_t>();
  p.max_pages = static_cast<int>(kv.page_table.shape[1]);
  p.page_size = static_cast<int>(kv.k_pages.shape[1]);
  // The longest q_len is not known on the host without a synchronisation: all of q bounds it
  // (blocks past a sequence's end return at once).
  launch(p, q.dtype, q.shape[2], /*paged=*/true, kv.page_table.shape[0], q.shape[0], stream);
  return true;
}

}  // namespace braid::cuda
