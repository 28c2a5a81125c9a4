// config.json: the real configs of one model per family (as Hugging Face publishes them, written
// by transformers 4) parse to the expected values, and the same configs in transformers 5's
// spelling parse to the same ModelConfig; bad configs give errors naming the file and field.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "test_util.h"

namespace braid::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using model::Arch;
using model::ModelConfig;
using model::parse_config;

// ---- the published configs (transformers 4 spelling) ----

const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

const char* kQwen25_05B = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 24,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1",
  "use_cache": true,
  "use_mrope": false,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

const char* kQwen3_06B = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

const char* kQwen3_30B_A3B = R"({
  "architectures": ["Qwen3MoeForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "decoder_sparse_step": 1,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 6144,
  "max_position_embeddings": 40960,
  "max_window_layers": 48,
  "mlp_only_layers": [],
  "model_type": "qwen3_moe",
  "moe_intermediate_size": 768,
  "norm_topk_prob": true,
  "num_attention_heads": 32,
  "num_experts": 128,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 48,
  "num_key_value_heads": 4,
  "output_router_logits": false,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.001,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

const char* kMixtral_8x7B = R"({
  "architectures": ["MixtralForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mixtral",
  "num_attention_heads": 32,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "num_local_experts": 8,
  "output_router_logits": false,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.02,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.36.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

// The same config as transformers 5 writes it: "dtype", and rope_theta + rope_scaling folded
// into "rope_parameters"; Mixtral's expert count under its other name.
std::string to_transformers5(const std::string& text) {
  json j = json::parse(text);
  j["dtype"] = j["torch_dtype"];
  j.erase("torch_dtype");
  json rope = j.contains("rope_scaling") && j["rope_scaling"].is_object() ? j["rope_scaling"]
                                                                          : json::object();
  if (rope.contains("type")) {
    rope["rope_type"] = rope["type"];
    rope.erase("type");
  }
  if (!rope.contains("rope_type")) rope["rope_type"] = "default";
  rope["rope_theta"] = j["rope_theta"];
  j["rope_parameters"] = rope;
  j.erase("rope_theta");
  j.erase("rope_scaling");
  if (j.contains("num_local_experts")) {
    j["num_experts"] = j["num_local_experts"];
    j.erase("num_local_experts");
  }
  j["transformers_version"] = "5.0.0";
  return j.dump(2);
}

// `text` with some fields replaced (a null value removes the field).
std::string with(const std::string& text, const json& changes) {
  json j = json::parse(text);
  for (const auto& [k, v] : changes.items()) {
    if (v.is_null()) j.erase(k);
    else j[k] = v;
  }
  return j.dump();
}

ModelConfig parse(const std::string& text, const std::string& gen = "") {
  return parse_config(text, gen);
}

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rope.theta, b.rope.theta);
  EXPECT_EQ(a.rope.rotary_dim, b.rope.rotary_dim);
  EXPECT_EQ(a.rope.scaling, b.rope.scaling);
  EXPECT_EQ(a.rope.factor, b.rope.factor);
  EXPECT_EQ(a.rope.low_freq_factor, b.rope.low_freq_factor);
  EXPECT_EQ(a.rope.high_freq_factor, b.rope.high_freq_factor);
  EXPECT_EQ(a.rope.original_max_position, b.rope.original_max_position);
  EXPECT_EQ(a.rope.beta_fast, b.rope.beta_fast);
  EXPECT_EQ(a.rope.beta_slow, b.rope.beta_slow);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.o_bias, b.o_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.num_experts, b.num_experts);
  EXPECT_EQ(a.experts_per_token, b.experts_per_token);
  EXPECT_EQ(a.moe_intermediate_size, b.moe_intermediate_size);
  EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob);
  EXPECT_EQ(a.decoder_sparse_step, b.decoder_sparse_step);
  EXPECT_EQ(a.mlp_only_layers, b.mlp_only_layers);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
}

// Parses both spellings, checks they agree, returns the transformers 4 result.
ModelConfig parse_both(const std::string& text) {
  const ModelConfig v4 = parse(text);
  SCOPED_TRACE("transformers 5 spelling");
  expect_same(v4, parse(to_transformers5(text)));
  return v4;
}

