// Model configuration from a Hugging Face folder (config.json, generation_config.json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/dtype.h"
#include "braid/ops.h"

namespace braid::model {

enum class Arch { llama, qwen2, qwen3, qwen3_moe, mixtral, deepseek_v2, deepseek_v3 };

// Loader limits: a config past one of these is refused while it is parsed, before anything is
// sized from it, with the field named. Each is far above any released model (vocabularies reach
// 262144, depth 126 layers, hidden 16384, q width 16384, context 10M), and together they keep
// every size the engine derives from a config (per-token widths in int, tensor sizes in int64)
// from overflowing, so a hostile config.json cannot make the loader allocate or index wildly.
inline constexpr int kMaxVocab = 1 << 24;             // vocab_size
inline constexpr int kMaxHiddenSize = 1 << 17;        // hidden_size
inline constexpr int kMaxIntermediateSize = 1 << 20;  // intermediate_size, moe_intermediate_size
inline constexpr int kMaxLayers = 4096;               // num_hidden_layers
inline constexpr int kMaxHeads = 4096;                // num_attention_heads, num_key_value_heads
inline constexpr int kMaxHeadDim = 4096;              // head_dim
inline constexpr int kMaxQDim = 1 << 18;              // num_attention_heads x head_dim
inline constexpr int kMaxPositions = 1 << 26;         // max_position_embeddings (and rope's)
inline constexpr int kMaxExperts = 1 << 14;           // num_experts / num_local_experts

// "LlamaForCausalLM", ... : the names config.json's "architectures" uses.
std::string_view arch_name(Arch a);
// Lists the supported architecture names, for error messages.
std::string supported_architectures();

// How the checkpoint's linear layers (attention and MLP projections, experts) are stored. The
// embeddings, norms, routers and the LM head stay 16-bit in every format.
enum class WeightFormat {
  dense,            // the checkpoint's dtype
  fp8_blocks,       // quantization_config.quant_method "fp8", weight_block_size [128, 128]:
                    // float8_e4m3fn weights, "<name>_scale_inv" f32 per 128 x 128 block (the
                    // same as compressed-tensors' "block" strategy, whose scales are "<name>_scale")
  fp8_per_channel,  // compressed-tensors float-quantized: float8_e4m3fn weights,
                    // "<name>_scale" f32 per output row ([n, 1]), or one per matrix
                    // (ModelConfig::fp8_scale_per_tensor), which the loader copies to every row
};
std::string_view weight_format_name(WeightFormat f);

struct ModelConfig {
  Arch arch = Arch::llama;
  WeightFormat weights = WeightFormat::dense;
  // fp8_per_channel checkpoints whose weight_scale is one value per matrix (compressed-tensors
  // "strategy": "tensor", shape [] or [1]): loaded as that value on every row.
  bool fp8_scale_per_tensor = false;
  // What an fp8 weight's name takes for its scales' name: "_scale_inv" (quant_method fp8, and
  // --quantize fp8's computed scales) or "_scale" (compressed-tensors, every layout).
  std::string fp8_scale_suffix = "_scale_inv";
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;   // dense MLP
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;            // explicit in Qwen3; else hidden_size / num_heads
  float rms_norm_eps = 1e-6f;
  int max_position_embeddings = 0;
  ops::RopeConfig rope;        // theta and scaling (llama3 / yarn), rotary_dim = head_dim
  bool tie_word_embeddings = false;
  bool qkv_bias = false;       // Qwen2; Llama's attention_bias (then o_proj has a bias too)
  bool o_bias = false;         // Llama's attention_bias
  bool qk_norm = false;        // Qwen3, Qwen3-MoE: per-head RMSNorm on q and k before RoPE
  DType dtype = DType::bf16;   // torch_dtype / dtype of the checkpoint (parsing: absent -> f32)

  // Mixture of experts (Qwen3-MoE, Mixtral); num_experts == 0 for dense models.
  int num_experts = 0;
  int experts_per_token = 0;
  int moe_intermediate_size = 0;  // Mixtral: intermediate_size
  bool norm_topk_prob = true;     // renormalise the k routing weights (Mixtral: always)
  int decoder_sparse_step = 1;    // Qwen3-MoE: layer l is MoE if (l + 1) % step == 0 ...
  std::vector<int> mlp_only_layers;  // ... and l is not listed here
  // Expert parallelism (model/shard.h): the routed experts divided whole over this many ranks,
  // each holding held_experts() of them; the router still chooses among all num_experts. 1 in a
  // checkpoint's config and with tensor parallelism alone.
  int expert_parallel = 1;

