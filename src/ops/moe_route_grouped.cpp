// moe_route_grouped (DeepSeek-V3's grouped sigmoid router): argument checks and dispatch.
#include <cmath>
#include <string>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/moe_check.h"
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

  // The scalars, in the order the contract states them: each bound follows from the ones before.
  if (n_group < 1 || experts % n_group != 0)
    check::fail(ErrorKind::invalid_argument, op, "n_group",
                "a divisor of the number of experts (" + std::to_string(experts) + ")",
                std::to_string(n_group));
  if (topk_group < 1 || topk_group > n_group)
    check::fail(ErrorKind::invalid_argument, op, "topk_group",
                "topk_group between 1 and n_group = " + std::to_string(n_group),
                std::to_string(topk_group));
  const int64_t kept_experts = topk_group * (experts / n_group);
  const int64_t max_k = kept_experts < kMoeMaxTopK ? kept_experts : kMoeMaxTopK;
  if (k < 1 || k > max_k)
    check::fail(ErrorKind::invalid_argument, op, "k",
                "k between 1 and min(" + std::to_string(kMoeMaxTopK) +
                    ", topk_group * experts / n_group) = " + std::to_string(max_k),
                std::to_string(k));
  if (!std::isfinite(routed_scaling_factor))
    check::fail(ErrorKind::invalid_argument, op, "routed_scaling_factor", "a finite number",
                std::to_string(routed_scaling_factor));

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

}  // namespace braid::ops
