// The grouped routers: moe_route_grouped (DeepSeek-V3: sigmoid, bias) and
// moe_route_softmax_grouped (DeepSeek-V2: softmax). Argument checks and dispatch; both run the
// same CPU reference and the same CUDA kernel, in their scoring mode.
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

void moe_route_grouped(const Tensor& logits, const Tensor& bias, int n_group, int topk_group,
                       int k, float routed_scaling_factor, const Tensor& topk_weights,
                       const Tensor& topk_ids, Stream stream) {
  const char* op = "moe_route_grouped";
  check::defined(op, "logits", logits);
  check::defined(op, "bias", bias);
  check::defined(op, "topk_weights", topk_weights);
  check::defined(op, "topk_ids", topk_ids);

  const int64_t tokens = logits.shape[0], experts = moe_check::router_logits(op, logits);
  check::dtype_in(op, "bias", bias, {DType::f32, DType::bf16});
  check::shape_eq(op, "bias", bias, {experts});
  check::contiguous(op, "bias", bias);
  moe_check::router_groups(op, experts, n_group, topk_group, k, "k", routed_scaling_factor);
  moe_check::router_outputs(op, tokens, k, topk_weights, topk_ids);
  Device dev = check::same_device(op, {{"logits", &logits},
                                       {"bias", &bias},
                                       {"topk_weights", &topk_weights},
                                       {"topk_ids", &topk_ids}});
  if (tokens == 0) return;
  if (dev.is_cpu())
    return cpu::moe_route_grouped(logits, bias, n_group, topk_group, k, routed_scaling_factor,
                                  topk_weights, topk_ids);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_route_grouped(logits, bias, n_group, topk_group, k, routed_scaling_factor,
                          topk_weights, topk_ids, stream);
#else
  (void)stream;
#endif
}

void moe_route_softmax_grouped(const Tensor& logits, int n_group, int topk_group, int k,
                               bool renormalize, float routed_scaling_factor,
                               const Tensor& topk_weights, const Tensor& topk_ids,
                               Stream stream) {
  const char* op = "moe_route_softmax_grouped";
  check::defined(op, "logits", logits);
  check::defined(op, "topk_weights", topk_weights);
  check::defined(op, "topk_ids", topk_ids);

  const int64_t tokens = logits.shape[0], experts = moe_check::router_logits(op, logits);
  moe_check::router_groups(op, experts, n_group, topk_group, k, "k", routed_scaling_factor);
  moe_check::router_outputs(op, tokens, k, topk_weights, topk_ids);
  Device dev = check::same_device(
      op, {{"logits", &logits}, {"topk_weights", &topk_weights}, {"topk_ids", &topk_ids}});
  if (tokens == 0) return;
  if (dev.is_cpu())
    return cpu::moe_route_softmax_grouped(logits, n_group, topk_group, k, renormalize,
                                          routed_scaling_factor, topk_weights, topk_ids);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_route_softmax_grouped(logits, n_group, topk_group, k, renormalize,
                                  routed_scaling_factor, topk_weights, topk_ids, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
