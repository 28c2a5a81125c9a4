// attention_mla (multi-head latent attention, absorbed form, over a paged cache of latent rows):
// argument checks, the workspace bound, index-value checks on the CPU, and dispatch.
#include <algorithm>
#include <cmath>
#include <cstdint>
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

constexpr const char* kOp = "attention_mla";

// The split-KV bound. A CUDA block takes one query token and kHeadsPerBlock of its heads (a
// "unit"; the Hopper kernel's blocks take 64 heads, so it has fewer units and this bound holds
// for it too); the keys are cut into chunks of at least kMinSplitKeys (an MLA row is ~1 KiB, so
// a chunk is at least 72 KiB: small decode batches get enough blocks to fill the GPU) and
// units * chunks stays within kMaxSplitBlocks, about two waves of resident blocks on an
// H100/H200. Enough tokens fill the GPU alone: then one chunk per token and no workspace.
constexpr int64_t kHeadsPerBlock = 16;
constexpr int64_t kMinSplitKeys = 64;
constexpr int64_t kMaxSplitBlocks = 512;

int64_t max_splits(int64_t total_q, int64_t heads, int64_t max_kv_len) {
  const int64_t units = std::max<int64_t>(total_q, 1) *
                        std::max<int64_t>((heads + kHeadsPerBlock - 1) / kHeadsPerBlock, 1);
  const int64_t by_len = (std::max<int64_t>(max_kv_len, 1) + kMinSplitKeys - 1) / kMinSplitKeys;
  const int64_t by_units = (kMaxSplitBlocks + units - 1) / units;
  return std::max<int64_t>(1, std::min(by_len, by_units));
}

std::string at(const char* name, int64_t i) {
  return std::string(name) + "[" + std::to_string(i) + "]";
}

bool given(const Tensor& t) { return t.data != nullptr || t.ndim != 0; }

