// Decode-benchmark model shapes and the bytes a decode step must read.
#include <fmt/core.h>

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
    // Llama-3.1-8B as its FP8 checkpoints store it: the linear layers in fp8 e4m3 with a scale
    // per 128 x 128 block; embeddings, norms and the LM head in bf16.
    {"llama-3.1-8b-fp8", R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 128256,
      "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
      "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
      "tie_word_embeddings": false, "torch_dtype": "bfloat16",
      "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                              "weight_block_size": [128, 128]}})"},
    {"qwen3-30b-a3b", R"({"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 151936,
      "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
      "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
      "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true,
      "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 40960,
      "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
      "torch_dtype": "bfloat16"})"},
};

}  // namespace

std::vector<std::string> decode_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

model::ModelConfig decode_preset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return model::parse_config(p.config_json, "", std::string("preset ") + p.name);
  std::string known;
  for (const Preset& p : kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
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
}  // namespace

std::map<std::string, double> decode_component_bytes(const model::ModelConfig& c, int batch,
                                                    int context, size_t dtype_bytes) {
  // Names and grouping as forward() marks its components (norms inside the projection after them).
  const double H = c.hidden_size, e = static_cast<double>(dtype_bytes);
  const double qkv = c.q_dim() + 2.0 * c.kv_dim();
  std::map<std::string, double> b;
  for (int l = 0; l < c.num_layers; ++l) {
    b["qkv_proj"] += (H + (c.qkv_bias ? qkv : 0)) * e + linear_bytes(c, qkv, H, e);
    b["qk_rope_kv"] += (2.0 * batch * c.kv_dim() + (c.qk_norm ? 2.0 * c.head_dim : 0)) * e;
    b["attention"] += 2.0 * batch * double(context) * c.kv_dim() * e;
    b["o_proj"] += linear_bytes(c, H, c.q_dim(), e);
    if (!c.layer_is_moe(l)) {
      b["gate_up_proj"] += H * e + linear_bytes(c, 2.0 * c.intermediate_size, H, e);
      b["down_proj"] += linear_bytes(c, H, c.intermediate_size, e);
    } else {
      const double reachable = std::min<double>(c.num_experts, double(batch) * c.experts_per_token);
      b["moe_router"] += (H + c.num_experts * H) * e;
      b["moe_experts"] += reachable * 3.0 * H * c.moe_intermediate_size * e;
    }
  }
  b["embedding"] = batch * H * e;
  b["lm_head"] = (H + double(c.vocab_size) * H) * e;  // greedy: ids out, no logits written
  return b;
}

double decode_step_bytes(const model::ModelConfig& c, int batch, int context, size_t dtype_bytes) {
  const double H = c.hidden_size, V = c.vocab_size, e = static_cast<double>(dtype_bytes);
  const double qkv = c.q_dim() + 2.0 * c.kv_dim();
  double weights = V * H                    // LM head (the tied embedding counts here once)
                   + batch * H              // the batch's embedding rows
                   + H;                     // final norm
  double linear = 0;  // bytes of the linear layers, fp8 or 16-bit
  for (int l = 0; l < c.num_layers; ++l) {
    weights += 2 * H;  // norms
    linear += linear_bytes(c, qkv, H, e) + linear_bytes(c, H, c.q_dim(), e);
    if (c.qkv_bias) weights += qkv;
    if (c.qk_norm) weights += 2.0 * c.head_dim;
    if (!c.layer_is_moe(l)) {
      linear += linear_bytes(c, 2.0 * c.intermediate_size, H, e) +
                linear_bytes(c, H, c.intermediate_size, e);
    } else {
      const double reachable = std::min<double>(c.num_experts, double(batch) * c.experts_per_token);
      weights += c.num_experts * H + reachable * 3.0 * H * c.moe_intermediate_size;
    }
  }
  // The greedy step writes token ids, not logits (rms_norm_gemm_argmax).
  const double kv = 2.0 * c.num_layers * double(batch) * context * c.kv_dim();
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
