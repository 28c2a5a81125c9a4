#include "ops/moe_check.h"

#include <string>

#include "braid/ops.h"
#include "ops/check.h"

namespace braid::ops::moe_check {

int64_t router_logits(const char* op, const Tensor& logits) {
  check::dtype_in(op, "logits", logits, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(op, "logits", logits, 2);
  check::rows(op, "logits", logits);
  const int64_t experts = logits.shape[1];
  if (experts < 1 || experts > kMoeMaxExperts)
    check::fail(ErrorKind::shape, op, "logits",
                "between 1 and " + std::to_string(kMoeMaxExperts) + " experts in dimension 1",
                shape_string(logits));
  return experts;
}

void router_outputs(const char* op, int64_t tokens, int k, const Tensor& topk_weights,
                    const Tensor& topk_ids) {
  check::dtype_eq(op, "topk_weights", topk_weights, DType::f32);
  check::shape_eq(op, "topk_weights", topk_weights, {tokens, k});
  check::contiguous(op, "topk_weights", topk_weights);
  check::dtype_eq(op, "topk_ids", topk_ids, DType::i32);
  check::shape_eq(op, "topk_ids", topk_ids, {tokens, k});
  check::contiguous(op, "topk_ids", topk_ids);
}

}  // namespace braid::ops::moe_check
