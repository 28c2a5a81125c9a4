// Model configuration from a Hugging Face folder (config.json, generation_config.json).
#pragma once

#include <string>
#include <vector>

#include "braid/dtype.h"
#include "braid/ops.h"

namespace braid::model {

enum class Arch { llama, qwen2, qwen3, qwen3_moe, mixtral };

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
                    // float8_e4m3fn weights, "<name>_scale_inv" f32 per 128 x 128 block
  fp8_per_channel,  // compressed-tensors float-quantized: float8_e4m3fn weights,
                    // "<name>_scale" f32 per output row ([n, 1])
};
std::string_view weight_format_name(WeightFormat f);

struct ModelConfig {
  Arch arch = Arch::llama;
  WeightFormat weights = WeightFormat::dense;
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

  // Token ids (generation_config.json wins over config.json). eos may hold several ids.
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;

  bool layer_is_moe(int layer) const;
  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
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
// compressed-tensors float 8-bit per-channel weights with dynamic per-token activations).
ModelConfig load_config(const std::string& dir);
// The same from JSON text already read (generation_config may be empty). The source names are
// what error messages call the two files.
ModelConfig parse_config(const std::string& config_json, const std::string& generation_config_json,
                         const std::string& source_name = "config.json",
                         const std::string& generation_source_name = "generation_config.json");

}  // namespace braid::model
