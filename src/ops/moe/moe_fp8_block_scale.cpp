// moe_fp8_block_scale (a DeepSeek-V3 MoE layer on fp8 block-scaled weights): argument checks,
// the CUDA workspace size, and dispatch (contract in ops.h).
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/moe/moe_fp8_block_scale_layout.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

bool block_multiple(int64_t size) { return size >= kFp8Block && size % kFp8Block == 0; }

// The scalar options, in the order the contract states them (each bound follows from the ones
// before); the routing ones are moe_route_grouped's.
void check_options(const char* op, int64_t global_experts, const MoeFp8Options& o,
                   float routed_scaling_factor) {
  if (o.n_group < 1 || global_experts % o.n_group != 0)
    check::fail(ErrorKind::invalid_argument, op, "n_group",
                "a divisor of the number of experts (" + str(global_experts) + ")", str(o.n_group));
  if (o.topk_group < 1 || o.topk_group > o.n_group)
    check::fail(ErrorKind::invalid_argument, op, "topk_group",
                "topk_group between 1 and n_group = " + str(o.n_group), str(o.topk_group));
  const int64_t kept_experts = o.topk_group * (global_experts / o.n_group);
  const int64_t max_k = kept_experts < kMoeMaxTopK ? kept_experts : kMoeMaxTopK;
  if (o.top_k < 1 || o.top_k > max_k)
    check::fail(ErrorKind::invalid_argument, op, "top_k",
                "top_k between 1 and min(" + str(kMoeMaxTopK) +
                    ", topk_group * experts / n_group) = " + str(max_k),
                str(o.top_k));
  if (!std::isfinite(routed_scaling_factor))
    check::fail(ErrorKind::invalid_argument, op, "routed_scaling_factor", "a finite number",
                std::to_string(routed_scaling_factor));
  if (o.intermediate_terms < 1 || o.intermediate_terms > kFp8MaxTerms)
    check::fail(ErrorKind::invalid_argument, op, "intermediate_terms",
                "between 1 and " + str(kFp8MaxTerms), str(o.intermediate_terms));
}

// The u8 workspace the CUDA path carves (the CPU reference needs none).
void check_workspace(const char* op, const Tensor& workspace, int64_t need) {
  check::defined(op, "workspace", workspace);
  check::dtype_eq(op, "workspace", workspace, DType::u8);
  check::contiguous(op, "workspace", workspace);
  if (workspace.numel() < need)
    check::fail(ErrorKind::shape, op, "workspace",
                "at least moe_fp8_block_scale_workspace_bytes(...) = " + str(need) + " bytes",
                shape_string(workspace));
  // The pieces are aligned relative to the start, so the start itself must be.
  if (reinterpret_cast<uintptr_t>(workspace.data) % fp8_block_scale::kPieceAlign != 0)
    check::fail(ErrorKind::invalid_argument, op, "workspace",
                "a data pointer aligned to " + str(fp8_block_scale::kPieceAlign) + " bytes",
                "an address " + str(static_cast<int64_t>(reinterpret_cast<uintptr_t>(workspace.data) %
                                                         fp8_block_scale::kPieceAlign)) +
                    " bytes past such a boundary");
}

}  // namespace