TEST(Config, Llama32_1B) {
  const ModelConfig m = parse_both(kLlama32_1B);
  EXPECT_EQ(m.arch, Arch::llama);
  EXPECT_EQ(m.vocab_size, 128256);
  EXPECT_EQ(m.hidden_size, 2048);
  EXPECT_EQ(m.intermediate_size, 8192);
  EXPECT_EQ(m.num_layers, 16);
  EXPECT_EQ(m.num_heads, 32);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(m.q_dim(), 2048);
  EXPECT_EQ(m.kv_dim(), 512);
  EXPECT_FLOAT_EQ(m.rms_norm_eps, 1e-5f);
  EXPECT_EQ(m.max_position_embeddings, 131072);
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_FALSE(m.qkv_bias);
  EXPECT_FALSE(m.o_bias);
  EXPECT_FALSE(m.qk_norm);
  EXPECT_EQ(m.dtype, DType::bf16);
  EXPECT_EQ(m.rope.theta, 500000.0f);
  EXPECT_EQ(m.rope.scaling, ops::RopeScaling::llama3);
  EXPECT_EQ(m.rope.factor, 32.0f);
  EXPECT_EQ(m.rope.low_freq_factor, 1.0f);
  EXPECT_EQ(m.rope.high_freq_factor, 4.0f);
  EXPECT_EQ(m.rope.original_max_position, 8192);
  EXPECT_EQ(m.rope.rotary_dim, 64);
  EXPECT_EQ(m.num_experts, 0);
  EXPECT_FALSE(m.layer_is_moe(0));
  EXPECT_EQ(m.bos_token_id, 128000);
  EXPECT_EQ(m.eos_token_ids, std::vector<int>{128001});
}

TEST(Config, Qwen25_05B) {
  const ModelConfig m = parse_both(kQwen25_05B);
  EXPECT_EQ(m.arch, Arch::qwen2);
  EXPECT_EQ(m.hidden_size, 896);
  EXPECT_EQ(m.intermediate_size, 4864);
  EXPECT_EQ(m.num_layers, 24);
  EXPECT_EQ(m.num_heads, 14);
  EXPECT_EQ(m.num_kv_heads, 2);
  EXPECT_EQ(m.head_dim, 64);  // hidden_size / num_attention_heads
  EXPECT_FLOAT_EQ(m.rms_norm_eps, 1e-6f);
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.o_bias);
  EXPECT_FALSE(m.qk_norm);
  EXPECT_EQ(m.rope.theta, 1e6f);
  EXPECT_EQ(m.rope.scaling, ops::RopeScaling::none);
  EXPECT_EQ(m.rope.rotary_dim, 64);
  EXPECT_EQ(m.bos_token_id, 151643);
  EXPECT_EQ(m.eos_token_ids, std::vector<int>{151643});
}

TEST(Config, Qwen3_06B) {
  const ModelConfig m = parse_both(kQwen3_06B);
  EXPECT_EQ(m.arch, Arch::qwen3);
  EXPECT_EQ(m.hidden_size, 1024);
  EXPECT_EQ(m.num_heads, 16);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);  // explicit, and heads * head_dim != hidden_size
  EXPECT_EQ(m.q_dim(), 2048);
  EXPECT_EQ(m.max_position_embeddings, 40960);
  EXPECT_TRUE(m.qk_norm);
  EXPECT_FALSE(m.qkv_bias);
  EXPECT_FALSE(m.o_bias);
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_EQ(m.rope.theta, 1e6f);
  EXPECT_EQ(m.rope.scaling, ops::RopeScaling::none);
  EXPECT_EQ(m.rope.rotary_dim, 128);
  EXPECT_EQ(m.eos_token_ids, std::vector<int>{151645});
}

TEST(Config, Qwen3_30B_A3B) {
  const ModelConfig m = parse_both(kQwen3_30B_A3B);
  EXPECT_EQ(m.arch, Arch::qwen3_moe);
  EXPECT_EQ(m.hidden_size, 2048);
  EXPECT_EQ(m.intermediate_size, 6144);
  EXPECT_EQ(m.num_layers, 48);
  EXPECT_EQ(m.num_heads, 32);
  EXPECT_EQ(m.num_kv_heads, 4);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_TRUE(m.qk_norm);
  EXPECT_FALSE(m.tie_word_embeddings);
  EXPECT_EQ(m.num_experts, 128);
  EXPECT_EQ(m.experts_per_token, 8);
  EXPECT_EQ(m.moe_intermediate_size, 768);
  EXPECT_TRUE(m.norm_topk_prob);
  EXPECT_EQ(m.decoder_sparse_step, 1);
  EXPECT_TRUE(m.mlp_only_layers.empty());
  for (int l = 0; l < m.num_layers; ++l) EXPECT_TRUE(m.layer_is_moe(l)) << l;
}

