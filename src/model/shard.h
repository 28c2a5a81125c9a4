// Tensor parallelism as the model sees it (Megatron-style): which part of each checkpoint tensor a
// rank holds, and the config of that part. Column-parallel: q/k/v and gate/up (their output rows);
// row-parallel: o_proj and down (their input columns), each followed by one all-reduce in the
// forward; vocabulary-parallel: the embedding and the LM head (rows of the vocabulary). The
// routed experts split along their intermediate width like the dense MLP (no all-to-all); the
// router, the norms and o_proj's bias are whole on every rank. Multi-head latent attention
// (DeepSeek) splits its query heads (q_proj or q_b_proj, kv_b_proj, o_proj) and computes the
// latent whole on every rank; DeepSeek's shared experts split like the routed ones.
//
// Expert parallelism (TensorParallel::expert_parallel) is the other split of the routed experts
// over the same ranks: rank r holds whole experts [r E / N, (r + 1) E / N) and everything else is
// split as above (attention heads, dense MLPs, the shared experts along their width, the
// vocabulary). Every rank still holds every token after attention (its all-reduce), so there is
// no all-to-all: the "dispatch" is each rank keeping the (token, expert) pairs whose expert it
// holds (the router runs whole on every rank; ops::moe_local_expert_ids renumbers its choices),
// and the "combine" is the all-reduce that already follows the MoE layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace braid::model {

// One rank of a tensor-parallel group of `size` ranks.
struct TensorParallel {
  int rank = 0;
  int size = 1;
  bool expert_parallel = false;  // the routed experts divided whole over the ranks (above)
};

// The config of one rank's part: heads, KV heads, intermediate widths and vocabulary divided by
// the group size. KV heads are split when there are at least as many as ranks and replicated
// (one per rank, each rank the one its query heads read) when there are fewer. Throws
// ErrorKind::unsupported or invalid_argument, naming the field, for what does not split: heads
// not a multiple of the size, KV heads neither a multiple nor a divisor of it, widths or the
// vocabulary not multiples of it, and an fp8 checkpoint with 128 x 128 scale blocks whose split
// matrices would not split on block boundaries (each rank's rows or columns of q/k/v, o_proj,
// gate/up/down, the experts and MLA's q_b/kv_b must start on a multiple of 128 and end on one or
// at the matrix's end: every scale block belongs to one rank). With expert_parallel the routed
// experts are not cut: num_experts must be a multiple of the size (checked first), the config's
// expert_parallel is the size and moe_intermediate_size stays whole; expert parallelism on a
// model without routed experts is refused (invalid_argument, naming num_experts). With size 1 it
// is a no-op: one rank holds every expert either way.
ModelConfig shard_config(const ModelConfig& full, int size, bool expert_parallel = false);

// The part of a checkpoint tensor one rank holds: rows (dim 0) or columns (dim 1) [begin, end),
// or the whole tensor (dim -1).
struct TensorSlice {
  int dim = -1;
  int64_t begin = 0, end = 0;
};

// The slice of Hugging Face tensor `name` (of the model `full`) that rank tp.rank holds. An fp8
// weight's scales ("<weight>_scale_inv" blocks, "<weight>_scale" rows) split with the weight.
TensorSlice tensor_slice(const std::string& name, const ModelConfig& full, TensorParallel tp);

// The KV heads [first, first + count) rank tp.rank holds.
struct HeadRange {
  int first = 0, count = 0;
};
HeadRange kv_heads_of(const ModelConfig& full, TensorParallel tp);

// The routed experts [first, first + count) rank tp.rank holds: all of them without expert
// parallelism, num_experts / size of them with it.
struct ExpertRange {
  int first = 0, count = 0;
};
ExpertRange experts_of(const ModelConfig& full, TensorParallel tp);

}  // namespace braid::model
