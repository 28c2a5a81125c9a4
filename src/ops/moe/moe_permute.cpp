// The MoE permutation ops (moe_permute, moe_gather, moe_combine) and expert parallelism's
// renumbering (moe_local_expert_ids): argument checks and dispatch.
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

namespace {

// The CPU can read the values; CUDA trusts them (checking would need a host synchronisation).
void check_index_range(const char* op, const char* arg, const Tensor& t, int64_t lo, int64_t hi) {
  const int32_t* v = t.ptr<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (v[i] < lo || v[i] >= hi)
      check::fail(ErrorKind::invalid_argument, op, arg,
                  "values in [" + std::to_string(lo) + ", " + std::to_string(hi) + ")",
                  arg + std::string("[") + std::to_string(i) + "] = " + std::to_string(v[i]));
}

// Expert ids: [0, E), or kMoeNotLocal (another rank's expert under expert parallelism).
void check_expert_ids(const char* op, const Tensor& t, int64_t experts) {
  const int32_t* v = t.ptr<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (v[i] != kMoeNotLocal && (v[i] < 0 || v[i] >= experts))
      check::fail(ErrorKind::invalid_argument, op, "topk_ids",
                  "values in [0, " + std::to_string(experts) + ") or kMoeNotLocal (-1)",
                  "topk_ids[" + std::to_string(i) + "] = " + std::to_string(v[i]));
}

void check_i32_vector(const char* op, const char* arg, const Tensor& t, int64_t n) {
  check::defined(op, arg, t);
  check::dtype_eq(op, arg, t, DType::i32);
  check::shape_eq(op, arg, t, {n});
  check::contiguous(op, arg, t);
}

}  // namespace

int64_t moe_permute_workspace_size(int64_t pairs, int64_t num_experts) {
  // Per chunk of pairs: the chunk's count for every expert and for the invalid-id bucket.
  const int64_t chunks = (pairs + moe_check::kPermuteChunk - 1) / moe_check::kPermuteChunk;
  return (chunks > 0 ? chunks : 1) * (num_experts + 1);
}

void moe_permute(const Tensor& topk_ids, int num_experts, const Tensor& expert_offsets,
                 const Tensor& sorted_pairs, const Tensor& pair_rows, const Tensor& workspace,
                 Stream stream) {
  const char* op = "moe_permute";
  check::defined(op, "topk_ids", topk_ids);
  check::dtype_eq(op, "topk_ids", topk_ids, DType::i32);
  check::ndim_eq(op, "topk_ids", topk_ids, 2);
  check::contiguous(op, "topk_ids", topk_ids);
  if (num_experts < 1 || num_experts > kMoeMaxExperts)
    check::fail(ErrorKind::invalid_argument, op, "num_experts",
                "between 1 and " + std::to_string(kMoeMaxExperts), std::to_string(num_experts));
  const int64_t pairs = topk_ids.numel();
  check_i32_vector(op, "expert_offsets", expert_offsets, int64_t{num_experts} + 1);
  check_i32_vector(op, "sorted_pairs", sorted_pairs, pairs);
  check_i32_vector(op, "pair_rows", pair_rows, pairs);
  check::defined(op, "workspace", workspace);
  check::dtype_eq(op, "workspace", workspace, DType::i32);
  check::contiguous(op, "workspace", workspace);
  const int64_t need = moe_permute_workspace_size(pairs, num_experts);
  if (workspace.numel() < need)
    check::fail(ErrorKind::shape, op, "workspace",
                "at least moe_permute_workspace_size(" + std::to_string(pairs) + ", " +
                    std::to_string(num_experts) + ") = " + std::to_string(need) + " elements",
                shape_string(workspace));
  if (pairs > INT32_MAX)
    check::fail(ErrorKind::unsupported, op, "topk_ids", "at most 2^31 - 1 pairs",
                shape_string(topk_ids));
  Device dev = check::same_device(op, {{"topk_ids", &topk_ids},
                                       {"expert_offsets", &expert_offsets},
                                       {"sorted_pairs", &sorted_pairs},
                                       {"pair_rows", &pair_rows},
                                       {"workspace", &workspace}});
  if (dev.is_cpu()) {
    check_expert_ids(op, topk_ids, num_experts);
    return cpu::moe_permute(topk_ids, num_experts, expert_offsets, sorted_pairs, pair_rows);
  }
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_permute(topk_ids, num_experts, expert_offsets, sorted_pairs, pair_rows, workspace, stream);
#else
  (void)stream;
#endif
}

