// C wrappers: the grouped routers, moe_route_grouped (DeepSeek-V3's sigmoid one) and
// moe_route_softmax_grouped (DeepSeek-V2's softmax one).
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

extern "C" {

braid_status braid_moe_route_grouped(const braid_tensor* logits, const braid_tensor* bias,
                                     int n_group, int topk_group, int k,
                                     float routed_scaling_factor,
                                     const braid_tensor* topk_weights,
                                     const braid_tensor* topk_ids, void* stream) {
  const char* op = "moe_route_grouped";
  return guarded(op, [&] {
    braid::ops::moe_route_grouped(tensor_arg(op, "logits", logits), tensor_arg(op, "bias", bias),
                                  n_group, topk_group, k, routed_scaling_factor,
                                  tensor_arg(op, "topk_weights", topk_weights),
                                  tensor_arg(op, "topk_ids", topk_ids), stream_arg(stream));
  });
}

braid_status braid_moe_route_softmax_grouped(const braid_tensor* logits, int n_group,
                                             int topk_group, int k, int renormalize,
                                             float routed_scaling_factor,
                                             const braid_tensor* topk_weights,
                                             const braid_tensor* topk_ids, void* stream) {
  const char* op = "moe_route_softmax_grouped";
  return guarded(op, [&] {
    braid::ops::moe_route_softmax_grouped(tensor_arg(op, "logits", logits), n_group, topk_group,
                                          k, renormalize != 0, routed_scaling_factor,
                                          tensor_arg(op, "topk_weights", topk_weights),
                                          tensor_arg(op, "topk_ids", topk_ids),
                                          stream_arg(stream));
  });
}

}  // extern "C"