TEST(Config, Mixtral_8x7B) {
  const ModelConfig m = parse_both(kMixtral_8x7B);
  EXPECT_EQ(m.arch, Arch::mixtral);
  EXPECT_EQ(m.vocab_size, 32000);
  EXPECT_EQ(m.hidden_size, 4096);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_FLOAT_EQ(m.rms_norm_eps, 1e-5f);
  EXPECT_FALSE(m.qkv_bias);
  EXPECT_FALSE(m.o_bias);
  EXPECT_FALSE(m.qk_norm);
  EXPECT_EQ(m.rope.theta, 1e6f);
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.experts_per_token, 2);
  EXPECT_EQ(m.moe_intermediate_size, 14336);
  EXPECT_TRUE(m.norm_topk_prob);
  for (int l = 0; l < m.num_layers; ++l) EXPECT_TRUE(m.layer_is_moe(l)) << l;
  EXPECT_EQ(m.bos_token_id, 1);
  EXPECT_EQ(m.eos_token_ids, std::vector<int>{2});
}

// Written out by hand rather than converted, as transformers 5 saves Llama-3.2.
TEST(Config, Transformers5Literal) {
  const ModelConfig m = parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "float16",
    "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192}})");
  EXPECT_EQ(m.dtype, DType::f16);
  EXPECT_EQ(m.head_dim, 16);
  EXPECT_EQ(m.rope.theta, 500000.0f);
  EXPECT_EQ(m.rope.scaling, ops::RopeScaling::llama3);
  EXPECT_EQ(m.rope.factor, 8.0f);
  EXPECT_EQ(m.rope.original_max_position, 8192);
}

TEST(Config, FamilyDefaults) {
  // What transformers assumes when a field is absent.
  const std::string minimal = R"({"vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
                                  "num_hidden_layers": 2, "num_attention_heads": 4})";
  const ModelConfig llama = parse(with(minimal, {{"model_type", "llama"}}));
  EXPECT_EQ(llama.arch, Arch::llama);  // from model_type when "architectures" is absent
  EXPECT_EQ(llama.num_kv_heads, 4);
  EXPECT_EQ(llama.head_dim, 16);
  EXPECT_EQ(llama.rope.theta, 10000.0f);
  EXPECT_EQ(llama.dtype, DType::f32);
  EXPECT_FALSE(llama.tie_word_embeddings);
  EXPECT_EQ(llama.max_position_embeddings, 2048);
  EXPECT_EQ(llama.bos_token_id, -1);
  EXPECT_TRUE(llama.eos_token_ids.empty());
  const ModelConfig mixtral = parse(with(
      minimal, {{"model_type", "mixtral"}, {"num_local_experts", 4}, {"num_experts_per_tok", 2}}));
  EXPECT_EQ(mixtral.rope.theta, 1e6f);
  EXPECT_FLOAT_EQ(mixtral.rms_norm_eps, 1e-5f);
  const ModelConfig moe = parse(with(minimal, {{"model_type", "qwen3_moe"},
                                               {"num_experts", 4},
                                               {"num_experts_per_tok", 2},
                                               {"moe_intermediate_size", 32}}));
  EXPECT_FALSE(moe.norm_topk_prob);  // Qwen3MoeConfig's default
  EXPECT_EQ(moe.decoder_sparse_step, 1);
  // head_dim absent, or null, means hidden_size / num_attention_heads.
  EXPECT_EQ(parse(with(kQwen3_06B, {{"head_dim", json()}})).head_dim, 64);
  EXPECT_EQ(parse(R"({"model_type": "qwen3", "head_dim": null, "vocab_size": 100,
                      "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                      "num_attention_heads": 4})")
                .head_dim,
            16);
}

TEST(Config, Dtypes) {
  EXPECT_EQ(parse(with(kQwen3_06B, {{"torch_dtype", "float16"}})).dtype, DType::f16);
  EXPECT_EQ(parse(with(kQwen3_06B, {{"torch_dtype", "float32"}})).dtype, DType::f32);
  EXPECT_EQ(parse(with(kQwen3_06B, {{"torch_dtype", json()}})).dtype, DType::f32);
  // transformers 5's "dtype" wins over a stale "torch_dtype".
  EXPECT_EQ(parse(with(kQwen3_06B, {{"dtype", "float16"}})).dtype, DType::f16);
}

TEST(Config, AttentionBias) {
  const ModelConfig llama = parse(with(kLlama32_1B, {{"attention_bias", true}}));
  EXPECT_TRUE(llama.qkv_bias);
  EXPECT_TRUE(llama.o_bias);
  const ModelConfig qwen3 = parse(with(kQwen3_06B, {{"attention_bias", true}}));
  EXPECT_TRUE(qwen3.qkv_bias);
  EXPECT_TRUE(qwen3.o_bias);
  EXPECT_TRUE(qwen3.qk_norm);
}

