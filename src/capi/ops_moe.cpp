// C wrappers: moe_route_topk_softmax, moe_experts.
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

}  // extern "C"
