#include "ops/moe/moe_check.h"

#include <cmath>
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

void router_groups(const char* op, int64_t experts, int n_group, int topk_group, int k,
                   const char* k_arg, float routed_scaling_factor) {
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
    check::fail(ErrorKind::invalid_argument, op, k_arg,
                std::string(k_arg) + " between 1 and min(" + std::to_string(kMoeMaxTopK) +
                    ", topk_group * experts / n_group) = " + std::to_string(max_k),
                std::to_string(k));
  if (!std::isfinite(routed_scaling_factor))
    check::fail(ErrorKind::invalid_argument, op, "routed_scaling_factor", "a finite number",
                std::to_string(routed_scaling_factor));
}

void expert_offsets_values(const char* op, const Tensor& offsets, int64_t experts, int64_t m) {
  const int32_t* o = offsets.ptr<int32_t>();
  auto bad = [&](const std::string& expected, int64_t i) {
    check::fail(ErrorKind::invalid_argument, op, "expert_offsets", expected,
                "expert_offsets[" + std::to_string(i) + "] = " + std::to_string(o[i]));
  };
  if (o[0] < 0) bad("offsets[0] >= 0", 0);
  for (int64_t e = 0; e < experts; ++e)
    if (o[e + 1] < o[e]) bad("non-decreasing offsets", e + 1);
  if (o[experts] > m) bad("offsets[E] <= " + std::to_string(m) + " (the rows of x)", experts);
}

void fp8_scales(const char* op, const char* arg, const Tensor& scales, int64_t blocks,
                int64_t rows) {
  check::defined(op, arg, scales);
  check::dtype_eq(op, arg, scales, DType::f32);
  check::shape_eq(op, arg, scales, {blocks, rows});
  check::rows(op, arg, scales);
  if (blocks > 1 && scales.strides[0] < rows)
    check::fail(ErrorKind::shape, op, arg, "a row stride >= " + std::to_string(rows),
                "row stride " + std::to_string(scales.strides[0]));
}

int64_t fp8_terms(const char* op, const char* arg, const Tensor& t, int64_t k,
                  const std::string& k_meaning) {
  check::defined(op, arg, t);
  check::dtype_eq(op, arg, t, DType::f8e4m3);
  check::ndim_eq(op, arg, t, 2);
  check::rows(op, arg, t);
  const int64_t width = t.shape[1];
  if (k < 1 || width % k != 0 || width / k < 1 || width / k > kFp8MaxTerms)
    check::fail(ErrorKind::shape, op, arg,
                "[rows, terms * " + std::to_string(k) + "] (" + k_meaning + ") with 1 <= terms <= " +
                    std::to_string(kFp8MaxTerms),
                shape_string(t));
  return width / k;
}

}  // namespace braid::ops::moe_check