TEST(Config, TiedEmbeddings) {
  EXPECT_TRUE(parse(kQwen3_06B).tie_word_embeddings);
  EXPECT_FALSE(parse(with(kQwen3_06B, {{"tie_word_embeddings", false}})).tie_word_embeddings);
  EXPECT_FALSE(parse(with(kQwen3_06B, {{"tie_word_embeddings", json()}})).tie_word_embeddings);
}

TEST(Config, YarnScaling) {
  // Qwen3's recipe for long context.
  const std::string yarn = with(kQwen3_06B, {{"rope_scaling",
                                              {{"rope_type", "yarn"},
                                               {"factor", 4.0},
                                               {"original_max_position_embeddings", 32768}}}});
  const ModelConfig m = parse_both(yarn);
  EXPECT_EQ(m.rope.scaling, ops::RopeScaling::yarn);
  EXPECT_EQ(m.rope.factor, 4.0f);
  EXPECT_EQ(m.rope.original_max_position, 32768);
  EXPECT_EQ(m.rope.beta_fast, 32.0f);
  EXPECT_EQ(m.rope.beta_slow, 1.0f);
  EXPECT_EQ(m.rope.attention_factor, 0.0f);  // derived by the rope op
  EXPECT_TRUE(m.rope.truncate);
  EXPECT_GT(ops::rope_table(m.rope, m.head_dim).attention_scaling, 1.0f);

  // The older "type" key, every optional field, and no original length (then it is the
  // model's max_position_embeddings).
  const ModelConfig full = parse(with(
      kQwen3_06B, {{"rope_scaling",
                    {{"type", "yarn"}, {"factor", 2.0}, {"beta_fast", 16}, {"beta_slow", 2},
                     {"mscale", 0.707}, {"mscale_all_dim", 1.0}, {"attention_factor", 1.25},
                     {"truncate", false}}}}));
  EXPECT_EQ(full.rope.original_max_position, 40960);
  EXPECT_EQ(full.rope.beta_fast, 16.0f);
  EXPECT_EQ(full.rope.beta_slow, 2.0f);
  EXPECT_FLOAT_EQ(full.rope.mscale, 0.707f);
  EXPECT_EQ(full.rope.mscale_all_dim, 1.0f);
  EXPECT_EQ(full.rope.attention_factor, 1.25f);
  EXPECT_FALSE(full.rope.truncate);

  // transformers 5: no factor, so it is max_position_embeddings / original.
  const ModelConfig implied = parse(with(
      kQwen3_06B, {{"max_position_embeddings", 131072},
                   {"rope_scaling", json()},
                   {"rope_theta", json()},
                   {"rope_parameters",
                    {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"original_max_position_embeddings", 32768}}}}));
  EXPECT_EQ(implied.rope.factor, 4.0f);
  EXPECT_EQ(implied.rope.theta, 1e6f);
}

TEST(Config, PartialRotary) {
  EXPECT_EQ(parse(with(kQwen3_06B, {{"partial_rotary_factor", 0.5}})).rope.rotary_dim, 64);
  EXPECT_EQ(parse(with(kQwen3_06B, {{"partial_rotary_factor", 1.0}})).rope.rotary_dim, 128);
  const ModelConfig v5 = parse(with(
      to_transformers5(kQwen3_06B),
      {{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.25}}}}));
  EXPECT_EQ(v5.rope.rotary_dim, 32);
}

TEST(Config, EosIntOrList) {
  EXPECT_EQ(parse(with(kLlama32_1B, {{"eos_token_id", {128001, 128008, 128009}}})).eos_token_ids,
            (std::vector<int>{128001, 128008, 128009}));
  EXPECT_EQ(parse(with(kLlama32_1B, {{"eos_token_id", 7}})).eos_token_ids, std::vector<int>{7});
}

TEST(Config, GenerationConfigOverrides) {
  // Qwen3-0.6B's generation_config.json: eos becomes a list of two.
  const ModelConfig m = parse(kQwen3_06B, R"({"bos_token_id": 151643, "do_sample": true,
      "eos_token_id": [151645, 151643], "pad_token_id": 151643, "temperature": 0.6,
      "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})");
  EXPECT_EQ(m.bos_token_id, 151643);
  EXPECT_EQ(m.eos_token_ids, (std::vector<int>{151645, 151643}));
  // A field the generation config leaves out (or sets to null) keeps config.json's value.
  const ModelConfig partial = parse(kLlama32_1B, R"({"bos_token_id": 5, "eos_token_id": null})");
  EXPECT_EQ(partial.bos_token_id, 5);
  EXPECT_EQ(partial.eos_token_ids, std::vector<int>{128001});
}