int64_t moe_fp8_block_scale_workspace_bytes(int64_t tokens, int64_t hidden, int64_t intermediate,
                                            int64_t local_experts, const MoeFp8Options& options) {
  const char* op = "moe_fp8_block_scale_workspace_bytes";
  if (tokens < 0)
    check::fail(ErrorKind::invalid_argument, op, "tokens", "tokens >= 0", str(tokens));
  if (!block_multiple(hidden))
    check::fail(ErrorKind::invalid_argument, op, "hidden", "a positive multiple of 128", str(hidden));
  if (!block_multiple(intermediate))
    check::fail(ErrorKind::invalid_argument, op, "intermediate", "a positive multiple of 128",
                str(intermediate));
  if (local_experts < 1 || local_experts > kMoeMaxExperts)
    check::fail(ErrorKind::invalid_argument, op, "local_experts",
                "between 1 and " + str(kMoeMaxExperts), str(local_experts));
  if (options.top_k < 1 || options.top_k > kMoeMaxTopK)
    check::fail(ErrorKind::invalid_argument, op, "top_k", "between 1 and " + str(kMoeMaxTopK),
                str(options.top_k));
  if (options.intermediate_terms < 1 || options.intermediate_terms > kFp8MaxTerms)
    check::fail(ErrorKind::invalid_argument, op, "intermediate_terms",
                "between 1 and " + str(kFp8MaxTerms), str(options.intermediate_terms));
  if (tokens > INT32_MAX / options.top_k)
    check::fail(ErrorKind::unsupported, op, "tokens", "tokens * top_k < 2^31", str(tokens));
  return fp8_block_scale::layout(tokens, hidden, intermediate, local_experts, options.top_k,
                                 options.intermediate_terms)
      .total;
}

