// Decode-benchmark model shapes and the bytes a decode step must read.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "bench/suites/decode.h"
#include "braid/error.h"

namespace braid::bench {

namespace {

struct Preset {
  const char* name;
  const char* config_json;  // as the public checkpoint's config.json has it (bf16)
};

// A checkpoint that stores a bf16 preset's model in fp8: the base's config.json with the
// quantization_config the fp8 checkpoint adds.
struct QuantizedPreset {
  const char* name;
  const char* base;
  const char* quantization_config;
};

// DeepSeek-V3's and Qwen3-*-FP8's format: linear layers (and experts) in fp8 e4m3 with a scale
// per 128 x 128 block; embeddings, norms, routers and the LM head in bf16.
constexpr const char* kFp8Blocks = R"({"quant_method": "fp8", "fmt": "e4m3",
  "activation_scheme": "dynamic", "weight_block_size": [128, 128]})";

constexpr Preset kPresets[] = {
    {"qwen2.5-0.5b", R"({"architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936,
      "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
      "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
      "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
      "torch_dtype": "bfloat16"})"},
    {"qwen3-0.6b", R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 151936,
      "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
      "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
      "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
      "tie_word_embeddings": true, "torch_dtype": "bfloat16"})"},
    {"llama-3.2-1b", R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 128256,
      "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
      "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
      "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
      "tie_word_embeddings": true, "torch_dtype": "bfloat16"})"},
    {"llama-2-7b", R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 32000,
      "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096,
      "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
      "torch_dtype": "bfloat16"})"},
    {"llama-3.1-8b", R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 128256,
      "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
      "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
      "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
    {"qwen3-30b-a3b", R"({"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 151936,
      "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
      "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
      "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true,
      "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 40960,
      "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
      "torch_dtype": "bfloat16"})"},
    // DeepSeek-V2-Lite: MLA (plain q_proj, 512-wide latent), 64 experts + 2 shared, top 6.
    {"deepseek-v2-lite", R"({"architectures": ["DeepseekV2ForCausalLM"], "vocab_size": 102400,
      "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
      "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
      "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
      "v_head_dim": 128, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
      "first_k_dense_replace": 1, "moe_layer_freq": 1, "topk_method": "greedy", "n_group": 1,
      "topk_group": 1, "norm_topk_prob": false, "routed_scaling_factor": 1.0,
      "scoring_func": "softmax", "max_position_embeddings": 163840, "rope_theta": 10000,
      "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                       "mscale": 0.707, "mscale_all_dim": 0.707,
                       "original_max_position_embeddings": 4096},
      "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
    // Moonlight-16B-A3B: the DeepSeek-V3 architecture (sigmoid noaux_tc routing, one group).
    {"moonlight-16b-a3b", R"({"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 163840,
      "hidden_size": 2048, "intermediate_size": 11264, "moe_intermediate_size": 1408,
      "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
      "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
      "v_head_dim": 128, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
      "first_k_dense_replace": 1, "moe_layer_freq": 1, "topk_method": "noaux_tc",
      "scoring_func": "sigmoid", "n_group": 1, "topk_group": 1, "norm_topk_prob": true,
      "routed_scaling_factor": 2.446, "max_position_embeddings": 8192, "rope_theta": 50000.0,
      "rms_norm_eps": 1e-5, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
    // DeepSeek-OCR's language model (its config.json's language_config): plain multi-head
    // attention (use_mla false), 64 experts + 2 shared, top 6, layer 0 dense.
    {"deepseek-ocr-lm", R"({"architectures": ["DeepseekV2ForCausalLM"], "vocab_size": 129280,
      "hidden_size": 1280, "intermediate_size": 6848, "moe_intermediate_size": 896,
      "num_hidden_layers": 12, "num_attention_heads": 10, "num_key_value_heads": 10,
      "use_mla": false, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
      "first_k_dense_replace": 1, "topk_method": "greedy", "n_group": 1, "topk_group": 1,
      "max_position_embeddings": 8192, "bos_token_id": 0, "eos_token_id": 1,
      "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
};

constexpr QuantizedPreset kQuantizedPresets[] = {
    {"llama-3.1-8b-fp8", "llama-3.1-8b", kFp8Blocks},
    // llm-compressor's FP8-dynamic (compressed-tensors, RedHatAI's *-FP8-dynamic): the linear
    // layers in fp8 e4m3 with one scale per output row, activations quantized per token at run
    // time; the LM head stays bf16.
    {"llama-3.1-8b-fp8-dynamic", "llama-3.1-8b", R"({"quant_method": "compressed-tensors",
      "format": "float-quantized", "quantization_status": "compressed", "ignore": ["lm_head"],
      "kv_cache_scheme": null,
      "config_groups": {"group_0": {"targets": ["Linear"], "output_activations": null,
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "dynamic": false,
                    "symmetric": true, "group_size": null, "block_structure": null},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                              "dynamic": true, "symmetric": true}}}})"},
    {"qwen3-30b-a3b-fp8", "qwen3-30b-a3b", kFp8Blocks},
};

