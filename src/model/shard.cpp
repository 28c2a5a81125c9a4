// Tensor-parallel shards of a model: per-rank config and the slice of each checkpoint tensor.
#include "model/shard.h"

#include <algorithm>
#include <string>

#include "braid/error.h"

namespace braid::model {

namespace {

[[noreturn]] void refuse(ErrorKind kind, const std::string& what) {
  throw Error(kind, "tensor parallelism: " + what);
}

void divisible(const char* field, int64_t value, int size) {
  if (value % size != 0)
    refuse(ErrorKind::invalid_argument, std::string(field) + " " + std::to_string(value) +
                                            " is not a multiple of --tensor-parallel " +
                                            std::to_string(size));
}

// The first layer with (moe) or without routed experts, -1 if none.
int first_layer(const ModelConfig& c, bool moe) {
  for (int l = 0; l < c.num_layers; ++l)
    if (c.layer_is_moe(l) == moe) return l;
  return -1;
}

bool any_dense_layer(const ModelConfig& c) { return first_layer(c, false) >= 0; }

// An fp8 checkpoint with 128 x 128 scale blocks can only be split on block boundaries: a rank's
// rows (or columns) of a split matrix must start on one and end on one or at the matrix's end, so
// that its scales are whole blocks of the checkpoint's. Checked with the slices the loader will
// take (tensor_slice) for every rank and every kind of split fp8 matrix the model has; the error
// names the tensor, the rank's part and what to change.
void every_fp8_slice_holds_whole_blocks(const ModelConfig& full, int size, bool expert_parallel) {
  // Layer l's prefix; the MLP names are those of the first layer of their kind.
  auto layer = [](int l) { return "model.layers." + std::to_string(l) + "."; };
  const std::string a = layer(0) + "self_attn.";
  std::vector<std::pair<std::string, int64_t>> split;  // name, the length of its split dimension
  if (full.mla()) {
    const int64_t heads = full.num_heads;
    split.push_back({a + (full.q_lora_rank > 0 ? "q_b_proj.weight" : "q_proj.weight"),
                     heads * full.mla_q_head_dim()});
    split.push_back({a + "kv_b_proj.weight", heads * (full.qk_nope_head_dim + full.v_head_dim)});
    split.push_back({a + "o_proj.weight", heads * full.v_head_dim});
  } else {
    split.push_back({a + "q_proj.weight", int64_t{full.num_heads} * full.head_dim});
    split.push_back({a + "k_proj.weight", int64_t{full.num_kv_heads} * full.head_dim});
    split.push_back({a + "v_proj.weight", int64_t{full.num_kv_heads} * full.head_dim});
    split.push_back({a + "o_proj.weight", int64_t{full.num_heads} * full.head_dim});
  }
  if (const int l = first_layer(full, false); l >= 0) {
    split.push_back({layer(l) + "mlp.gate_proj.weight", full.intermediate_size});
    split.push_back({layer(l) + "mlp.down_proj.weight", full.intermediate_size});
  }
  const std::string moe = layer(std::max(first_layer(full, true), 0));  // (used only with experts)
  if (full.num_experts > 0 && !expert_parallel) {
    const bool mixtral = full.arch == Arch::mixtral;
    const std::string expert = moe + (mixtral ? "block_sparse_moe.experts.0." : "mlp.experts.0.");
    const int64_t width = full.moe_intermediate_size;
    split.push_back({expert + (mixtral ? "w1.weight" : "gate_proj.weight"), width});
    split.push_back({expert + (mixtral ? "w2.weight" : "down_proj.weight"), width});
  }
  if (full.n_shared_experts > 0) {
    const int64_t width = int64_t{full.moe_intermediate_size} * full.n_shared_experts;
    split.push_back({moe + "mlp.shared_experts.gate_proj.weight", width});
    split.push_back({moe + "mlp.shared_experts.down_proj.weight", width});
  }
  for (const auto& [name, whole] : split)
    for (int r = 0; r < size; ++r) {
      const TensorSlice s = tensor_slice(name, full, {r, size, expert_parallel});
      if (s.dim < 0) continue;
      if (s.begin % 128 == 0 && (s.end % 128 == 0 || s.end == whole)) continue;
      refuse(ErrorKind::invalid_argument,
             "fp8 tensor '" + name + "' and those like it: rank " + std::to_string(r) + " of " +
                 std::to_string(size) + " would hold their " +
                 (s.dim == 0 ? "rows [" : "columns [") + std::to_string(s.begin) + ", " +
                 std::to_string(s.end) + "), which do not fall on the checkpoint's 128 x 128 "
                 "scale blocks; split this fp8 checkpoint over fewer ranks" +
                 (name.find(".experts.") != std::string::npos
                      ? std::string(", or hold whole experts on each rank (--expert-parallel)")
                      : std::string()));
    }
}

}  // namespace

ModelConfig shard_config(const ModelConfig& full, int size, bool expert_parallel) {
  if (size < 1) refuse(ErrorKind::invalid_argument, "the group size must be at least 1");
  if (expert_parallel && full.num_experts == 0)
    throw Error(ErrorKind::invalid_argument,
                "expert parallelism: the model has no routed experts (num_experts 0); "
                "--expert-parallel takes a mixture-of-experts model");
  if (size == 1) return full;
  if (expert_parallel && full.num_experts % size != 0)
    throw Error(ErrorKind::invalid_argument,
                "expert parallelism: num_experts " + std::to_string(full.num_experts) +
                    " is not a multiple of --tensor-parallel " + std::to_string(size) +
                    " (each rank holds whole experts)");
  divisible("num_attention_heads", full.num_heads, size);
  if (full.num_kv_heads >= size)
    divisible("num_key_value_heads", full.num_kv_heads, size);
  else if (size % full.num_kv_heads != 0)
    refuse(ErrorKind::invalid_argument,
           "num_key_value_heads " + std::to_string(full.num_kv_heads) +
               " neither divides nor is a multiple of --tensor-parallel " + std::to_string(size));
  if (any_dense_layer(full)) divisible("intermediate_size", full.intermediate_size, size);
  // The routed experts split along their width (tensor parallelism) or not at all (expert
  // parallelism); DeepSeek's shared experts along their width either way.
  if (full.num_experts > 0 && !expert_parallel)
    divisible("moe_intermediate_size", full.moe_intermediate_size, size);
  if (full.n_shared_experts > 0)
    divisible("the shared experts' width (moe_intermediate_size x n_shared_experts)",
              int64_t{full.moe_intermediate_size} * full.n_shared_experts, size);
  divisible("vocab_size", full.vocab_size, size);

  ModelConfig c = full;
  c.num_heads = full.num_heads / size;
  c.num_kv_heads = full.num_kv_heads >= size ? full.num_kv_heads / size : 1;
  c.intermediate_size = full.intermediate_size / size;
  if (expert_parallel)
    c.expert_parallel = size;
  else
    c.moe_intermediate_size = full.moe_intermediate_size / size;
  c.vocab_size = full.vocab_size / size;
  if (full.weights == WeightFormat::fp8_blocks)
    every_fp8_slice_holds_whole_blocks(full, size, expert_parallel);
  return c;
}

ExpertRange experts_of(const ModelConfig& full, TensorParallel tp) {
  if (!tp.expert_parallel || tp.size == 1) return {0, full.num_experts};
  const int per = full.num_experts / tp.size;
  return {tp.rank * per, per};
}

HeadRange kv_heads_of(const ModelConfig& full, TensorParallel tp) {
  if (full.num_kv_heads >= tp.size) {
    const int per = full.num_kv_heads / tp.size;
    return {tp.rank * per, per};
  }
  // Fewer KV heads than ranks: rank r's query heads all read KV head r * kv / size.
  return {tp.rank * full.num_kv_heads / tp.size, 1};
}

TensorSlice tensor_slice(const std::string& name, const ModelConfig& full, TensorParallel tp) {
  if (tp.size == 1) return {};
  // An fp8 weight's scales split with it: 128 x 128 blocks by whole blocks (shard_config keeps
  // every split on block boundaries), per-row scales ([rows, 1]) by row and whole where the
  // weight's columns split.
  const bool blocks = full.weights == WeightFormat::fp8_blocks;
  const std::string& suffix = full.fp8_scale_suffix;
  if (full.weights != WeightFormat::dense && name.ends_with(suffix)) {
    const TensorSlice w = tensor_slice(name.substr(0, name.size() - suffix.size()), full, tp);
    if (w.dim < 0) return w;
    if (blocks) return {w.dim, w.begin / 128, (w.end + 127) / 128};
    return w.dim == 0 ? w : TensorSlice{};
  }
  auto ends = [&](const char* suffix) { return name.ends_with(suffix); };
  auto part = [&](int dim, int64_t whole) {
    const int64_t per = whole / tp.size;
    return TensorSlice{dim, tp.rank * per, (tp.rank + 1) * per};
  };
  // DeepSeek's shared experts are one MLP n_shared_experts x moe_intermediate_size wide.
  const bool shared = name.find(".shared_experts.") != std::string::npos;
  const bool expert = name.find(".experts.") != std::string::npos;
  const int64_t inter = shared   ? int64_t{full.moe_intermediate_size} * full.n_shared_experts
                        : expert ? full.moe_intermediate_size
                                 : full.intermediate_size;
  const int64_t hd = full.head_dim;
  if (full.mla()) {
    // Multi-head latent attention: the query heads and their parts of kv_b_proj and o_proj split;
    // the latent (q_a_proj, kv_a_proj_with_mqa, their norms) is computed whole on every rank, and
    // every rank's cache holds it.
    const int64_t heads = full.num_heads;
    if (ends(".self_attn.q_proj.weight") || ends(".self_attn.q_b_proj.weight"))
      return part(0, heads * full.mla_q_head_dim());
    if (ends(".self_attn.kv_b_proj.weight"))
      return part(0, heads * (full.qk_nope_head_dim + full.v_head_dim));
    if (ends(".self_attn.o_proj.weight")) return part(1, heads * full.v_head_dim);
  }

  if (name == "model.embed_tokens.weight" || name == "lm_head.weight")
    return part(0, full.vocab_size);
  if (ends(".self_attn.q_proj.weight") || ends(".self_attn.q_proj.bias"))
    return part(0, int64_t{full.num_heads} * hd);
  if (ends(".self_attn.k_proj.weight") || ends(".self_attn.k_proj.bias") ||
      ends(".self_attn.v_proj.weight") || ends(".self_attn.v_proj.bias")) {
    const HeadRange kv = kv_heads_of(full, tp);
    return {0, kv.first * hd, (kv.first + kv.count) * hd};
  }
  if (ends(".self_attn.o_proj.weight")) return part(1, int64_t{full.num_heads} * hd);
  // Expert parallelism: a rank's routed experts are whole (it reads only its own, Builder::experts).
  if (expert && tp.expert_parallel) return {};
  // Dense MLPs and experts (Qwen3-MoE's gate/up/down_proj, Mixtral's w1/w3/w2).
  if (ends(".gate_proj.weight") || ends(".up_proj.weight") || ends(".w1.weight") ||
      ends(".w3.weight"))
    return part(0, inter);
  if (ends(".down_proj.weight") || ends(".w2.weight")) return part(1, inter);
  return {};  // norms, routers, o_proj's bias: whole on every rank
}

}  // namespace braid::model