void moe_fp8_block_scale(const Tensor& routing_logits, const Tensor& routing_bias,
                         const Tensor& hidden_states, const Tensor& hidden_states_scale,
                         const Tensor& gemm1_weights, const Tensor& gemm1_weights_scale,
                         const Tensor& gemm2_weights, const Tensor& gemm2_weights_scale,
                         int local_expert_offset, float routed_scaling_factor,
                         const MoeFp8Options& options, const Tensor& workspace,
                         const Tensor& output, Stream stream) {
  const char* op = "moe_fp8_block_scale";
  check::defined(op, "routing_logits", routing_logits);
  check::defined(op, "routing_bias", routing_bias);
  check::defined(op, "hidden_states", hidden_states);
  check::defined(op, "hidden_states_scale", hidden_states_scale);
  check::defined(op, "gemm1_weights", gemm1_weights);
  check::defined(op, "gemm1_weights_scale", gemm1_weights_scale);
  check::defined(op, "gemm2_weights", gemm2_weights);
  check::defined(op, "gemm2_weights_scale", gemm2_weights_scale);
  check::defined(op, "output", output);

  // Routing: T tokens over E_global experts.
  check::dtype_eq(op, "routing_logits", routing_logits, DType::f32);
  check::ndim_eq(op, "routing_logits", routing_logits, 2);
  check::rows(op, "routing_logits", routing_logits);
  const int64_t tokens = routing_logits.shape[0], global_experts = routing_logits.shape[1];
  if (global_experts < 1 || global_experts > kMoeMaxExperts)
    check::fail(ErrorKind::shape, op, "routing_logits",
                "between 1 and " + str(kMoeMaxExperts) + " experts in dimension 1",
                shape_string(routing_logits));
  check::dtype_in(op, "routing_bias", routing_bias, {DType::f32, DType::bf16});
  check::shape_eq(op, "routing_bias", routing_bias, {global_experts});
  check::contiguous(op, "routing_bias", routing_bias);
  check_options(op, global_experts, options, routed_scaling_factor);
  if (tokens > INT32_MAX / options.top_k)
    check::fail(ErrorKind::unsupported, op, "routing_logits", "tokens * top_k < 2^31",
                shape_string(routing_logits));

  // Activations: [T, H] fp8 and their transposed block scales.
  check::dtype_eq(op, "hidden_states", hidden_states, DType::f8e4m3);
  check::ndim_eq(op, "hidden_states", hidden_states, 2);
  check::dim_eq(op, "hidden_states", hidden_states, 0, tokens, "tokens, as routing_logits has");
  check::rows(op, "hidden_states", hidden_states);
  const int64_t hidden = hidden_states.shape[1];
  if (!block_multiple(hidden))
    check::fail(ErrorKind::shape, op, "hidden_states",
                "[T, H] with H a positive multiple of 128", shape_string(hidden_states));
  check::dtype_eq(op, "hidden_states_scale", hidden_states_scale, DType::f32);
  check::shape_eq(op, "hidden_states_scale", hidden_states_scale, {hidden / kFp8Block, tokens});
  check::rows(op, "hidden_states_scale", hidden_states_scale);

  // Weights: E local experts, [E, 2I, H] up-then-gate rows and [E, H, I] down rows.
  check::dtype_eq(op, "gemm1_weights", gemm1_weights, DType::f8e4m3);
  check::ndim_eq(op, "gemm1_weights", gemm1_weights, 3);
  check::dim_eq(op, "gemm1_weights", gemm1_weights, 2, hidden, "H, as hidden_states has");
  check::contiguous(op, "gemm1_weights", gemm1_weights);
  const int64_t experts = gemm1_weights.shape[0], intermediate = gemm1_weights.shape[1] / 2;
  if (experts < 1 || experts > kMoeMaxExperts || gemm1_weights.shape[1] % 2 != 0 ||
      !block_multiple(intermediate))
    check::fail(ErrorKind::shape, op, "gemm1_weights",
                "[E, 2 I, H] with 1 <= E <= " + str(kMoeMaxExperts) +
                    " and I a positive multiple of 128",
                shape_string(gemm1_weights));
  const int64_t blocks_h = hidden / kFp8Block, blocks_i = intermediate / kFp8Block;
  check::dtype_eq(op, "gemm1_weights_scale", gemm1_weights_scale, DType::f32);
  check::shape_eq(op, "gemm1_weights_scale", gemm1_weights_scale, {experts, 2 * blocks_i, blocks_h});
  check::contiguous(op, "gemm1_weights_scale", gemm1_weights_scale);
  check::dtype_eq(op, "gemm2_weights", gemm2_weights, DType::f8e4m3);
  check::shape_eq(op, "gemm2_weights", gemm2_weights, {experts, hidden, intermediate});
  check::contiguous(op, "gemm2_weights", gemm2_weights);
  check::dtype_eq(op, "gemm2_weights_scale", gemm2_weights_scale, DType::f32);
  check::shape_eq(op, "gemm2_weights_scale", gemm2_weights_scale, {experts, blocks_h, blocks_i});
  check::contiguous(op, "gemm2_weights_scale", gemm2_weights_scale);

  check::dtype_eq(op, "output", output, DType::bf16);
  check::shape_eq(op, "output", output, {tokens, hidden});
  check::rows(op, "output", output);

  // local_expert_offset may be any int: a global expert id outside [0, E_global) is never
  // chosen, so local experts that map there simply receive no tokens (as in the definition).
  Device dev = check::same_device(op, {{"routing_logits", &routing_logits},
                                       {"routing_bias", &routing_bias},
                                       {"hidden_states", &hidden_states},
                                       {"hidden_states_scale", &hidden_states_scale},
                                       {"gemm1_weights", &gemm1_weights},
                                       {"gemm1_weights_scale", &gemm1_weights_scale},
                                       {"gemm2_weights", &gemm2_weights},
                                       {"gemm2_weights_scale", &gemm2_weights_scale},
                                       {"workspace", &workspace},
                                       {"output", &output}});
  if (dev.is_cpu()) {
    if (tokens == 0) return;
    return cpu::moe_fp8_block_scale(routing_logits, routing_bias, hidden_states,
                                    hidden_states_scale, gemm1_weights, gemm1_weights_scale,
                                    gemm2_weights, gemm2_weights_scale, local_expert_offset,
                                    routed_scaling_factor, options, output);
  }
  check_workspace(op, workspace,
                  moe_fp8_block_scale_workspace_bytes(tokens, hidden, intermediate, experts, options));
  if (tokens == 0) return;
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_fp8_block_scale(routing_logits, routing_bias, hidden_states, hidden_states_scale,
                            gemm1_weights, gemm1_weights_scale, gemm2_weights,
                            gemm2_weights_scale, local_expert_offset, routed_scaling_factor,
                            options, workspace, output, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
