// C wrappers: moe_route_topk_softmax, moe_experts (and _ex: fp8 scales, shared experts, the
// residual), the permutation ops (moe_permute, moe_gather,
// moe_combine) and moe_grouped_gemm.
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

extern "C" {

braid_status braid_moe_route_topk_softmax(const braid_tensor* logits, int k, int renormalize,
                                          const braid_tensor* topk_weights,
                                          const braid_tensor* topk_ids, void* stream) {
  const char* op = "moe_route_topk_softmax";
  return guarded(op, [&] {
    braid::ops::moe_route_topk_softmax(tensor_arg(op, "logits", logits), k, renormalize != 0,
                                       tensor_arg(op, "topk_weights", topk_weights),
                                       tensor_arg(op, "topk_ids", topk_ids), stream_arg(stream));
  });
}

braid_status braid_moe_experts(const braid_tensor* x, const braid_tensor* topk_weights,
                               const braid_tensor* topk_ids, const braid_tensor* gate_up,
                               const braid_tensor* down, const braid_tensor* workspace,
                               const braid_tensor* out, void* stream) {
  const char* op = "moe_experts";
  return guarded(op, [&] {
    braid::ops::moe_experts(tensor_arg(op, "x", x), tensor_arg(op, "topk_weights", topk_weights),
                            tensor_arg(op, "topk_ids", topk_ids),
                            tensor_arg(op, "gate_up", gate_up), tensor_arg(op, "down", down),
                            tensor_arg(op, "workspace", workspace), tensor_arg(op, "out", out),
                            stream_arg(stream));
  });
}

braid_status braid_moe_experts_ex(
    const braid_tensor* x, const braid_tensor* topk_weights, const braid_tensor* topk_ids,
    const braid_tensor* gate_up, const braid_tensor* gate_up_scale, const braid_tensor* down,
    const braid_tensor* down_scale, const braid_tensor* shared_gate_up,
    const braid_tensor* shared_gate_up_scale, const braid_tensor* shared_down,
    const braid_tensor* shared_down_scale, const braid_tensor* residual,
    const braid_tensor* workspace, const braid_tensor* out, void* stream) {
  const char* op = "moe_experts";
  return guarded(op, [&] {
    braid::ops::MoeExpertsExtras extras;
    extras.shared_gate_up = {optional_tensor_arg(op, "shared_gate_up", shared_gate_up),
                             optional_tensor_arg(op, "shared_gate_up_scale", shared_gate_up_scale)};
    extras.shared_down = {optional_tensor_arg(op, "shared_down", shared_down),
                          optional_tensor_arg(op, "shared_down_scale", shared_down_scale)};
    extras.residual = optional_tensor_arg(op, "residual", residual);
    braid::ops::moe_experts(tensor_arg(op, "x", x), tensor_arg(op, "topk_weights", topk_weights),
                            tensor_arg(op, "topk_ids", topk_ids),
                            tensor_arg(op, "gate_up", gate_up), tensor_arg(op, "down", down),
                            tensor_arg(op, "workspace", workspace), tensor_arg(op, "out", out),
                            optional_tensor_arg(op, "gate_up_scale", gate_up_scale),
                            optional_tensor_arg(op, "down_scale", down_scale), extras,
                            stream_arg(stream));
  });
}

int64_t braid_moe_permute_workspace_size(int64_t pairs, int num_experts) {
  return braid::ops::moe_permute_workspace_size(pairs, num_experts);
}

braid_status braid_moe_permute(const braid_tensor* topk_ids, int num_experts,
                               const braid_tensor* expert_offsets, const braid_tensor* sorted_pairs,
                               const braid_tensor* pair_rows, const braid_tensor* workspace,
                               void* stream) {
  const char* op = "moe_permute";
  return guarded(op, [&] {
    braid::ops::moe_permute(tensor_arg(op, "topk_ids", topk_ids), num_experts,
                            tensor_arg(op, "expert_offsets", expert_offsets),
                            tensor_arg(op, "sorted_pairs", sorted_pairs),
                            tensor_arg(op, "pair_rows", pair_rows),
                            tensor_arg(op, "workspace", workspace), stream_arg(stream));
  });
}

braid_status braid_moe_gather(const braid_tensor* x, const braid_tensor* sorted_pairs, int k,
                              const braid_tensor* xs, void* stream) {
  const char* op = "moe_gather";
  return guarded(op, [&] {
    braid::ops::moe_gather(tensor_arg(op, "x", x), tensor_arg(op, "sorted_pairs", sorted_pairs), k,
                           tensor_arg(op, "xs", xs), stream_arg(stream));
  });
}

braid_status braid_moe_combine(const braid_tensor* ys, const braid_tensor* pair_rows,
                               const braid_tensor* topk_weights, const braid_tensor* out,
                               void* stream) {
  const char* op = "moe_combine";
  return guarded(op, [&] {
    braid::ops::moe_combine(tensor_arg(op, "ys", ys), tensor_arg(op, "pair_rows", pair_rows),
                            tensor_arg(op, "topk_weights", topk_weights), tensor_arg(op, "out", out),
                            stream_arg(stream));
  });
}

braid_status braid_moe_grouped_gemm(const braid_tensor* x, const braid_tensor* w,
                                    const braid_tensor* expert_offsets, int activation,
                                    const braid_tensor* y, void* stream) {
  const char* op = "moe_grouped_gemm";
  return guarded(op, [&] {
    braid::ops::moe_grouped_gemm(tensor_arg(op, "x", x), tensor_arg(op, "w", w),
                                 tensor_arg(op, "expert_offsets", expert_offsets),
                                 static_cast<braid::ops::MoeActivation>(activation),
                                 tensor_arg(op, "y", y), stream_arg(stream));
  });
}

}  // extern "C"