const char* base_config_json(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return p.config_json;
  return nullptr;
}

}  // namespace

std::vector<std::string> decode_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  for (const QuantizedPreset& p : kQuantizedPresets) names.emplace_back(p.name);
  return names;
}

model::ModelConfig decode_preset(const std::string& name) {
  const std::string what = "preset " + name;
  if (const char* json = base_config_json(name)) return model::parse_config(json, "", what);
  for (const QuantizedPreset& p : kQuantizedPresets) {
    if (name != p.name) continue;
    nlohmann::json config = nlohmann::json::parse(base_config_json(p.base));
    config["quantization_config"] = nlohmann::json::parse(p.quantization_config);
    return model::parse_config(config.dump(), "", what);
  }
  std::string known;
  for (const std::string& n : decode_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(ErrorKind::invalid_argument,
              "bench decode: unknown shape '" + name + "' (known: " + known + ")");
}

namespace {
// Bytes per element of a linear layer's weight: fp8 (plus its f32 scales) or the dtype.
double linear_bytes(const model::ModelConfig& c, double rows, double cols, double e) {
  switch (c.weights) {
    case model::WeightFormat::dense: return rows * cols * e;
    case model::WeightFormat::fp8_blocks: return rows * cols + std::ceil(rows / 128) * std::ceil(cols / 128) * 4;
    case model::WeightFormat::fp8_per_channel: return rows * cols + rows * 4;
  }
  return rows * cols * e;
}
// One routed expert's matrix: fp8 with its 128 x 128 block scales for fp8 experts (per-channel
// checkpoints' experts are requantized to blocks at load), else 16-bit.
double expert_bytes(const model::ModelConfig& c, double rows, double cols, double e) {
  return c.fp8_experts() ? rows * cols + std::ceil(rows / 128) * std::ceil(cols / 128) * 4
                         : rows * cols * e;
}
}  // namespace

namespace {
// One layer's attention weights beyond the first projection (MLA: the q LoRA's q_b_proj and
// norms, kv_b_proj as the 16-bit W_UK / W_UV the engine reads, kv_a_layernorm), in bytes.
double mla_inner_weight_bytes(const model::ModelConfig& c, double e) {
  if (!c.mla()) return 0;
  const double h = c.num_heads;
  double bytes = (c.kv_lora_rank + h * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank) * e;
  if (c.q_lora_rank > 0)
    bytes += c.q_lora_rank * e + linear_bytes(c, h * c.mla_q_head_dim(), c.q_lora_rank, e);
  return bytes;
}
// The first projection's rows (q|k|v, or MLA's q or q_a | latent | rope key) and o_proj's columns.
double first_proj_rows(const model::ModelConfig& c) {
  return c.mla() ? c.mla_first_proj_dim() : c.q_dim() + 2.0 * c.kv_dim();
}
double o_proj_cols(const model::ModelConfig& c) {
  return c.mla() ? double(c.num_heads) * c.v_head_dim : c.q_dim();
}
// Cached values per token and layer: K and V, or MLA's one latent row.
double cache_values_per_token(const model::ModelConfig& c) {
  return double(c.cache_heads()) * (c.cache_key_dim() + c.cache_value_dim());
}
}  // namespace

std::map<std::string, double> decode_component_bytes(const model::ModelConfig& c, int batch,
                                                    int context, size_t dtype_bytes) {
  // Names and grouping as forward() marks its components (norms inside the projection after them).
  const double H = c.hidden_size, e = static_cast<double>(dtype_bytes);
  const double qkv = first_proj_rows(c), cached = cache_values_per_token(c);
  std::map<std::string, double> b;
  for (int l = 0; l < c.num_layers; ++l) {
    b["qkv_proj"] += (H + (c.qkv_bias ? qkv : 0)) * e + linear_bytes(c, qkv, H, e);
    if (c.mla()) {  // the cache append happens inside MLA's attention component
      b["attention"] += mla_inner_weight_bytes(c, e) + batch * (double(context) + 1) * cached * e;
    } else {  // one kernel appends the new K/V and attends (qk_norm_rope_kv_append_attention_decode)
      b["attention"] += (2.0 * batch * c.kv_dim() + (c.qk_norm ? 2.0 * c.head_dim : 0)) * e +
                        batch * double(context) * cached * e;
    }
    b["o_proj"] += linear_bytes(c, H, o_proj_cols(c), e);
    if (!c.layer_is_moe(l)) {
      b["gate_up_proj"] += H * e + linear_bytes(c, 2.0 * c.intermediate_size, H, e);
      b["down_proj"] += linear_bytes(c, H, c.intermediate_size, e);
    } else {
      const double reachable = std::min<double>(c.num_experts, double(batch) * c.experts_per_token);
      b["moe_router"] += (H + c.num_experts * H) * e;
      const double I = c.moe_intermediate_size;
      if (c.fp8_experts()) {  // decode steps read fp8 rows and scales through moe_experts too
        b["moe_experts"] += reachable * (expert_bytes(c, 2 * I, H, e) + expert_bytes(c, H, I, e));
      } else {
        b["moe_experts"] += reachable * 3.0 * H * I * e;
      }
      if (c.n_shared_experts > 0)
        b["moe_shared_experts"] += linear_bytes(c, 3.0 * c.n_shared_experts * c.moe_intermediate_size, H, e);
    }
  }
  b["embedding"] = batch * H * e;
  b["lm_head"] = (H + double(c.vocab_size) * H) * e;  // greedy: ids out, no logits written
  return b;
}

double decode_step_bytes(const model::ModelConfig& c, int batch, int context, size_t dtype_bytes) {
  const double H = c.hidden_size, V = c.vocab_size, e = static_cast<double>(dtype_bytes);
  const double qkv = first_proj_rows(c);
  double weights = V * H                    // LM head (the tied embedding counts here once)
                   + batch * H              // the batch's embedding rows
                   + H;                     // final norm
  double linear = 0;  // bytes of the linear layers, fp8 or 16-bit
  for (int l = 0; l < c.num_layers; ++l) {
    weights += 2 * H;  // norms
    linear += linear_bytes(c, qkv, H, e) + linear_bytes(c, H, o_proj_cols(c), e) +
              mla_inner_weight_bytes(c, e);
    if (c.qkv_bias) weights += qkv;
    if (c.qk_norm) weights += 2.0 * c.head_dim;
    if (!c.layer_is_moe(l)) {
      linear += linear_bytes(c, 2.0 * c.intermediate_size, H, e) +
                linear_bytes(c, H, c.intermediate_size, e);
    } else {
      const double reachable = std::min<double>(c.num_experts, double(batch) * c.experts_per_token);
      const double I = c.moe_intermediate_size;
      weights += c.num_experts * H;  // the router
      linear += reachable * (expert_bytes(c, 2 * I, H, e) + expert_bytes(c, H, I, e)) +
                linear_bytes(c, 3.0 * c.n_shared_experts * I, H, e);
    }
  }
  // The greedy step writes token ids, not logits (rms_norm_gemm_argmax).
  const double kv = c.num_layers * double(batch) * context * cache_values_per_token(c);
  return (weights + kv) * e + linear;
}

}  // namespace braid::bench

