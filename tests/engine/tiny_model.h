// Writes small random-weight checkpoints (config.json + model.safetensors) for engine tests.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "braid/dtype.h"

namespace braid::test {

struct TinyModelSpec {
  std::string arch = "LlamaForCausalLM";
  int vocab = 96, hidden = 64, layers = 2, heads = 4, kv_heads = 2, head_dim = 16;
  int intermediate = 96;
  bool qkv_bias = false, qk_norm = false, tied = false;
  bool attention_bias = false;  // Llama's attention_bias: q/k/v and o_proj biases
  int experts = 0, experts_per_token = 0, moe_intermediate = 48;
  std::vector<int> mlp_only_layers;  // Qwen3-MoE: layers with a dense MLP instead of experts
  std::string dtype = "F32";  // safetensors dtype of every tensor
  std::string config_dtype = "float32";
  uint64_t seed = 1;
  // Tensors to leave out / reshape, for bad-input tests.
  std::string drop_tensor;
  // fp8 linear layers (q/k/v/o/gate/up/down): "blocks" (quant_method fp8, 128 x 128 scale blocks,
  // "<name>_scale_inv"), "channel" (compressed-tensors per-row "<name>_scale"), "tensor"
  // (compressed-tensors' static FP8: one "<name>_scale" per matrix, shape [] for the attention
  // projections and [1] for the rest, and an "input_scale" per layer, which the engine ignores),
  // "ct_block" (compressed-tensors' FP8-block: the values and scales of "blocks", the scales
  // named "<name>_scale"), or "" for none.
  // With fp8_dequantized the same quantized values are written dense (value x scale, exact in
  // f32): the reference an fp8 checkpoint must match.
  std::string fp8;
  bool fp8_dequantized = false;
  // The routed experts in fp8 too, in the fp8 format, each expert's gate/up/down with its scales
  // (DeepSeek-V3's and Qwen3-*-FP8's layout for "blocks", llm-compressor's FP8-dynamic of an MoE
  // model for "channel"). Without it they stay dense.
  bool fp8_experts = false;
  // DeepSeek-V3's layout (arch DeepseekV3ForCausalLM): multi-head latent attention with a q LoRA
  // (these widths; head_dim and kv_heads unused), and with experts a dense first layer, then MoE
  // layers with one shared expert and sigmoid routing with a score-correction bias.
  bool deepseek = false;
  int q_lora = 128, kv_lora = 64, nope = 32, rope = 32, v_head = 32;
};

class TinyModelDir {
 public:
  explicit TinyModelDir(const TinyModelSpec& s) {
    dir_ = std::filesystem::temp_directory_path() /
           ("braid_tiny_" + std::to_string(std::random_device{}()) + "_" + std::to_string(s.seed));
    std::filesystem::create_directories(dir_);
    write_config(s);
    write_weights(s);
  }
  ~TinyModelDir() { std::filesystem::remove_all(dir_); }
  TinyModelDir(const TinyModelDir&) = delete;
  TinyModelDir& operator=(const TinyModelDir&) = delete;
  std::string path() const { return dir_.string(); }

