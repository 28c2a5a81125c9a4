// moe_fp8_quantize and moe_gather_fp8: argument checks and dispatch (contracts in ops.h, section
// "FP8 block scale").
#include <cstdint>
#include <string>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/moe/moe_check.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

// An activation row width: a positive multiple of kFp8Block.
void check_block_width(const char* op, const char* arg, const Tensor& t) {
  const int64_t k = t.shape[1];
  if (k < kFp8Block || k % kFp8Block != 0)
    check::fail(ErrorKind::shape, op, arg,
                "[rows, K] with K a positive multiple of " + std::to_string(kFp8Block),
                shape_string(t));
}

}  // namespace

void moe_fp8_quantize(const Tensor& x, const Tensor& q, const Tensor& q_scale, Stream stream) {
  const char* op = "moe_fp8_quantize";
  check::defined(op, "x", x);
  check::dtype_in(op, "x", x, {DType::f32, DType::bf16});
  check::ndim_eq(op, "x", x, 2);
  check::rows(op, "x", x);
  check_block_width(op, "x", x);
  const int64_t m = x.shape[0], k = x.shape[1];
  const int64_t terms = moe_check::fp8_terms(op, "q", q, k, "K, the columns of x");
  check::dim_eq(op, "q", q, 0, m, "M, the rows of x");
  moe_check::fp8_scales(op, "q_scale", q_scale, terms * k / kFp8Block, m);
  Device dev = check::same_device(op, {{"x", &x}, {"q", &q}, {"q_scale", &q_scale}});
  if (m == 0) return;
  if (dev.is_cpu()) return cpu::moe_fp8_quantize(x, q, q_scale);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_fp8_quantize(x, q, q_scale, stream);
#else
  (void)stream;
#endif
}

void moe_gather_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& sorted_pairs, int k,
                    const Tensor& xs, const Tensor& xs_scale, Stream stream) {
  const char* op = "moe_gather_fp8";
  check::defined(op, "x", x);
  check::dtype_eq(op, "x", x, DType::f8e4m3);
  check::ndim_eq(op, "x", x, 2);
  check::rows(op, "x", x);
  check_block_width(op, "x", x);
  if (k < 1) check::fail(ErrorKind::invalid_argument, op, "k", "k >= 1", std::to_string(k));
  const int64_t tokens = x.shape[0], width = x.shape[1], pairs = tokens * k;
  const int64_t blocks = width / kFp8Block;
  if (pairs > INT32_MAX)
    check::fail(ErrorKind::unsupported, op, "x", "at most 2^31 - 1 rows times k",
                shape_string(x) + " with k = " + std::to_string(k));
  moe_check::fp8_scales(op, "x_scale", x_scale, blocks, tokens);
  check::defined(op, "sorted_pairs", sorted_pairs);
  check::dtype_eq(op, "sorted_pairs", sorted_pairs, DType::i32);
  check::shape_eq(op, "sorted_pairs", sorted_pairs, {pairs});
  check::contiguous(op, "sorted_pairs", sorted_pairs);
  check::defined(op, "xs", xs);
  check::dtype_eq(op, "xs", xs, DType::f8e4m3);
  check::shape_eq(op, "xs", xs, {pairs, width});
  check::rows(op, "xs", xs);
  moe_check::fp8_scales(op, "xs_scale", xs_scale, blocks, pairs);
  Device dev = check::same_device(op, {{"x", &x},
                                       {"x_scale", &x_scale},
                                       {"sorted_pairs", &sorted_pairs},
                                       {"xs", &xs},
                                       {"xs_scale", &xs_scale}});
  if (pairs == 0) return;
  if (dev.is_cpu()) {
    // The CPU can read the values; CUDA trusts them (checking would need a host synchronisation).
    const int32_t* v = sorted_pairs.ptr<int32_t>();
    for (int64_t i = 0; i < pairs; ++i)
      if (v[i] < 0 || v[i] >= pairs)
        check::fail(ErrorKind::invalid_argument, op, "sorted_pairs",
                    "values in [0, " + std::to_string(pairs) + ")",
                    "sorted_pairs[" + std::to_string(i) + "] = " + std::to_string(v[i]));
    return cpu::moe_gather_fp8(x, x_scale, sorted_pairs, k, xs, xs_scale);
  }
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_gather_fp8(x, x_scale, sorted_pairs, k, xs, xs_scale, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
