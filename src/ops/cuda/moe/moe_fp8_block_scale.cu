// moe_fp8_block_scale on CUDA: the MoE ops composed on one stream, in the caller's workspace.
//
//   moe_route_grouped   logits, bias -> topk_weights [T, k], topk_ids [T, k] (global ids)
//   to_local_ids        ids -> id - local_expert_offset, or E for an expert that is not local
//   moe_permute         the pairs grouped by local expert; E's bucket (the non-local pairs)
//                       lands past offsets[E] with pair_rows = -1
//   moe_gather_fp8      each pair's token row and scales, in expert order
//   moe_grouped_gemm_fp8 GEMM1, swiglu_gate_last: C = silu(X2) * X1 as `terms` fp8 terms
//   moe_grouped_gemm_fp8 GEMM2, none: O = C @ W2^T, fp32
//   moe_combine         output[t] = bf16(sum_j w_tj * O_tj), the non-local pairs skipped
//
// Everything stays on the device (the valid row count is offsets[E], read by the GEMMs there), so
// the call does no host synchronisation and can be captured in a CUDA graph; every step has a
// fixed reduction order, so results are deterministic. Rows past offsets[E] of the GEMM outputs
// are never written and never read (moe_combine skips pairs with pair_rows < 0).
#include "core/cuda_check.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/moe/moe_fp8_block_scale_layout.h"

namespace braid::cuda {

namespace {

// In place: a global id becomes its local index, or `experts` (moe_permute's bucket for ids
// outside [0, E)) when it is not one of this call's experts. The difference is taken in 64 bits so
// that no offset can overflow it.
__global__ void __launch_bounds__(256) to_local_ids_kernel(int32_t* ids, int64_t pairs,
                                                           int local_expert_offset, int experts) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pairs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t local = int64_t{ids[p]} - local_expert_offset;
    ids[p] = local >= 0 && local < experts ? static_cast<int32_t>(local) : experts;
  }
}

}  // namespace

void moe_fp8_block_scale(const Tensor& routing_logits, const Tensor& routing_bias,
                         const Tensor& hidden_states, const Tensor& hidden_states_scale,
                         const Tensor& gemm1_weights, const Tensor& gemm1_weights_scale,
                         const Tensor& gemm2_weights, const Tensor& gemm2_weights_scale,
                         int local_expert_offset, float routed_scaling_factor,
                         const ops::MoeFp8Options& options, const Tensor& workspace,
                         const Tensor& output, Stream stream) {
  const int64_t tokens = routing_logits.shape[0], hidden = hidden_states.shape[1];
  const int64_t experts = gemm1_weights.shape[0], inter = gemm1_weights.shape[1] / 2;
  const int k = options.top_k, terms = options.intermediate_terms;
  const auto l = ops::fp8_block_scale::layout(tokens, hidden, inter, experts, k, terms);
  const int64_t pairs = l.pairs;
  const Device dev = output.device;
  char* base = static_cast<char*>(workspace.data);
  auto piece = [&](int64_t offset, DType dtype, std::initializer_list<int64_t> shape) {
    return Tensor(base + offset, dtype, dev, shape);
  };
  // The transposed scales: [blocks, pairs] views of [blocks, scale_stride] storage, so that every
  // scale row starts on a 16-byte boundary.
  auto scales = [&](int64_t offset, int64_t blocks) {
    return piece(offset, DType::f32, {blocks, l.scale_stride}).slice(1, 0, pairs);
  };

  const Tensor topk_weights = piece(l.topk_weights, DType::f32, {tokens, k});
  const Tensor topk_ids = piece(l.topk_ids, DType::i32, {tokens, k});
  const Tensor offsets = piece(l.expert_offsets, DType::i32, {experts + 1});
  const Tensor sorted_pairs = piece(l.sorted_pairs, DType::i32, {pairs});
  const Tensor pair_rows = piece(l.pair_rows, DType::i32, {pairs});
  const Tensor permute_scratch = piece(l.permute_scratch, DType::i32,
                                       {ops::moe_permute_workspace_size(pairs, experts)});
  const Tensor xs = piece(l.xs, DType::f8e4m3, {pairs, hidden});
  const Tensor xs_scale = scales(l.xs_scale, hidden / ops::kFp8Block);
  const Tensor h = piece(l.h, DType::f8e4m3, {pairs, terms * inter});
  const Tensor h_scale = scales(l.h_scale, terms * inter / ops::kFp8Block);
  const Tensor ys = piece(l.ys, DType::f32, {pairs, hidden});

  ops::moe_route_grouped(routing_logits, routing_bias, options.n_group, options.topk_group, k,
                         routed_scaling_factor, topk_weights, topk_ids, stream);

  auto s = static_cast<cudaStream_t>(stream.handle);
  const int64_t blocks = (pairs + 255) / 256;
  to_local_ids_kernel<<<static_cast<unsigned>(blocks < 1024 ? blocks : 1024), 256, 0, s>>>(
      topk_ids.ptr<int32_t>(), pairs, local_expert_offset, static_cast<int>(experts));
  BRAID_CUDA_CHECK_LAUNCH();

  ops::moe_permute(topk_ids, static_cast<int>(experts), offsets, sorted_pairs, pair_rows,
                   permute_scratch, stream);
  ops::moe_gather_fp8(hidden_states, hidden_states_scale, sorted_pairs, k, xs, xs_scale, stream);
  ops::moe_grouped_gemm_fp8(xs, xs_scale, gemm1_weights, gemm1_weights_scale, offsets,
                            ops::MoeActivation::swiglu_gate_last, h, h_scale, stream);
  ops::moe_grouped_gemm_fp8(h, h_scale, gemm2_weights, gemm2_weights_scale, offsets,
                            ops::MoeActivation::none, ys, Tensor{}, stream);
  ops::moe_combine(ys, pair_rows, topk_weights, output, stream);
}

}  // namespace braid::cuda