// Shapes, dtypes and layouts; returns the workspace size the call needs (in floats).
int64_t check_shapes(const Tensor& q_latent, const Tensor& q_rope, const Tensor& cu_seqlens_q,
                     const Tensor& cache, const Tensor& page_table, const Tensor& kv_lens,
                     float softmax_scale, const Tensor& out, const Tensor& lse,
                     const Tensor& workspace) {
  check::defined(kOp, "q_latent", q_latent);
  check::defined(kOp, "q_rope", q_rope);
  check::defined(kOp, "cu_seqlens_q", cu_seqlens_q);
  check::defined(kOp, "cache", cache);
  check::defined(kOp, "page_table", page_table);
  check::defined(kOp, "kv_lens", kv_lens);
  check::defined(kOp, "out", out);

  check::dtype_in(kOp, "q_latent", q_latent, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(kOp, "q_latent", q_latent, 3);
  check::dense_last_dim(kOp, "q_latent", q_latent);
  const int64_t total_q = q_latent.shape[0], heads = q_latent.shape[1], r = q_latent.shape[2];
  if (r < 1)
    check::fail(ErrorKind::shape, kOp, "q_latent", "a latent dimension r (dimension 2) >= 1",
                shape_string(q_latent));

  check::dtype_eq(kOp, "q_rope", q_rope, q_latent.dtype);
  check::ndim_eq(kOp, "q_rope", q_rope, 3);
  check::dim_eq(kOp, "q_rope", q_rope, 0, total_q, "total_q, as in q_latent");
  check::dim_eq(kOp, "q_rope", q_rope, 1, heads, "heads, as in q_latent");
  check::dense_last_dim(kOp, "q_rope", q_rope);
  const int64_t dr = q_rope.shape[2];

  check::dtype_eq(kOp, "cache", cache, q_latent.dtype);
  check::ndim_eq(kOp, "cache", cache, 4);
  check::dim_eq(kOp, "cache", cache, 2, 1, "one latent row per token: kv_heads 1");
  const std::string row = "r + dr = " + std::to_string(r) + " + " + std::to_string(dr);
  check::dim_eq(kOp, "cache", cache, 3, r + dr, row.c_str());
  check::contiguous(kOp, "cache", cache);
  if (cache.shape[1] == 0)
    check::fail(ErrorKind::shape, kOp, "cache", "a page_size (dimension 1) > 0",
                shape_string(cache));

  check::dtype_eq(kOp, "page_table", page_table, DType::i32);
  check::ndim_eq(kOp, "page_table", page_table, 2);
  check::contiguous(kOp, "page_table", page_table);
  const int64_t batch = page_table.shape[0];
  check::dtype_eq(kOp, "kv_lens", kv_lens, DType::i32);
  check::shape_eq(kOp, "kv_lens", kv_lens, {batch});
  check::contiguous(kOp, "kv_lens", kv_lens);
  check::dtype_eq(kOp, "cu_seqlens_q", cu_seqlens_q, DType::i32);
  check::shape_eq(kOp, "cu_seqlens_q", cu_seqlens_q, {batch + 1});
  check::contiguous(kOp, "cu_seqlens_q", cu_seqlens_q);

  check::dtype_eq(kOp, "out", out, q_latent.dtype);
  check::same_shape(kOp, "out", out, q_latent);
  check::dense_last_dim(kOp, "out", out);
  if (given(lse)) {
    check::defined(kOp, "lse", lse);
    check::dtype_eq(kOp, "lse", lse, DType::f32);
    check::shape_eq(kOp, "lse", lse, {total_q, heads});
    check::contiguous(kOp, "lse", lse);
  }

  const int64_t capacity = page_table.shape[1] * cache.shape[1];
  const int64_t needed = attention_mla_workspace_floats(total_q, heads, r, capacity);
  if (needed > 0 || given(workspace)) {
    check::defined(kOp, "workspace", workspace);
    check::dtype_eq(kOp, "workspace", workspace, DType::f32);
    check::contiguous(kOp, "workspace", workspace);
    if (workspace.numel() < needed)
      check::fail(ErrorKind::shape, kOp, "workspace",
                  "at least " + std::to_string(needed) +
                      " elements (attention_mla_workspace_floats for " + std::to_string(total_q) +
                      " tokens, " + std::to_string(heads) + " heads, r " + std::to_string(r) +
                      " and a page-table capacity of " + std::to_string(capacity) + " keys)",
                  std::to_string(workspace.numel()) + " elements");
  }

  if (!std::isfinite(softmax_scale))
    check::fail(ErrorKind::invalid_argument, kOp, "softmax_scale", "a finite value",
                std::to_string(softmax_scale));
  return needed;
}

// The CPU can afford to look at the index tensors; a CUDA kernel could not without a host
// synchronisation, so there they are the caller's promise.
void check_values(const Tensor& q_latent, const Tensor& cu_seqlens_q, const Tensor& cache,
                  const Tensor& page_table, const Tensor& kv_lens) {
  const int64_t batch = page_table.shape[0], max_pages = page_table.shape[1];
  const int64_t num_pages = cache.shape[0], page_size = cache.shape[1];
  const int64_t capacity = max_pages * page_size;
  const int32_t* cu = cu_seqlens_q.ptr<int32_t>();
  const int32_t* lens = kv_lens.ptr<int32_t>();
  const int32_t* table = page_table.ptr<int32_t>();

  if (cu[0] != 0)
    check::fail(ErrorKind::invalid_argument, kOp, "cu_seqlens_q", "cu_seqlens_q[0] = 0",
                std::to_string(cu[0]));
  for (int64_t b = 0; b < batch; ++b)
    if (cu[b + 1] < cu[b])
      check::fail(ErrorKind::invalid_argument, kOp, "cu_seqlens_q", "non-decreasing offsets",
                  at("cu_seqlens_q", b + 1) + " = " + std::to_string(cu[b + 1]) + " < " +
                      at("cu_seqlens_q", b) + " = " + std::to_string(cu[b]));
  if (cu[batch] != q_latent.shape[0])
    check::fail(
        ErrorKind::invalid_argument, kOp, "cu_seqlens_q",
        "a last offset equal to q_latent's " + std::to_string(q_latent.shape[0]) + " tokens",
        at("cu_seqlens_q", batch) + " = " + std::to_string(cu[batch]));

  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q_len = cu[b + 1] - cu[b], kv_len = lens[b];
    if (kv_len < q_len || kv_len > capacity)
      check::fail(ErrorKind::invalid_argument, kOp, "kv_lens",
                  at("kv_lens", b) + " between its query count " + std::to_string(q_len) +
                      " and the page table's capacity " + std::to_string(capacity),
                  std::to_string(kv_len));
    const int64_t used = (kv_len + page_size - 1) / page_size;
    for (int64_t p = 0; p < used; ++p) {
      const int32_t page = table[b * max_pages + p];
      if (page < 0 || page >= num_pages)
        check::fail(ErrorKind::invalid_argument, kOp, "page_table",
                    "page ids in [0, " + std::to_string(num_pages) + ")",
                    "page_table[" + std::to_string(b) + ", " + std::to_string(p) +
                        "] = " + std::to_string(page));
    }
  }
}

}  // namespace

