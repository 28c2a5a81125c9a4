// C wrappers: the FP8 block-scale MoE ops (moe_fp8_quantize, moe_gather_fp8,
// moe_grouped_gemm_fp8).
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

extern "C" {

braid_status braid_moe_fp8_quantize(const braid_tensor* x, const braid_tensor* q,
                                    const braid_tensor* q_scale, void* stream) {
  const char* op = "moe_fp8_quantize";
  return guarded(op, [&] {
    braid::ops::moe_fp8_quantize(tensor_arg(op, "x", x), tensor_arg(op, "q", q),
                                 tensor_arg(op, "q_scale", q_scale), stream_arg(stream));
  });
}

braid_status braid_moe_gather_fp8(const braid_tensor* x, const braid_tensor* x_scale,
                                  const braid_tensor* sorted_pairs, int k, const braid_tensor* xs,
                                  const braid_tensor* xs_scale, void* stream) {
  const char* op = "moe_gather_fp8";
  return guarded(op, [&] {
    braid::ops::moe_gather_fp8(tensor_arg(op, "x", x), tensor_arg(op, "x_scale", x_scale),
                               tensor_arg(op, "sorted_pairs", sorted_pairs), k,
                               tensor_arg(op, "xs", xs), tensor_arg(op, "xs_scale", xs_scale),
                               stream_arg(stream));
  });
}

braid_status braid_moe_grouped_gemm_fp8(const braid_tensor* x, const braid_tensor* x_scale,
                                        const braid_tensor* w, const braid_tensor* w_scale,
                                        const braid_tensor* expert_offsets, int activation,
                                        const braid_tensor* y, const braid_tensor* y_scale,
                                        void* stream) {
  const char* op = "moe_grouped_gemm_fp8";
  return guarded(op, [&] {
    braid::ops::moe_grouped_gemm_fp8(
        tensor_arg(op, "x", x), tensor_arg(op, "x_scale", x_scale), tensor_arg(op, "w", w),
        tensor_arg(op, "w_scale", w_scale), tensor_arg(op, "expert_offsets", expert_offsets),
        static_cast<braid::ops::MoeActivation>(activation), tensor_arg(op, "y", y),
        optional_tensor_arg(op, "y_scale", y_scale), stream_arg(stream));
  });
}

}  // extern "C"
