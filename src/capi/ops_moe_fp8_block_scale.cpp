// C wrapper: moe_fp8_block_scale (a DeepSeek-V3 MoE layer on fp8 block-scaled weights) and its
// workspace size. The options struct travels as plain ints.
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

namespace {

braid::ops::MoeFp8Options fp8_options(int n_group, int topk_group, int top_k, int intermediate_terms) {
  braid::ops::MoeFp8Options o;
  o.n_group = n_group;
  o.topk_group = topk_group;
  o.top_k = top_k;
  o.intermediate_terms = intermediate_terms;
  return o;
}

}  // namespace

extern "C" {

int64_t braid_moe_fp8_block_scale_workspace_bytes(int64_t tokens, int64_t hidden,
                                                  int64_t intermediate, int64_t local_experts,
                                                  int n_group, int topk_group, int top_k,
                                                  int intermediate_terms) {
  const char* op = "moe_fp8_block_scale_workspace_bytes";
  int64_t bytes = -1;  // what a refused size returns; the message says why
  guarded(op, [&] {
    bytes = braid::ops::moe_fp8_block_scale_workspace_bytes(
        tokens, hidden, intermediate, local_experts,
        fp8_options(n_group, topk_group, top_k, intermediate_terms));
  });
  return bytes;
}

braid_status braid_moe_fp8_block_scale(
    const braid_tensor* routing_logits, const braid_tensor* routing_bias,
    const braid_tensor* hidden_states, const braid_tensor* hidden_states_scale,
    const braid_tensor* gemm1_weights, const braid_tensor* gemm1_weights_scale,
    const braid_tensor* gemm2_weights, const braid_tensor* gemm2_weights_scale,
    int local_expert_offset, float routed_scaling_factor, int n_group, int topk_group, int top_k,
    int intermediate_terms, const braid_tensor* workspace, const braid_tensor* output,
    void* stream) {
  const char* op = "moe_fp8_block_scale";
  return guarded(op, [&] {
    braid::ops::moe_fp8_block_scale(
        tensor_arg(op, "routing_logits", routing_logits),
        tensor_arg(op, "routing_bias", routing_bias),
        tensor_arg(op, "hidden_states", hidden_states),
        tensor_arg(op, "hidden_states_scale", hidden_states_scale),
        tensor_arg(op, "gemm1_weights", gemm1_weights),
        tensor_arg(op, "gemm1_weights_scale", gemm1_weights_scale),
        tensor_arg(op, "gemm2_weights", gemm2_weights),
        tensor_arg(op, "gemm2_weights_scale", gemm2_weights_scale), local_expert_offset,
        routed_scaling_factor, fp8_options(n_group, topk_group, top_k, intermediate_terms),
        optional_tensor_arg(op, "workspace", workspace), tensor_arg(op, "output", output),
        stream_arg(stream));
  });
}

}  // extern "C"