TEST(Config, LayerIsMoe) {
  const ModelConfig m = parse(with(kQwen3_30B_A3B, {{"num_hidden_layers", 8},
                                                    {"decoder_sparse_step", 2},
                                                    {"mlp_only_layers", {1, 5}}}));
  // (l + 1) % 2 == 0 gives 1, 3, 5, 7; layers 1 and 5 are forced dense.
  for (int l = 0; l < 8; ++l) EXPECT_EQ(m.layer_is_moe(l), l == 3 || l == 7) << "layer " << l;
  EXPECT_EQ(m.mlp_only_layers, (std::vector<int>{1, 5}));
  const ModelConfig dense = parse(kQwen3_06B);
  for (int l = 0; l < dense.num_layers; ++l) EXPECT_FALSE(dense.layer_is_moe(l));
}

// ---- files on disk ----

struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("braid_config_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
            std::to_string(fresh_seed() % 1000000));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
  }
};

TEST(Config, LoadFromFolder) {
  TempDir dir;
  dir.write("config.json", kLlama32_1B);
  EXPECT_EQ(model::load_config(dir.path.string()).eos_token_ids, std::vector<int>{128001});
  dir.write("generation_config.json", R"({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})");
  const ModelConfig m = model::load_config(dir.path.string());
  EXPECT_EQ(m.arch, Arch::llama);
  EXPECT_EQ(m.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));

  dir.write("generation_config.json", "{\"eos_token_id\": ");
  expect_error([&] { model::load_config(dir.path.string()); }, ErrorKind::io,
               {(dir.path / "generation_config.json").string(), "not valid JSON"});
  dir.write("config.json", R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 0})");
  expect_error([&] { model::load_config(dir.path.string()); }, ErrorKind::invalid_argument,
               {(dir.path / "config.json").string(), "field 'vocab_size'"});
}

TEST(ConfigErrors, MissingFolderOrFile) {
  TempDir dir;
  expect_error([&] { model::load_config(dir.path.string()); }, ErrorKind::io,
               {dir.path.string(), "no config.json"});
}

// ---- bad input ----

TEST(ConfigErrors, UnknownArchitectureListsSupported) {
  const std::vector<std::string> supported = {"LlamaForCausalLM", "Qwen2ForCausalLM",
                                              "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
                                              "MixtralForCausalLM", "DeepseekV2ForCausalLM",
                                              "DeepseekV3ForCausalLM"};
  auto expect_listed = [&](const std::string& text, const std::string& named) {
    std::vector<std::string> fragments = supported;
    fragments.push_back("config.json");
    fragments.push_back(named);
    expect_error([&] { parse(text); }, ErrorKind::unsupported, fragments);
  };
  expect_listed(with(kLlama32_1B, {{"architectures", {"GPT2LMHeadModel"}}}),
                "architecture 'GPT2LMHeadModel' is not supported");
  expect_listed(with(kLlama32_1B, {{"architectures", json()}, {"model_type", "gpt2"}}),
                "model_type 'gpt2' is not supported");
  EXPECT_EQ(model::supported_architectures(),
            "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
            "MixtralForCausalLM, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM");
  expect_error([&] { parse(with(kLlama32_1B, {{"architectures", json()}, {"model_type", json()}})); },
               ErrorKind::invalid_argument,
               {"config.json", "neither 'architectures' nor 'model_type'", "LlamaForCausalLM"});
}

TEST(ConfigErrors, MissingField) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads"}) {
    SCOPED_TRACE(field);
    expect_error([&] { parse(with(kLlama32_1B, {{field, json()}})); }, ErrorKind::invalid_argument,
                 {"config.json: field '" + std::string(field) +
                  "': expected a positive integer, got nothing"});
  }
  expect_error([&] { parse(with(kQwen3_30B_A3B, {{"moe_intermediate_size", json()}})); },
               ErrorKind::invalid_argument, {"field 'moe_intermediate_size'"});
  expect_error([&] { parse(with(kMixtral_8x7B, {{"num_local_experts", json()}})); },
               ErrorKind::invalid_argument, {"field 'num_local_experts'"});
}

TEST(ConfigErrors, BrokenJson) {
  expect_error([&] { parse(R"({"architectures": ["LlamaForCausalLM"], )"); }, ErrorKind::io,
               {"config.json", "not valid JSON"});
  expect_error([&] { parse("[1, 2]"); }, ErrorKind::io, {"config.json", "expected a JSON object"});
  expect_error([&] { parse(kLlama32_1B, "{"); }, ErrorKind::io,
               {"generation_config.json", "not valid JSON"});
}