namespace braid::bench {

std::string decode_summary(const Report& run) {
  std::string out;
  double components_us = 0;
  for (const ResultRow& r : run.rows)
    if (r.name == "decode_component") components_us += r.stats.median_us;
  for (const ResultRow& r : run.rows) {
    if (r.name == "decode_component") {
      out += fmt::format("  {:<14} {:>9.1f} us/step {:>5.1f}%  {:>10.2f} MB  {:>7.0f} GB/s\n",
                         r.params, r.stats.median_us, 100.0 * r.stats.median_us / components_us,
                         r.bytes / 1e6, achieved_gbps(r).value_or(0.0));
      continue;
    }
    const double ms = r.stats.median_us / 1e3;
    const auto gbps = achieved_gbps(r);
    const double floor_ms = run.ceilings.copy_gbps > 0 ? r.bytes / (run.ceilings.copy_gbps * 1e6) : 0;
    out += fmt::format("{} [{}]: {:.3f} ms/step, {:.0f} steps/s; {:.0f} GB/s; floor {:.3f} ms "
                       "({:.1f}% of the floor's speed); {}\n",
                       r.params, r.timing, ms, 1e3 / ms, gbps ? *gbps : 0.0, floor_ms,
                       ms > 0 ? 100.0 * floor_ms / ms : 0.0, r.note);
  }
  return out;
}

}  // namespace braid::bench
