// qk_norm_rope_kv_append: argument checks (those of rms_norm, rope_apply and kv_append, named
// under the fused op; qk_norm_rope_kv_append_attention_decode runs them too) and dispatch.
#include <string>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/attention/decode_step_check.h"
#include "ops/cpu/cpu_ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

constexpr const char* kOp = "qk_norm_rope_kv_append";

bool given(const Tensor& t) { return !(t.ndim == 0 && t.data == nullptr); }

void dense_last(const char* op, const char* arg, const Tensor& t) {
  if (t.strides[2] != 1)
    check::fail(ErrorKind::shape, op, arg, "a dense last dimension (stride 1)",
                "stride " + std::to_string(t.strides[2]));
}

// rms_norm's checks on one of q/k (x and out are the same view) and its weight.
void check_norm(const char* op, const char* arg, const Tensor& x, const char* weight_arg,
                const Tensor& weight) {
  check::defined(op, weight_arg, weight);
  check::dtype_eq(op, weight_arg, weight, x.dtype);
  check::shape_eq(op, weight_arg, weight, {x.size(-1)});
  check::contiguous(op, weight_arg, weight);
  check::row_grid(op, arg, x);
}

}  // namespace

namespace detail {

QkRopeKvChecked check_qk_norm_rope_kv_append(const char* op, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& q_norm,
                                             const Tensor& k_norm, float eps,
                                             const Tensor& positions, const RopeConfig& rope,
                                             const Tensor& slots, const Tensor& k_pages,
                                             const Tensor& v_pages) {
  for (auto [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}, {"positions", &positions},
                         {"slots", &slots}, {"k_pages", &k_pages}, {"v_pages", &v_pages}})
    check::defined(op, name, *t);
  check::dtype_in(op, "q", q, {DType::f32, DType::f16, DType::bf16});
  check::dtype_eq(op, "k", k, q.dtype);
  check::dtype_eq(op, "v", v, q.dtype);
  check::dtype_eq(op, "k_pages", k_pages, q.dtype);
  check::dtype_eq(op, "v_pages", v_pages, q.dtype);
  check::dtype_in(op, "positions", positions, {DType::i32, DType::i64});
  check::dtype_eq(op, "slots", slots, DType::i32);

  check::ndim_eq(op, "q", q, 3);
  dense_last(op, "q", q);
  const int64_t n = q.size(0), head_dim = q.size(2);
  if (head_dim % 2 != 0 || head_dim == 0)
    check::fail(ErrorKind::shape, op, "q", "an even head_dim > 0 (last dimension)",
                shape_string(q));
  // The CUDA kernel stages one head per warp in shared memory.
  if (head_dim > kQkRopeKvMaxHeadDim)
    check::fail(ErrorKind::shape, op, "q",
                "head_dim <= " + std::to_string(kQkRopeKvMaxHeadDim) + " (last dimension)",
                shape_string(q));
  check::shape_eq(op, "k", k, {n, -1, head_dim});
  dense_last(op, "k", k);
  check::same_shape(op, "v", v, k);
  dense_last(op, "v", v);
  const int64_t kv_heads = k.size(1);

  const bool norm = given(q_norm) || given(k_norm);
  if (norm) {
    check_norm(op, "q", q, "q_norm", q_norm);
    check_norm(op, "k", k, "k_norm", k_norm);
    if (!(eps >= 0.0f))
      check::fail(ErrorKind::invalid_argument, op, "eps", "eps >= 0", std::to_string(eps));
  }

  check::shape_eq(op, "positions", positions, {n});
  check::contiguous(op, "positions", positions);
  check::shape_eq(op, "slots", slots, {n});
  check::contiguous(op, "slots", slots);
  check::shape_eq(op, "k_pages", k_pages, {-1, -1, kv_heads, head_dim});
  check::same_shape(op, "v_pages", v_pages, k_pages);
  check::contiguous(op, "k_pages", k_pages);
  check::contiguous(op, "v_pages", v_pages);
  // Config errors are reported under "rope_apply", as rope_table reports them.
  QkRopeKvChecked checked;
  checked.table = rope_table(rope, static_cast<int>(head_dim));
  checked.norm = norm;

  const Tensor none;
  checked.device = check::same_device(
      op, {{"q", &q}, {"k", &k}, {"v", &v}, {"q_norm", norm ? &q_norm : &none},
           {"k_norm", norm ? &k_norm : &none}, {"positions", &positions}, {"slots", &slots},
           {"k_pages", &k_pages}, {"v_pages", &v_pages}});
  if (checked.device.is_cpu()) {
    const int64_t capacity = k_pages.size(0) * k_pages.size(1);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t s = slots.ptr<int32_t>()[i];
      if (s < 0 || s >= capacity)
        check::fail(ErrorKind::invalid_argument, op, "slots",
                    "slots in [0, " + std::to_string(capacity) + ")",
                    std::to_string(s) + " at index " + std::to_string(i));
    }
  }
  return checked;
}

}  // namespace detail

void qk_norm_rope_kv_append(const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& q_norm, const Tensor& k_norm, float eps,
                            const Tensor& positions, const RopeConfig& rope, const Tensor& slots,
                            const Tensor& k_pages, const Tensor& v_pages, Stream stream) {
  const detail::QkRopeKvChecked checked = detail::check_qk_norm_rope_kv_append(
      kOp, q, k, v, q_norm, k_norm, eps, positions, rope, slots, k_pages, v_pages);
  if (q.size(0) == 0) return;
  const Tensor none;
  const Tensor& qn = checked.norm ? q_norm : none;
  const Tensor& kn = checked.norm ? k_norm : none;
  if (checked.device.is_cpu())
    return cpu::qk_norm_rope_kv_append(q, k, v, qn, kn, eps, positions, checked.table, slots,
                                       k_pages, v_pages);
#if BRAID_WITH_CUDA
  DeviceGuard guard(checked.device);
  cuda::qk_norm_rope_kv_append(q, k, v, qn, kn, eps, positions, checked.table, slots, k_pages,
                               v_pages, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