TEST(ConfigErrors, ZeroHeads) {
  expect_error([&] { parse(with(kLlama32_1B, {{"num_attention_heads", 0}})); },
               ErrorKind::invalid_argument,
               {"config.json: field 'num_attention_heads': expected a positive integer, got 0"});
  expect_error([&] { parse(with(kLlama32_1B, {{"num_key_value_heads", 0}})); },
               ErrorKind::invalid_argument, {"field 'num_key_value_heads'", "got 0"});
}

TEST(ConfigErrors, HeadsNotDivisibleByKvHeads) {
  expect_error([&] { parse(with(kLlama32_1B, {{"num_key_value_heads", 5}})); },
               ErrorKind::invalid_argument,
               {"field 'num_key_value_heads': expected a divisor of num_attention_heads (32), got 5"});
}

TEST(ConfigErrors, WrongTypesAndRanges) {
  expect_error([&] { parse(with(kLlama32_1B, {{"hidden_size", "2048"}})); },
               ErrorKind::invalid_argument, {"field 'hidden_size'", "got \"2048\""});
  expect_error([&] { parse(with(kLlama32_1B, {{"hidden_size", 20.5}})); },
               ErrorKind::invalid_argument, {"field 'hidden_size'", "got 20.5"});
  expect_error([&] { parse(with(kLlama32_1B, {{"rms_norm_eps", -1}})); },
               ErrorKind::invalid_argument, {"field 'rms_norm_eps'", "a number > 0"});
  expect_error([&] { parse(with(kLlama32_1B, {{"tie_word_embeddings", "yes"}})); },
               ErrorKind::invalid_argument, {"field 'tie_word_embeddings'", "true or false"});
  expect_error([&] { parse(with(kLlama32_1B, {{"head_dim", 63}})); }, ErrorKind::invalid_argument,
               {"field 'head_dim'", "even"});
  expect_error([&] { parse(with(kLlama32_1B, {{"head_dim", json()}, {"hidden_size", 2050}})); },
               ErrorKind::invalid_argument, {"field 'head_dim'", "not a multiple"});
  expect_error([&] { parse(with(kLlama32_1B, {{"eos_token_id", {1, "x"}}})); },
               ErrorKind::invalid_argument, {"field 'eos_token_id'"});
  expect_error([&] { parse(with(kLlama32_1B, {{"eos_token_id", json::array()}})); },
               ErrorKind::invalid_argument, {"field 'eos_token_id'", "non-empty list"});
  expect_error([&] { parse(with(kQwen3_30B_A3B, {{"num_experts_per_tok", 129}})); },
               ErrorKind::invalid_argument, {"field 'num_experts_per_tok'", "at most num_experts (128)"});
  expect_error([&] { parse(with(kQwen3_30B_A3B, {{"mlp_only_layers", {3, 48}}})); },
               ErrorKind::invalid_argument, {"field 'mlp_only_layers'", "[0, 48)"});
  expect_error([&] { parse(with(kQwen3_30B_A3B, {{"decoder_sparse_step", 0}})); },
               ErrorKind::invalid_argument, {"field 'decoder_sparse_step'"});
  expect_error([&] { parse(with(kQwen3_06B, {{"partial_rotary_factor", 0.29}})); },
               ErrorKind::invalid_argument, {"field 'partial_rotary_factor'", "even rotary"});
  // Regression (issue 20, through fuzz_config): head_dim x 1e300 was converted to int (undefined
  // behaviour, caught by UBSan) before the range check.
  for (double factor : {1e300, 3e9, 1.5})
    expect_error([&] { parse(with(kQwen3_06B, {{"partial_rotary_factor", factor}})); },
                 ErrorKind::invalid_argument, {"field 'partial_rotary_factor'", "even rotary"});
}

TEST(ConfigErrors, UnknownRopeType) {
  for (const char* type : {"dynamic", "longrope", "linear"}) {
    SCOPED_TRACE(type);
    expect_error([&] { parse(with(kLlama32_1B, {{"rope_scaling", {{"rope_type", type}, {"factor", 2.0}}}})); },
                 ErrorKind::unsupported,
                 {"config.json: field 'rope_scaling.rope_type'", "rope type '" + std::string(type) + "'",
                  "supported: default, llama3, yarn"});
    expect_error([&] { parse(with(to_transformers5(kLlama32_1B),
                                  {{"rope_parameters", {{"rope_type", type}, {"rope_theta", 1e4}, {"factor", 2.0}}}})); },
                 ErrorKind::unsupported, {"field 'rope_parameters.rope_type'", type});
  }
}