  // How a MoE layer's router chooses (DeepSeek's topk_method / scoring_func).
  enum class Router {
    softmax_topk,     // Qwen3-MoE, Mixtral: ops::moe_route_topk_softmax
    softmax_grouped,  // DeepSeek-V2 greedy (one group) or group_limited_greedy:
                      // ops::moe_route_softmax_grouped
    sigmoid_grouped,  // DeepSeek-V3 noaux_tc, sigmoid scores + e_score_correction_bias:
                      // ops::moe_route_grouped
  };
  Router router = Router::softmax_topk;
  int n_group = 1, topk_group = 1;
  float routed_scaling_factor = 1.0f;
  // DeepSeek: n_shared_experts always-on experts (one MLP moe_intermediate_size x n wide) beside
  // the routed ones; layer l is MoE if l >= first_k_dense_replace and l % moe_layer_freq == 0.
  int n_shared_experts = 0;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;

  // DeepSeek-V2/V3 multi-head latent attention (kv_lora_rank > 0). q is q_proj(x), or with
  // q_lora_rank > 0 q_b_proj(RMSNorm(q_a_proj(x))), [heads, qk_nope_head_dim + qk_rope_head_dim];
  // kv_a_proj_with_mqa(x) gives the latent (kv_lora_rank, RMSNorm'd) and one rope key
  // (qk_rope_head_dim) shared by all heads: the cache holds those two per token; kv_b_proj
  // expands the latent to per-head k_nope (qk_nope_head_dim) and v (v_head_dim). head_dim is
  // then qk_rope_head_dim (the rotary width), num_kv_heads 1. DeepSeek-OCR's language model
  // (use_mla false) has plain multi-head attention instead: kv_lora_rank 0.
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  // (MLA rotates adjacent pairs: rope.interleaved, DeepSeek-V2 always, V3 unless rope_interleave
  // is false.)
  float softmax_scale = 0.0f;  // 0: 1 / sqrt(head_dim); DeepSeek: qk head dim^-0.5 x YaRN mscale^2

  // What a user should know about how the folder was read (e.g. parts not loaded), one line each.
  std::vector<std::string> notes;

  // Token ids (generation_config.json wins over config.json). eos may hold several ids.
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;

  bool layer_is_moe(int layer) const;
  // The routed experts are fp8 with 128 x 128 block scales (DeepSeek-V3, Qwen3-*-FP8; a
  // per-channel checkpoint's experts are requantized to blocks at load, load_weights): they run
  // on the fp8 grouped GEMM (moe_grouped_gemm_fp8) and moe_experts. The router stays 16-bit.
  bool fp8_experts() const { return num_experts > 0 && weights != WeightFormat::dense; }
  // The routed experts this config's weights hold (all of them without expert parallelism), and
  // the width of DeepSeek's shared experts' MLP they hold (split along it over the ranks).
  int held_experts() const { return num_experts / expert_parallel; }
  int64_t shared_experts_width() const {
    return int64_t{moe_intermediate_size} * n_shared_experts / expert_parallel;
  }
  bool mla() const { return kv_lora_rank > 0; }
  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  float attention_scale() const;
  // MLA widths: a query head (nope + rope), the cached row per token (latent + rope key), the
  // first projection's output (q or q_a, then the latent and the rope key).
  int mla_q_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int mla_cache_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  int mla_first_proj_dim() const {
    return (q_lora_rank > 0 ? q_lora_rank : num_heads * mla_q_head_dim()) + mla_cache_dim();
  }
  // The KV cache per layer and token: heads x key width and heads x value width (0: keys only).
  int cache_heads() const { return mla() ? 1 : num_kv_heads; }
  int cache_key_dim() const { return mla() ? mla_cache_dim() : head_dim; }
  int cache_value_dim() const { return mla() ? 0 : head_dim; }
};

// Parses config.json (and generation_config.json when present) in `dir`. Accepts the spellings
// of transformers 4 and 5 (rope_theta/rope_scaling and rope_parameters; num_experts and
// num_local_experts; torch_dtype and dtype). The architecture is "architectures"[0], else
// "model_type". Required: vocab_size, hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads (and for MoE the expert count, num_experts_per_tok and, for Qwen3-MoE,
// moe_intermediate_size); everything else takes the transformers default of its family (dtype
// absent: float32; rope_theta 10000, Mixtral 1e6). YaRN without a factor uses
// max_position_embeddings / original_max_position_embeddings (transformers 5).
// Throws braid::Error naming the file and the field: ErrorKind::io for a missing file or broken
// JSON, invalid_argument for a missing or out-of-range value, unsupported for an architecture,
// rope type, activation, dtype, sliding window or quantization this engine does not run
// (quantization_config: "fp8" with 128 x 128 blocks and dynamic activations, or
// compressed-tensors float 8-bit weights with a scale per 128 x 128 block, per channel or per
// tensor; their static activation scales and kv_cache_scheme, if any, are not used, and a note
// says so).
ModelConfig load_config(const std::string& dir);
// The same from JSON text already read (generation_config may be empty). The source names are
// what error messages call the two files.
ModelConfig parse_config(const std::string& config_json, const std::string& generation_config_json,
                         const std::string& source_name = "config.json",
                         const std::string& generation_source_name = "generation_config.json");

}  // namespace braid::model