 private:
  void write_config(const TinyModelSpec& s) {
    nlohmann::json c = {{"architectures", {s.arch}},
                        {"vocab_size", s.vocab},
                        {"hidden_size", s.hidden},
                        {"intermediate_size", s.intermediate},
                        {"num_hidden_layers", s.layers},
                        {"num_attention_heads", s.heads},
                        {"num_key_value_heads", s.kv_heads},
                        {"head_dim", s.head_dim},
                        {"rms_norm_eps", 1e-6},
                        {"max_position_embeddings", 256},
                        {"rope_theta", 10000.0},
                        {"tie_word_embeddings", s.tied},
                        {"torch_dtype", s.config_dtype},
                        {"bos_token_id", 1},
                        {"eos_token_id", 2}};
    if (s.attention_bias) c["attention_bias"] = true;
    if (s.fp8 == "blocks" && !s.fp8_dequantized)
      c["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"},
                                  {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
    if ((s.fp8 == "channel" || s.fp8 == "tensor" || s.fp8 == "ct_block") && !s.fp8_dequantized) {
      const bool dynamic = s.fp8 != "tensor";
      const bool block = s.fp8 == "ct_block";
      nlohmann::json weights = {{"num_bits", 8}, {"type", "float"},
                                {"strategy", block ? "block" : s.fp8}};
      nlohmann::json activations = {{"num_bits", 8}, {"type", "float"}, {"dynamic", dynamic},
                                    {"strategy", block ? "group" : dynamic ? "token" : "tensor"}};
      if (block) {
        weights["block_structure"] = {128, 128};
        activations["group_size"] = 128;
      }
      c["quantization_config"] = {
          {"quant_method", "compressed-tensors"},
          {"config_groups",
           {{"group_0",
             {{"weights", weights}, {"input_activations", activations}, {"targets", {"Linear"}}}}}}};
    }
    if (s.deepseek) {
      c.update({{"q_lora_rank", s.q_lora}, {"kv_lora_rank", s.kv_lora}, {"qk_nope_head_dim", s.nope},
                {"qk_rope_head_dim", s.rope}, {"v_head_dim", s.v_head}, {"first_k_dense_replace", 1}});
      c.erase("head_dim");
      if (s.experts)
        c.update({{"n_routed_experts", s.experts}, {"num_experts_per_tok", s.experts_per_token},
                  {"moe_intermediate_size", s.moe_intermediate}, {"n_shared_experts", 1},
                  {"n_group", 2}, {"topk_group", 1}, {"routed_scaling_factor", 2.5}});
    } else if (s.experts) {
      c["num_experts"] = s.experts;
      c["num_experts_per_tok"] = s.experts_per_token;
      c["moe_intermediate_size"] = s.moe_intermediate;
      if (!s.mlp_only_layers.empty()) c["mlp_only_layers"] = s.mlp_only_layers;
      c["norm_topk_prob"] = true;
    }
    std::ofstream(dir_ / "config.json") << c.dump(2);
  }

  void write_weights(const TinyModelSpec& s) {
    std::mt19937_64 rng(s.seed);
    std::normal_distribution<float> normal(0.0f, 0.08f);
    const DType t = dtype_from_name(s.dtype);
    struct Entry {
      std::vector<int64_t> shape;
      std::string dtype, bytes;
    };
    std::map<std::string, Entry> tensors;
    auto write = [&](const std::string& name, std::vector<int64_t> shape, DType dt,
                     const std::vector<float>& values) {
      if (name == s.drop_tensor) return;
      std::string bytes(values.size() * dtype_size(dt), '\0');
      for (size_t i = 0; i < values.size(); ++i)
        store_from_float(bytes.data(), dt, static_cast<int64_t>(i), values[i]);
      const char* st = dt == DType::f8e4m3 ? "F8_E4M3"
                       : dt == DType::f32  ? "F32"
                       : dt == DType::f16  ? "F16"
                                           : "BF16";
      tensors[name] = {std::move(shape), st, std::move(bytes)};
    };
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float base = 0.0f) {
      if (name == s.drop_tensor) return;
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = base + normal(rng);
      // Linear layers (kv_a_proj_with_mqa is one), the routed experts aside unless fp8_experts
      // (a shared expert is one).
      const bool expert = name.find(".experts.") != std::string::npos;
      const bool linear =
          (name.ends_with("_proj.weight") || name.ends_with("_proj_with_mqa.weight")) &&
          (!expert || s.fp8_experts);
      if (s.fp8.empty() || !linear) return write(name, std::move(shape), t, v);
      // The values a 16-bit checkpoint of this spec holds (a no-op for F32), so that its
      // quantization at load (--quantize fp8) gives this checkpoint's bytes.
      for (float& x : v) x = quantize(t, x);
      // Quantize: a scale per 128 x 128 block, per row or per matrix = amax / 448, values
      // e4m3(v / scale).
      const bool blocks = s.fp8 == "blocks" || s.fp8 == "ct_block", whole = s.fp8 == "tensor";
      const int64_t rows = shape[0], cols = shape[1];
      const int64_t sr = blocks ? (rows + 127) / 128 : whole ? 1 : rows;
      const int64_t sc = blocks ? (cols + 127) / 128 : 1;
      std::vector<float> scale(static_cast<size_t>(sr * sc), 0.0f);
      auto at = [&](int64_t r, int64_t c) {
        return blocks ? (r / 128) * sc + c / 128 : whole ? 0 : r;
      };
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          scale[at(r, c)] = std::max(scale[at(r, c)], std::fabs(v[r * cols + c]) / 448.0f);
      std::vector<float> q(v.size()), dq(v.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          q[i] = f8e4m3_to_float(float_to_f8e4m3(v[i] / scale[at(r, c)]));
          dq[i] = q[i] * scale[at(r, c)];
        }
      if (s.fp8_dequantized) return write(name, std::move(shape), t, dq);
      write(name, std::move(shape), DType::f8e4m3, q);
      if (whole) {
        const bool attention = name.find(".self_attn.") != std::string::npos;
        write(name + "_scale", attention ? std::vector<int64_t>{} : std::vector<int64_t>{1},
              DType::f32, scale);
        const std::string layer = name.substr(0, name.size() - std::string("weight").size());
        return write(layer + "input_scale", {1}, DType::f32, {0.02f});
      }
      write(name + (s.fp8 == "blocks" ? "_scale_inv" : "_scale"), {sr, sc}, DType::f32, scale);
    };
    const int64_t H = s.hidden, qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim;
    add("model.embed_tokens.weight", {s.vocab, H});
    add("model.norm.weight", {H}, 1.0f);
    if (!s.tied) add("lm_head.weight", {s.vocab, H});
    for (int l = 0; l < s.layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {H}, 1.0f);
      add(p + "post_attention_layernorm.weight", {H}, 1.0f);
      if (s.deepseek) {
        const std::string a = p + "self_attn.";
        add(a + "q_a_proj.weight", {s.q_lora, H});
        add(a + "q_a_layernorm.weight", {s.q_lora}, 1.0f);
        add(a + "q_b_proj.weight", {s.heads * (s.nope + s.rope), s.q_lora});
        add(a + "kv_a_proj_with_mqa.weight", {s.kv_lora + s.rope, H});
        add(a + "kv_a_layernorm.weight", {s.kv_lora}, 1.0f);
        add(a + "kv_b_proj.weight", {s.heads * (s.nope + s.v_head), s.kv_lora});
        add(a + "o_proj.weight", {H, s.heads * s.v_head});
        const bool moe = s.experts && l >= 1;
        const int64_t I = moe ? s.moe_intermediate : s.intermediate;
        const std::string m = p + (moe ? "mlp.shared_experts." : "mlp.");
        add(m + "gate_proj.weight", {I, H});
        add(m + "up_proj.weight", {I, H});
        add(m + "down_proj.weight", {H, I});
        if (!moe) continue;
        add(p + "mlp.gate.weight", {s.experts, H});
        add(p + "mlp.gate.e_score_correction_bias", {s.experts});
        for (int e = 0; e < s.experts; ++e) {
          const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
          add(x + "gate_proj.weight", {s.moe_intermediate, H});
          add(x + "up_proj.weight", {s.moe_intermediate, H});
          add(x + "down_proj.weight", {H, s.moe_intermediate});
        }
        continue;
      }
      add(p + "self_attn.q_proj.weight", {qd, H});
      add(p + "self_attn.k_proj.weight", {kvd, H});
      add(p + "self_attn.v_proj.weight", {kvd, H});
      add(p + "self_attn.o_proj.weight", {H, qd});
      if (s.attention_bias) add(p + "self_attn.o_proj.bias", {H});
      if (s.qkv_bias || s.attention_bias) {
        add(p + "self_attn.q_proj.bias", {qd});
        add(p + "self_attn.k_proj.bias", {kvd});
        add(p + "self_attn.v_proj.bias", {kvd});
      }
      if (s.qk_norm) {
        add(p + "self_attn.q_norm.weight", {s.head_dim}, 1.0f);
        add(p + "self_attn.k_norm.weight", {s.head_dim}, 1.0f);
      }
      const bool dense_mlp = std::find(s.mlp_only_layers.begin(), s.mlp_only_layers.end(), l) !=
                             s.mlp_only_layers.end();
      if (s.experts && !dense_mlp) {
        add(p + "mlp.gate.weight", {s.experts, H});
        for (int e = 0; e < s.experts; ++e) {
          const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
          add(x + "gate_proj.weight", {s.moe_intermediate, H});
          add(x + "up_proj.weight", {s.moe_intermediate, H});
          add(x + "down_proj.weight", {H, s.moe_intermediate});
        }
      } else {
        add(p + "mlp.gate_proj.weight", {s.intermediate, H});
        add(p + "mlp.up_proj.weight", {s.intermediate, H});
        add(p + "mlp.down_proj.weight", {H, s.intermediate});
      }
    }
    nlohmann::json header = nlohmann::json::object();
    std::string data;
    for (const auto& [name, entry] : tensors) {
      header[name] = {{"dtype", entry.dtype},
                      {"shape", entry.shape},
                      {"data_offsets", {data.size(), data.size() + entry.bytes.size()}}};
      data += entry.bytes;
    }
    const std::string text = header.dump();
    std::ofstream f(dir_ / "model.safetensors", std::ios::binary);
    const uint64_t len = text.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((len >> (8 * i)) & 0xff));
    f << text << data;
  }

  std::filesystem::path dir_;
};

}  // namespace braid::test