void moe_local_expert_ids(const Tensor& topk_ids, int first, int count, const Tensor& local_ids,
                          Stream stream) {
  const char* op = "moe_local_expert_ids";
  check::defined(op, "topk_ids", topk_ids);
  check::dtype_eq(op, "topk_ids", topk_ids, DType::i32);
  check::ndim_eq(op, "topk_ids", topk_ids, 2);
  check::contiguous(op, "topk_ids", topk_ids);
  if (first < 0) check::fail(ErrorKind::invalid_argument, op, "first", ">= 0", std::to_string(first));
  if (count < 1) check::fail(ErrorKind::invalid_argument, op, "count", ">= 1", std::to_string(count));
  check::defined(op, "local_ids", local_ids);
  check::dtype_eq(op, "local_ids", local_ids, DType::i32);
  check::same_shape(op, "local_ids", local_ids, topk_ids);
  check::contiguous(op, "local_ids", local_ids);
  Device dev = check::same_device(op, {{"topk_ids", &topk_ids}, {"local_ids", &local_ids}});
  if (dev.is_cpu()) return cpu::moe_local_expert_ids(topk_ids, first, count, local_ids);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_local_expert_ids(topk_ids, first, count, local_ids, stream);
#else
  (void)stream;
#endif
}

void moe_gather(const Tensor& x, const Tensor& sorted_pairs, int k, const Tensor& xs, Stream stream) {
  const char* op = "moe_gather";
  check::defined(op, "x", x);
  check::dtype_in(op, "x", x, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(op, "x", x, 2);
  check::rows(op, "x", x);
  if (k < 1) check::fail(ErrorKind::invalid_argument, op, "k", "k >= 1", std::to_string(k));
  const int64_t pairs = x.shape[0] * k;
  check_i32_vector(op, "sorted_pairs", sorted_pairs, pairs);
  check::defined(op, "xs", xs);
  check::dtype_eq(op, "xs", xs, x.dtype);
  check::shape_eq(op, "xs", xs, {pairs, x.shape[1]});
  check::rows(op, "xs", xs);
  Device dev = check::same_device(op, {{"x", &x}, {"sorted_pairs", &sorted_pairs}, {"xs", &xs}});
  if (xs.numel() == 0) return;
  if (dev.is_cpu()) {
    check_index_range(op, "sorted_pairs", sorted_pairs, 0, pairs);
    return cpu::moe_gather(x, sorted_pairs, k, xs);
  }
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_gather(x, sorted_pairs, k, xs, stream);
#else
  (void)stream;
#endif
}

void moe_combine(const Tensor& ys, const Tensor& pair_rows, const Tensor& topk_weights,
                 const Tensor& out, Stream stream) {
  const char* op = "moe_combine";
  check::defined(op, "topk_weights", topk_weights);
  check::dtype_eq(op, "topk_weights", topk_weights, DType::f32);
  check::ndim_eq(op, "topk_weights", topk_weights, 2);
  check::contiguous(op, "topk_weights", topk_weights);
  const int64_t tokens = topk_weights.shape[0], pairs = topk_weights.numel();
  check::defined(op, "ys", ys);
  check::dtype_in(op, "ys", ys, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(op, "ys", ys, 2);
  check::dim_eq(op, "ys", ys, 0, pairs, "tokens * k rows, as topk_weights holds");
  check::rows(op, "ys", ys);
  check_i32_vector(op, "pair_rows", pair_rows, pairs);
  check::defined(op, "out", out);
  check::dtype_in(op, "out", out, {DType::f32, DType::f16, DType::bf16});
  check::shape_eq(op, "out", out, {tokens, ys.shape[1]});
  check::rows(op, "out", out);
  Device dev = check::same_device(
      op, {{"ys", &ys}, {"pair_rows", &pair_rows}, {"topk_weights", &topk_weights}, {"out", &out}});
  if (out.numel() == 0) return;
  if (dev.is_cpu()) {
    check_index_range(op, "pair_rows", pair_rows, -1, pairs);
    return cpu::moe_combine(ys, pair_rows, topk_weights, out);
  }
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::moe_combine(ys, pair_rows, topk_weights, out, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