TEST(ConfigErrors, IncompleteRopeScaling) {
  expect_error([&] { parse(with(kLlama32_1B, {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0},
                                                                {"high_freq_factor", 4.0},
                                                                {"original_max_position_embeddings", 8192}}}})); },
               ErrorKind::invalid_argument,
               {"field 'rope_scaling.low_freq_factor'", "expected a number > 0, got nothing"});
  expect_error([&] { parse(with(kQwen3_06B, {{"rope_scaling", {{"rope_type", "yarn"}}}})); },
               ErrorKind::invalid_argument, {"field 'rope_scaling.factor'"});
  expect_error([&] { parse(with(kQwen3_06B, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", -2.0}}}})); },
               ErrorKind::invalid_argument, {"field 'rope_scaling.factor'", "got -2.0"});
  // Caught by the rope op's own checks, reported against the config.
  expect_error([&] { parse(with(kLlama32_1B, {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0},
                                                                {"low_freq_factor", 4.0},
                                                                {"high_freq_factor", 4.0},
                                                                {"original_max_position_embeddings", 8192}}}})); },
               ErrorKind::invalid_argument, {"config.json: rope_scaling:", "high_freq_factor"});
  expect_error([&] { parse(with(kLlama32_1B, {{"rope_scaling", "llama3"}})); },
               ErrorKind::invalid_argument, {"field 'rope_scaling'", "an object"});
}

TEST(ConfigErrors, UnsupportedFeatures) {
  expect_error([&] { parse(with(kLlama32_1B, {{"hidden_act", "gelu"}})); }, ErrorKind::unsupported,
               {"field 'hidden_act'", "'gelu'"});
  expect_error([&] { parse(with(kLlama32_1B, {{"mlp_bias", true}})); }, ErrorKind::unsupported,
               {"field 'mlp_bias'"});
  expect_error([&] { parse(with(kLlama32_1B, {{"torch_dtype", "float64"}})); },
               ErrorKind::unsupported, {"field 'torch_dtype'", "'float64'"});
  expect_error([&] { parse(with(kQwen25_05B, {{"use_sliding_window", true}})); },
               ErrorKind::unsupported, {"field 'use_sliding_window'", "sliding-window"});
  expect_error([&] { parse(with(kMixtral_8x7B, {{"sliding_window", 4096}})); },
               ErrorKind::unsupported, {"field 'sliding_window'", "4096"});
  EXPECT_NO_THROW(parse(with(kMixtral_8x7B, {{"sliding_window", 32768}})));  // covers the context
  expect_error([&] { parse(with(kQwen3_06B, {{"layer_types", {"full_attention", "sliding_attention"}}})); },
               ErrorKind::unsupported, {"field 'layer_types'", "sliding_attention"});
}

// compressed-tensors fp8 as llm-compressor writes it: FP8-dynamic (a scale per channel, dynamic
// per-token activations), static FP8 (a scale per matrix, static activation scales, which the
// engine does not use and says so in a note) and FP8-block (128 x 128 scales, as quant_method
// fp8 but named "<name>_scale"); other schemes are refused naming the field.
json compressed_tensors(const std::string& weight_strategy, const json& activations) {
  const json weights = {{"actorder", nullptr}, {"block_structure", nullptr}, {"dynamic", false},
                        {"group_size", nullptr}, {"num_bits", 8}, {"observer", "minmax"},
                        {"strategy", weight_strategy}, {"symmetric", true}, {"type", "float"}};
  return {{"config_groups",
           {{"group_0", {{"input_activations", activations}, {"output_activations", nullptr},
                         {"targets", {"Linear"}}, {"weights", weights}}}}},
          {"format", "float-quantized"}, {"ignore", {"lm_head"}}, {"kv_cache_scheme", nullptr},
          {"quant_method", "compressed-tensors"}, {"quantization_status", "compressed"}};
}

