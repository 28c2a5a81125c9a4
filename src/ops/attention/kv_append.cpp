// kv_append: argument checks and dispatch.
#include <string>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

void kv_append(const Tensor& k, const Tensor& v, const Tensor& slots, const Tensor& k_pages,
               const Tensor& v_pages, Stream stream) {
  const char* op = "kv_append";
  // Keys only (an MLA latent cache): v and v_pages both undefined.
  const bool values = v.ndim != 0 || v_pages.ndim != 0;
  for (auto [name, t] : {std::pair{"k", &k}, {"slots", &slots}, {"k_pages", &k_pages}})
    check::defined(op, name, *t);
  if (values) {
    check::defined(op, "v", v);
    check::defined(op, "v_pages", v_pages);
  }
  check::dtype_in(op, "k", k, {DType::f32, DType::f16, DType::bf16});
  check::dtype_eq(op, "k_pages", k_pages, k.dtype);
  check::dtype_eq(op, "slots", slots, DType::i32);
  check::ndim_eq(op, "k", k, 3);
  const int64_t n = k.size(0), kv_heads = k.size(1), head_dim = k.size(2);
  if (k.stride(2) != 1)
    check::fail(ErrorKind::shape, op, "k", "a dense last dimension", "stride " + std::to_string(k.stride(2)));
  check::shape_eq(op, "slots", slots, {n});
  check::contiguous(op, "slots", slots);
  check::shape_eq(op, "k_pages", k_pages, {-1, -1, kv_heads, head_dim});
  check::contiguous(op, "k_pages", k_pages);
  if (values) {
    check::dtype_eq(op, "v", v, k.dtype);
    check::dtype_eq(op, "v_pages", v_pages, k.dtype);
    check::same_shape(op, "v", v, k);
    if (v.stride(2) != 1)
      check::fail(ErrorKind::shape, op, "v", "a dense last dimension", "stride " + std::to_string(v.stride(2)));
    check::same_shape(op, "v_pages", v_pages, k_pages);
    check::contiguous(op, "v_pages", v_pages);
  }
  Device dev = check::same_device(op, {{"k", &k}, {"v", &v}, {"slots", &slots},
                                       {"k_pages", &k_pages}, {"v_pages", &v_pages}});
  if (n == 0) return;
  if (dev.is_cpu()) {
    const int64_t capacity = k_pages.size(0) * k_pages.size(1);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t s = slots.ptr<int32_t>()[i];
      if (s < 0 || s >= capacity)
        check::fail(ErrorKind::invalid_argument, op, "slots",
                    "slots in [0, " + std::to_string(capacity) + ")",
                    std::to_string(s) + " at index " + std::to_string(i));
    }
    return cpu::kv_append(k, v, slots, k_pages, v_pages);
  }
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::kv_append(k, v, slots, k_pages, v_pages, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