int64_t attention_mla_workspace_floats(int64_t total_q, int64_t heads, int64_t r,
                                       int64_t max_kv_len) {
  if (total_q <= 0 || heads <= 0 || r <= 0) return 0;
  const int64_t splits = max_splits(total_q, heads, max_kv_len);
  // Per (token, head, chunk): the chunk's normalised output (r floats) and its log-sum-exp.
  return splits > 1 ? total_q * heads * splits * (r + 1) : 0;
}

void attention_mla(const Tensor& q_latent, const Tensor& q_rope, const Tensor& cu_seqlens_q,
                   const Tensor& cache, const Tensor& page_table, const Tensor& kv_lens,
                   bool causal, float softmax_scale, const Tensor& out, const Tensor& lse,
                   const Tensor& workspace, Stream stream) {
  check_shapes(q_latent, q_rope, cu_seqlens_q, cache, page_table, kv_lens, softmax_scale, out, lse,
               workspace);
  Device dev = check::same_device(kOp, {{"q_latent", &q_latent},
                                        {"q_rope", &q_rope},
                                        {"cu_seqlens_q", &cu_seqlens_q},
                                        {"cache", &cache},
                                        {"page_table", &page_table},
                                        {"kv_lens", &kv_lens},
                                        {"out", &out},
                                        {"lse", &lse},
                                        {"workspace", &workspace}});
  if (dev.is_cpu()) {
    check_values(q_latent, cu_seqlens_q, cache, page_table, kv_lens);
    if (q_latent.numel() == 0) return;
    return cpu::attention_mla(q_latent, q_rope, cu_seqlens_q, cache, page_table, kv_lens, causal,
                              softmax_scale, out, lse);
  }
#if BRAID_WITH_CUDA
  // On CUDA the index values are trusted (see check_values).
  const int64_t r = q_latent.shape[2], dr = q_rope.shape[2];
  if (q_latent.dtype != DType::f16 && q_latent.dtype != DType::bf16)
    check::fail(ErrorKind::unsupported, kOp, "q_latent", "dtype f16 or bf16 on CUDA",
                std::string(dtype_name(q_latent.dtype)));
  if (r % 64 != 0 || r > 512)
    check::fail(ErrorKind::unsupported, kOp, "q_latent",
                "a latent dimension r that is a multiple of 64 up to 512 on CUDA",
                "r " + std::to_string(r));
  if (dr % 32 != 0 || dr > 64)
    check::fail(ErrorKind::unsupported, kOp, "q_rope",
                "a rope dimension dr that is a multiple of 32 up to 64 on CUDA",
                "dr " + std::to_string(dr));
  if (reinterpret_cast<uintptr_t>(cache.data) % 16 != 0)
    check::fail(ErrorKind::unsupported, kOp, "cache", "a 16-byte aligned pointer on CUDA",
                "an address 16-byte misaligned by " +
                    std::to_string(reinterpret_cast<uintptr_t>(cache.data) % 16));
  const int64_t capacity = page_table.shape[1] * cache.shape[1];
  if (capacity > INT32_MAX - 64)
    check::fail(ErrorKind::unsupported, kOp, "page_table",
                "a capacity (max_pages_per_seq * page_size) below 2^31 - 64 keys on CUDA",
                std::to_string(capacity) + " keys");
  if (q_latent.numel() == 0) return;
  DeviceGuard guard(dev);
  const int64_t total_q = q_latent.shape[0], heads = q_latent.shape[1];
  const int splits = cuda::attention_mla_splits(
      q_latent, page_table, cache, static_cast<int>(max_splits(total_q, heads, capacity)));
  if (total_q * splits * ((heads + kHeadsPerBlock - 1) / kHeadsPerBlock) > INT32_MAX)
    check::fail(ErrorKind::unsupported, kOp, "q_latent",
                "fewer than 2^31 blocks (tokens * ceil(heads / 16)) on CUDA",
                shape_string(q_latent));
  cuda::attention_mla(q_latent, q_rope, cu_seqlens_q, cache, page_table, kv_lens, causal,
                      softmax_scale, out, lse, workspace, splits, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