TEST(Config, CompressedTensorsFp8) {
  const json dynamic = {{"dynamic", true}, {"num_bits", 8}, {"strategy", "token"},
                        {"symmetric", true}, {"type", "float"}};
  const json fixed = {{"dynamic", false}, {"num_bits", 8}, {"strategy", "tensor"},
                      {"symmetric", true}, {"type", "float"}};
  const ModelConfig channel =
      parse(with(kLlama32_1B, {{"quantization_config", compressed_tensors("channel", dynamic)}}));
  EXPECT_EQ(channel.weights, model::WeightFormat::fp8_per_channel);
  EXPECT_FALSE(channel.fp8_scale_per_tensor);
  EXPECT_TRUE(channel.notes.empty());
  const ModelConfig tensor =
      parse(with(kLlama32_1B, {{"quantization_config", compressed_tensors("tensor", fixed)}}));
  EXPECT_EQ(tensor.weights, model::WeightFormat::fp8_per_channel);
  EXPECT_TRUE(tensor.fp8_scale_per_tensor);
  ASSERT_EQ(tensor.notes.size(), 1u);
  EXPECT_NE(tensor.notes[0].find("input_scale"), std::string::npos) << tensor.notes[0];
  json with_kv = compressed_tensors("channel", dynamic);
  with_kv["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}};
  const ModelConfig kv = parse(with(kLlama32_1B, {{"quantization_config", with_kv}}));
  ASSERT_EQ(kv.notes.size(), 1u);
  EXPECT_NE(kv.notes[0].find("kv_cache_scheme"), std::string::npos) << kv.notes[0];

  json block = compressed_tensors("block", dynamic);
  block["config_groups"]["group_0"]["weights"]["block_structure"] = {128, 128};
  const ModelConfig blocks = parse(with(kLlama32_1B, {{"quantization_config", block}}));
  EXPECT_EQ(blocks.weights, model::WeightFormat::fp8_blocks);
  EXPECT_EQ(blocks.fp8_scale_suffix, "_scale");
  EXPECT_EQ(channel.fp8_scale_suffix, "_scale");
  block["config_groups"]["group_0"]["weights"]["block_structure"] = {64, 64};
  expect_error([&] { parse(with(kLlama32_1B, {{"quantization_config", block}})); },
               ErrorKind::unsupported, {"config_groups.group_0.weights", "[128, 128]"});

  json grouped = compressed_tensors("group", dynamic);
  expect_error([&] { parse(with(kLlama32_1B, {{"quantization_config", grouped}})); },
               ErrorKind::unsupported, {"config_groups.group_0.weights", "\"group\""});
  json four_bits = compressed_tensors("channel", dynamic);
  four_bits["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
  expect_error([&] { parse(with(kLlama32_1B, {{"quantization_config", four_bits}})); },
               ErrorKind::unsupported, {"config_groups.group_0.weights", "8-bit float"});
  json int8_activations = compressed_tensors("channel", dynamic);
  int8_activations["config_groups"]["group_0"]["input_activations"]["type"] = "int";
  expect_error([&] { parse(with(kLlama32_1B, {{"quantization_config", int8_activations}})); },
               ErrorKind::unsupported, {"config_groups.group_0.input_activations"});
}

// Loader limits (issue 20): sizes no model has are refused while parsing, before anything is
// sized from them, with the field and the limit named. 2^40 does not fit an int; 10^6 layers and
// the others do, and used to be accepted.
TEST(ConfigErrors, AbsurdSizesRefusedNamingTheField) {
  const std::vector<std::pair<std::string, json>> absurd = {
      {"vocab_size", int64_t{1} << 40},        {"num_hidden_layers", 1000000},
      {"vocab_size", 1 << 30},                 {"hidden_size", 1 << 30},
      {"intermediate_size", 2000000000},       {"num_attention_heads", 1 << 20},
      {"num_key_value_heads", 1 << 20},        {"head_dim", 1 << 20},
      {"max_position_embeddings", 2000000000},
  };
  for (const auto& entry : absurd) {
    const std::string& field = entry.first;  // (clang 14: no structured bindings in lambdas)
    const json& value = entry.second;
    SCOPED_TRACE(field + " = " + value.dump());
    expect_error([&] { parse(with(kLlama32_1B, {{field, value}})); }, ErrorKind::invalid_argument,
                 {"config.json: field '" + field + "'", "at most", "got " + value.dump()});
  }
  expect_error([&] { parse(with(kQwen3_30B_A3B, {{"num_experts", 1 << 20}})); },
               ErrorKind::invalid_argument, {"field 'num_experts'", "at most"});
  expect_error([&] { parse(with(kQwen3_30B_A3B, {{"moe_intermediate_size", 1 << 30}})); },
               ErrorKind::invalid_argument, {"field 'moe_intermediate_size'", "at most"});
  // Each within its limit, but heads x head_dim past what a row of q can hold.
  expect_error([&] { parse(with(kLlama32_1B, {{"num_attention_heads", 4096}, {"num_key_value_heads", 4096},
                                              {"head_dim", 4096}})); },
               ErrorKind::invalid_argument, {"field 'head_dim'", "num_attention_heads"});
}

}  // namespace
}  // namespace braid::test
