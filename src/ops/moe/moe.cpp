// Mixture-of-experts ops (moe_route_topk_softmax, moe_experts): argument checks and dispatch.
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

void moe_route_topk_softmax(const Tensor& logits, int k, bool renormalize,
                            const Tensor& topk_weights, const Tensor& topk_ids, Stream stream) {
  const char* op = "moe_route_topk_softmax";
  check::defined(op, "logits", logits);
  check::defined(op, "topk_weights", topk_weights);
  check::defined(op, "topk_ids", topk_ids);
  const int64_t tokens = logits.shape[0], experts = moe_check::router_logits(op, logits);
  const int64_t max_k = experts < kMoeMaxTopK ? experts : kMoeMaxTopK;
  if (k < 1 || k > max_k)
    check::fail(ErrorKind::invalid_argument, op, "k",
                "k between 1 and min(" + std::to_string(kMoeMaxTopK) + ", experts) = " +
                    std::to_string(max_k),
                std::to_string(k));
  moe_check::router_outputs(op, tokens, k, topk_weights, topk_ids);
  Device dev = check::same_device(
      op, {{"logits", &logits}, {"topk_weights", &topk_weights}, {"topk_ids", &topk_ids}});
  if (tokens == 0) return;
  if (dev.is_cpu()) return cpu::moe_route_topk_softmax(logits, k, renormalize, topk_weights, topk_ids);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_route_topk_softmax(logits, k, renormalize, topk_weights, topk_ids, stream);
#else
  (void)stream;
#endif
}

namespace {

// The CPU can look at the ids; on CUDA an out-of-range id contributes nothing instead.
// kMoeNotLocal (another rank's expert under expert parallelism) contributes nothing on both.
void check_expert_ids(const char* op, const Tensor& topk_ids, int64_t experts) {
  const int64_t tokens = topk_ids.shape[0], k = topk_ids.shape[1];
  const int32_t* ids = topk_ids.ptr<int32_t>();
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      if (e != kMoeNotLocal && (e < 0 || e >= experts))
        check::fail(ErrorKind::invalid_argument, op, "topk_ids",
                    "expert ids in [0, " + std::to_string(experts) + ") or kMoeNotLocal (-1)",
                    "topk_ids[" + std::to_string(t) + ", " + std::to_string(j) +
                        "] = " + std::to_string(e));
    }
}

// The shared experts' MLP (MoeExpertsExtras) in the routed experts' format: returns S / I, the
// shared experts the kernels take it as (0 without them).
int64_t check_shared_experts(const char* op, const MoeExpertsExtras& extras, const Tensor& gate_up,
                             int64_t hidden, int64_t inter, DType x_dtype) {
  const Weight& gu = extras.shared_gate_up;
  const Weight& dn = extras.shared_down;
  if (!gu.w.data && !dn.w.data) return 0;
  check::defined(op, "shared_gate_up", gu.w);
  check::defined(op, "shared_down", dn.w);
  check::ndim_eq(op, "shared_gate_up", gu.w, 2);
  check::contiguous(op, "shared_gate_up", gu.w);
  check::contiguous(op, "shared_down", dn.w);
  const int64_t width = gu.w.shape[0] / 2;
  if (gu.w.shape[0] % 2 != 0 || width == 0 || width % inter != 0)
    check::fail(ErrorKind::shape, op, "shared_gate_up",
                "[2 * S, hidden] with S a multiple of the experts' intermediate size " +
                    std::to_string(inter),
                shape_string(gu.w));
  check::dim_eq(op, "shared_gate_up", gu.w, 1, hidden, "hidden size, as in x");
  check::shape_eq(op, "shared_down", dn.w, {hidden, width});
  const bool fp8 = gate_up.dtype == DType::f8e4m3;
  check::dtype_eq(op, "shared_gate_up", gu.w, gate_up.dtype);
  check::dtype_eq(op, "shared_down", dn.w, gate_up.dtype);
  if (fp8) {
    // The routed experts' 128 x 128 block scales (the kernels index both the same way).
    constexpr int64_t B = kFp8Block;
    check::defined(op, "shared_gate_up scale", gu.scale);
    check::defined(op, "shared_down scale", dn.scale);
    check::dtype_eq(op, "shared_gate_up scale", gu.scale, DType::f32);
    check::shape_eq(op, "shared_gate_up scale", gu.scale, {2 * width / B, hidden / B});
    check::contiguous(op, "shared_gate_up scale", gu.scale);
    check::dtype_eq(op, "shared_down scale", dn.scale, DType::f32);
    check::shape_eq(op, "shared_down scale", dn.scale, {hidden / B, width / B});
    check::contiguous(op, "shared_down scale", dn.scale);
  } else if (gu.scale.data || dn.scale.data) {
    check::fail(ErrorKind::invalid_argument, op,
                gu.scale.data ? "shared_gate_up scale" : "shared_down scale",
                "no scales for " + std::string(dtype_name(x_dtype)) + " weights", "a defined tensor");
  }
  return width / inter;
}

}  // namespace

void moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                 const Tensor& gate_up, const Tensor& down, const Tensor& workspace,
                 const Tensor& out, const Tensor& gate_up_scale, const Tensor& down_scale,
                 const MoeExpertsExtras& extras, Stream stream) {
  const char* op = "moe_experts";
  check::defined(op, "x", x);
  check::defined(op, "topk_weights", topk_weights);
  check::defined(op, "topk_ids", topk_ids);
  check::defined(op, "gate_up", gate_up);
  check::defined(op, "down", down);
  check::defined(op, "workspace", workspace);
  check::defined(op, "out", out);

  check::dtype_in(op, "x", x, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(op, "x", x, 2);
  check::rows(op, "x", x);
  const int64_t tokens = x.shape[0], hidden = x.shape[1];

  check::dtype_eq(op, "topk_ids", topk_ids, DType::i32);
  check::ndim_eq(op, "topk_ids", topk_ids, 2);
  check::dim_eq(op, "topk_ids", topk_ids, 0, tokens, "tokens, as in x");
  check::contiguous(op, "topk_ids", topk_ids);
  const int64_t k = topk_ids.shape[1];
  if (k < 1)
    check::fail(ErrorKind::shape, op, "topk_ids", "at least one expert per token (dimension 1)",
                shape_string(topk_ids));
  check::dtype_eq(op, "topk_weights", topk_weights, DType::f32);
  check::same_shape(op, "topk_weights", topk_weights, topk_ids);
  check::contiguous(op, "topk_weights", topk_weights);

  // fp8 weights come with their block scales; 16-bit weights are x's dtype and take none.
  const bool fp8 = gate_up.dtype == DType::f8e4m3;
  if (fp8) {
    check::dtype_in(op, "x", x, {DType::f16, DType::bf16, DType::f32});
    check::defined(op, "gate_up_scale", gate_up_scale);
    check::defined(op, "down_scale", down_scale);
  } else {
    check::dtype_eq(op, "gate_up", gate_up, x.dtype);
    if (extras.quantize_activations)
      check::fail(ErrorKind::invalid_argument, op, "quantize_activations",
                  "fp8 weights (the activations of " + std::string(dtype_name(x.dtype)) +
                      " weights are never quantized)",
                  "true");
    if (gate_up_scale.data || down_scale.data)
      check::fail(ErrorKind::invalid_argument, op, gate_up_scale.data ? "gate_up_scale" : "down_scale",
                  "no scales for " + std::string(dtype_name(x.dtype)) + " weights",
                  "a defined tensor");
  }
  check::ndim_eq(op, "gate_up", gate_up, 3);
  check::dim_eq(op, "gate_up", gate_up, 2, hidden, "hidden size, as in x");
  check::contiguous(op, "gate_up", gate_up);
  const int64_t experts = gate_up.shape[0], inter = gate_up.shape[1] / 2;
  if (experts == 0 || inter == 0 || gate_up.shape[1] % 2 != 0)
    check::fail(ErrorKind::shape, op, "gate_up",
                "[experts, 2 * intermediate, hidden] with experts and intermediate > 0",
                shape_string(gate_up));
  check::dtype_eq(op, "down", down, gate_up.dtype);
  check::shape_eq(op, "down", down, {experts, hidden, inter});
  check::contiguous(op, "down", down);
  if (fp8) {
    // Whole 128 x 128 blocks along both widths: the gate's and the up's rows never share a scale
    // block, and a kernel's slices of H or I are whole blocks.
    constexpr int64_t B = kFp8Block;
    if (hidden % B != 0 || inter % B != 0)
      check::fail(ErrorKind::shape, op, "gate_up",
                  "hidden and intermediate sizes that are multiples of 128 (fp8 block scales)",
                  shape_string(gate_up));
    check::dtype_eq(op, "gate_up_scale", gate_up_scale, DType::f32);
    check::shape_eq(op, "gate_up_scale", gate_up_scale, {experts, 2 * inter / B, hidden / B});
    check::contiguous(op, "gate_up_scale", gate_up_scale);
    check::dtype_eq(op, "down_scale", down_scale, DType::f32);
    check::shape_eq(op, "down_scale", down_scale, {experts, hidden / B, inter / B});
    check::contiguous(op, "down_scale", down_scale);
  }

  const int64_t shared = check_shared_experts(op, extras, gate_up, hidden, inter, x.dtype);
  if (extras.residual.data) {
    check::dtype_eq(op, "residual", extras.residual, x.dtype);
    check::same_shape(op, "residual", extras.residual, x);
    check::rows(op, "residual", extras.residual);
  }

  check::dtype_eq(op, "workspace", workspace, DType::f32);
  check::shape_eq(op, "workspace", workspace, {tokens * (k + shared), inter});
  check::contiguous(op, "workspace", workspace);
  check::dtype_eq(op, "out", out, x.dtype);
  check::same_shape(op, "out", out, x);
  check::rows(op, "out", out);

  Device dev = check::same_device(op, {{"x", &x},
                                       {"topk_weights", &topk_weights},
                                       {"topk_ids", &topk_ids},
                                       {"gate_up", &gate_up},
                                       {"down", &down},
                                       {"workspace", &workspace},
                                       {"out", &out},
                                       {"gate_up_scale", &gate_up_scale},
                                       {"down_scale", &down_scale},
                                       {"shared_gate_up", &extras.shared_gate_up.w},
                                       {"shared_gate_up scale", &extras.shared_gate_up.scale},
                                       {"shared_down", &extras.shared_down.w},
                                       {"shared_down scale", &extras.shared_down.scale},
                                       {"residual", &extras.residual}});
  if (fp8 && dev.is_cuda() && x.dtype == DType::f32)
    check::fail(ErrorKind::unsupported, op, "x",
                "f16 or bf16 activations with fp8 weights on CUDA (the kernels' tensor-core path)",
                "f32");
  if (out.numel() == 0) return;
  if (dev.is_cpu()) {
    check_expert_ids(op, topk_ids, experts);
    return cpu::moe_experts(x, topk_weights, topk_ids, gate_up, down, gate_up_scale, down_scale,
                            extras, workspace, out);
  }
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_experts(x, topk_weights, topk_ids, gate_up, down, gate_up_scale, down_scale, extras,
                    workspace, out, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
