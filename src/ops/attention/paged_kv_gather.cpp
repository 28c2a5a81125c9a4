// paged_kv_gather: argument checks and dispatch.
#include <string>
#include <vector>

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

constexpr const char* kOp = "paged_kv_gather";

void check_output(const char* arg, const Tensor& t, const Tensor& k_pages) {
  check::defined(kOp, arg, t);
  check::dtype_eq(kOp, arg, t, k_pages.dtype);
  check::shape_eq(kOp, arg, t, {-1, k_pages.shape[2], k_pages.shape[3]});
  check::contiguous(kOp, arg, t);
}

// CPU only (on CUDA the kernel reads them on the device): the cache's lengths and page ids as
// attention() checks them, and offsets that start at 0, step by kv_lens and fit k_out's rows.
void check_values(const PagedKV& kv, const Tensor& cu_seqlens_kv, const Tensor& k_out) {
  const int64_t batch = kv.page_table.shape[0];
  detail::check_paged_kv_values(kOp, kv, std::vector<int64_t>(static_cast<size_t>(batch), 0), "");
  const int32_t* cu = cu_seqlens_kv.ptr<int32_t>();
  const int32_t* lens = kv.kv_lens.ptr<int32_t>();
  if (cu[0] != 0)
    check::fail(ErrorKind::invalid_argument, kOp, "cu_seqlens_kv", "cu_seqlens_kv[0] = 0",
                std::to_string(cu[0]));
  for (int64_t b = 0; b < batch; ++b)
    if (int64_t{cu[b + 1]} - cu[b] != lens[b])
      check::fail(ErrorKind::invalid_argument, kOp, "cu_seqlens_kv",
                  "cu_seqlens_kv[" + std::to_string(b + 1) + "] - cu_seqlens_kv[" +
                      std::to_string(b) + "] = kv_lens[" + std::to_string(b) + "] = " +
                      std::to_string(lens[b]),
                  std::to_string(cu[b + 1]) + " - " + std::to_string(cu[b]));
  if (cu[batch] > k_out.shape[0])
    check::fail(ErrorKind::invalid_argument, kOp, "k_out",
                "at least cu_seqlens_kv[" + std::to_string(batch) + "] = " +
                    std::to_string(cu[batch]) + " rows",
                std::to_string(k_out.shape[0]) + " rows");
}

}  // namespace

void paged_kv_gather(const PagedKV& kv, const Tensor& cu_seqlens_kv, const Tensor& k_out,
                     const Tensor& v_out, Stream stream) {
  const int64_t batch = detail::check_paged_kv_cache(kOp, kv);
  check::defined(kOp, "cu_seqlens_kv", cu_seqlens_kv);
  check::dtype_eq(kOp, "cu_seqlens_kv", cu_seqlens_kv, DType::i32);
  check::shape_eq(kOp, "cu_seqlens_kv", cu_seqlens_kv, {batch + 1});
  check::contiguous(kOp, "cu_seqlens_kv", cu_seqlens_kv);
  check_output("k_out", k_out, kv.k_pages);
  check_output("v_out", v_out, kv.k_pages);
  check::same_shape(kOp, "v_out", v_out, k_out);
  Device dev = check::same_device(kOp, {{"kv.k_pages", &kv.k_pages},
                                        {"kv.v_pages", &kv.v_pages},
                                        {"kv.page_table", &kv.page_table},
                                        {"kv.kv_lens", &kv.kv_lens},
                                        {"cu_seqlens_kv", &cu_seqlens_kv},
                                        {"k_out", &k_out},
                                        {"v_out", &v_out}});
  if (dev.is_cpu()) {
    check_values(kv, cu_seqlens_kv, k_out);
    if (k_out.numel() == 0) return;
    return cpu::paged_kv_gather(kv, cu_seqlens_kv, k_out, v_out);
  }
#if BRAID_WITH_CUDA
  // On CUDA the index values are read by the kernel (see ops.h for what bad ones do).
  if (k_out.numel() == 0 || batch == 0) return;
  DeviceGuard guard(dev);
  cuda::paged_kv_gather(kv, cu_seqlens_kv, k_out, v_out, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
