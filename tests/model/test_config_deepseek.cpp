// config.json of DeepSeek models: the published DeepSeek-V2-Lite, DeepSeek-V3 (fp8) and
// DeepSeek-OCR configs parse to the values their checkpoints need (MLA widths, routing, shared
// experts, the YaRN softmax scale), and routing or attention options the engine does not run are
// refused naming the field.
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "test_util.h"

namespace braid::test {
namespace {

using nlohmann::json;
using model::Arch;
using model::ModelConfig;

// deepseek-ai/DeepSeek-V2-Lite (transformers 4 spelling, q_lora_rank null: plain q_proj).
const char* kDeepseekV2Lite = R"({
  "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": false, "aux_loss_alpha": 0.001,
  "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840,
  "model_type": "deepseek_v2", "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1,
  "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": false,
  "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27,
  "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": null, "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                   "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 1, "topk_method": "greedy",
  "torch_dtype": "bfloat16", "use_cache": true, "v_head_dim": 128, "vocab_size": 102400
})";

// deepseek-ai/DeepSeek-V3 (fp8 blocks, q LoRA, noaux_tc).
const char* kDeepseekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "bos_token_id": 0,
  "eos_token_id": 1, "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
  "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
  "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
  "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
  "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "use_cache": true, "v_head_dim": 128, "vocab_size": 129280
})";

// deepseek-ai/DeepSeek-OCR: the language model in language_config (use_mla false), the dtype at
// the top level too; the vision parts are not read.
const char* kDeepseekOcr = R"({
  "architectures": ["DeepseekOCRForCausalLM"], "model_type": "deepseek_vl_v2",
  "torch_dtype": "bfloat16",
  "language_config": {
    "architectures": ["DeepseekV2ForCausalLM"], "bos_token_id": 0, "eos_token_id": 1,
    "first_k_dense_replace": 1, "hidden_size": 1280, "intermediate_size": 6848,
    "kv_lora_rank": null, "lm_head": true, "max_position_embeddings": 8192,
    "moe_intermediate_size": 896, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2,
    "num_attention_heads": 10, "num_experts_per_tok": 6, "num_hidden_layers": 12,
    "num_key_value_heads": 10, "q_lora_rank": null, "qk_nope_head_dim": 0,
    "qk_rope_head_dim": 0, "rm_head": false, "topk_group": 1, "topk_method": "greedy",
    "torch_dtype": "bfloat16", "use_mla": false, "v_head_dim": 0, "vocab_size": 129280
  },
  "projector_config": {"input_dim": 2048, "model_type": "mlp_projector", "n_embed": 1280,
                       "projector_type": "linear"},
  "vision_config": {"image_size": 1024, "model_type": "vision"}
})";

std::string with(const std::string& text, const json& changes) {
  json j = json::parse(text);
  for (const auto& [k, v] : changes.items()) j[k] = v;
  return j.dump();
}

ModelConfig parse(const std::string& text) { return model::parse_config(text, ""); }

// transformers' yarn_get_mscale(factor, m)^2 times the q head width's inverse square root.
float yarn_softmax_scale(int q_head_dim, double factor, double mscale_all_dim) {
  const double m = 0.1 * mscale_all_dim * std::log(factor) + 1.0;
  return static_cast<float>(m * m / std::sqrt(double(q_head_dim)));
}

TEST(ConfigDeepseek, V2Lite) {
  const ModelConfig m = parse(kDeepseekV2Lite);
  EXPECT_EQ(m.arch, Arch::deepseek_v2);
  EXPECT_TRUE(m.mla());
  EXPECT_EQ(m.q_lora_rank, 0);  // null: q_proj
  EXPECT_EQ(m.kv_lora_rank, 512);
  EXPECT_EQ(m.qk_nope_head_dim, 128);
  EXPECT_EQ(m.qk_rope_head_dim, 64);
  EXPECT_EQ(m.v_head_dim, 128);
  EXPECT_EQ(m.head_dim, 64);  // the rotary width
  EXPECT_EQ(m.rope.rotary_dim, 64);
  EXPECT_TRUE(m.rope.interleaved);
  EXPECT_EQ(m.rope.scaling, ops::RopeScaling::yarn);
  EXPECT_EQ(m.mla_cache_dim(), 576);
  EXPECT_EQ(m.mla_first_proj_dim(), 16 * 192 + 576);
  EXPECT_EQ(m.cache_heads(), 1);
  EXPECT_EQ(m.cache_key_dim(), 576);
  EXPECT_EQ(m.cache_value_dim(), 0);
  EXPECT_FLOAT_EQ(m.attention_scale(), yarn_softmax_scale(192, 40, 0.707));
  EXPECT_EQ(m.num_experts, 64);
  EXPECT_EQ(m.experts_per_token, 6);
  EXPECT_EQ(m.moe_intermediate_size, 1408);
  EXPECT_EQ(m.n_shared_experts, 2);
  EXPECT_EQ(m.router, ModelConfig::Router::softmax_grouped);
  EXPECT_EQ(m.n_group, 1);
  EXPECT_EQ(m.topk_group, 1);
  EXPECT_FALSE(m.norm_topk_prob);
  EXPECT_FLOAT_EQ(m.routed_scaling_factor, 1.0f);
  EXPECT_FALSE(m.layer_is_moe(0));
  for (int l = 1; l < m.num_layers; ++l) EXPECT_TRUE(m.layer_is_moe(l)) << l;
}

TEST(ConfigDeepseek, V3Fp8) {
  const ModelConfig m = parse(kDeepseekV3);
  EXPECT_EQ(m.arch, Arch::deepseek_v3);
  EXPECT_EQ(m.weights, model::WeightFormat::fp8_blocks);
  EXPECT_EQ(m.q_lora_rank, 1536);
  EXPECT_EQ(m.mla_first_proj_dim(), 1536 + 576);
  EXPECT_TRUE(m.rope.interleaved);  // rope_interleave absent: transformers' default
  EXPECT_FLOAT_EQ(m.attention_scale(), yarn_softmax_scale(192, 40, 1.0));
  EXPECT_EQ(m.router, ModelConfig::Router::sigmoid_grouped);
  EXPECT_EQ(m.n_group, 8);
  EXPECT_EQ(m.topk_group, 4);
  EXPECT_TRUE(m.norm_topk_prob);
  EXPECT_FLOAT_EQ(m.routed_scaling_factor, 2.5f);
  for (int l = 0; l < m.num_layers; ++l) EXPECT_EQ(m.layer_is_moe(l), l >= 3) << l;
  EXPECT_FALSE(parse(with(kDeepseekV3, {{"rope_interleave", false}})).rope.interleaved);
  // moe_layer_freq (the original code's rule; every released model has 1).
  const ModelConfig every_other = parse(with(kDeepseekV3, {{"moe_layer_freq", 2}}));
  for (int l = 0; l < 8; ++l) EXPECT_EQ(every_other.layer_is_moe(l), l >= 3 && l % 2 == 0) << l;
}

TEST(ConfigDeepseek, OcrLanguageModel) {
  const ModelConfig m = parse(kDeepseekOcr);
  EXPECT_EQ(m.arch, Arch::deepseek_v2);
  EXPECT_FALSE(m.mla());  // use_mla false: plain multi-head attention
  EXPECT_EQ(m.dtype, DType::bf16);
  EXPECT_EQ(m.hidden_size, 1280);
  EXPECT_EQ(m.num_heads, 10);
  EXPECT_EQ(m.num_kv_heads, 10);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_FALSE(m.rope.interleaved);
  EXPECT_FLOAT_EQ(m.attention_scale(), 1.0f / std::sqrt(128.0f));
  EXPECT_EQ(m.cache_heads(), 10);
  EXPECT_EQ(m.cache_value_dim(), 128);
  EXPECT_EQ(m.num_experts, 64);
  EXPECT_EQ(m.n_shared_experts, 2);
  EXPECT_EQ(m.router, ModelConfig::Router::softmax_grouped);
  EXPECT_EQ(m.bos_token_id, 0);
  EXPECT_EQ(m.eos_token_ids, std::vector<int>{1});
  EXPECT_FALSE(m.layer_is_moe(0));
  EXPECT_TRUE(m.layer_is_moe(11));
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_NE(m.notes[0].find("vision encoder"), std::string::npos);
  EXPECT_TRUE(parse(kDeepseekV2Lite).notes.empty());
  // Without language_config the top level is read, as for any model: deepseek_vl_v2 is not one.
  json top = json::parse(kDeepseekOcr);
  top.erase("language_config");
  expect_error([&] { parse(top.dump()); }, ErrorKind::unsupported, {"DeepseekOCRForCausalLM"});
}

TEST(ConfigDeepseek, DefaultsAndGroups) {
  // group_limited_greedy reads the groups; n_routed_experts null is a dense model.
  const ModelConfig g = parse(with(kDeepseekV2Lite, {{"topk_method", "group_limited_greedy"},
                                                     {"n_group", 8}, {"topk_group", 3}}));
  EXPECT_EQ(g.n_group, 8);
  EXPECT_EQ(g.topk_group, 3);
  const ModelConfig dense = parse(with(kDeepseekV2Lite, {{"n_routed_experts", nullptr}}));
  EXPECT_EQ(dense.num_experts, 0);
  EXPECT_FALSE(dense.layer_is_moe(5));
  const ModelConfig no_shared = parse(with(kDeepseekV2Lite, {{"n_shared_experts", nullptr}}));
  EXPECT_EQ(no_shared.n_shared_experts, 0);
  // No rope scaling: the plain inverse square root of the q head width.
  json plain = json::parse(kDeepseekV2Lite);
  plain.erase("rope_scaling");
  EXPECT_FLOAT_EQ(parse(plain.dump()).attention_scale(), 1.0f / std::sqrt(192.0f));
}

TEST(ConfigDeepseekErrors, RoutingTheEngineDoesNotRun) {
  expect_error([&] { parse(with(kDeepseekV2Lite, {{"topk_method", "noaux_tc"}})); },
               ErrorKind::unsupported, {"field 'topk_method'", "noaux_tc", "DeepseekV2ForCausalLM"});
  expect_error([&] { parse(with(kDeepseekV3, {{"topk_method", "greedy"}})); },
               ErrorKind::unsupported, {"field 'topk_method'", "greedy"});
  expect_error([&] { parse(with(kDeepseekV3, {{"scoring_func", "softmax"}})); },
               ErrorKind::unsupported, {"field 'scoring_func'", "softmax"});
  expect_error([&] { parse(with(kDeepseekV2Lite, {{"scoring_func", "sqrtsoftplus"}})); },
               ErrorKind::unsupported, {"field 'scoring_func'", "sqrtsoftplus"});
  expect_error([&] { parse(with(kDeepseekV3, {{"norm_topk_prob", false}})); },
               ErrorKind::unsupported, {"field 'norm_topk_prob'"});
  expect_error([&] { parse(with(kDeepseekV3, {{"n_group", 7}})); },
               ErrorKind::invalid_argument, {"field 'n_group'", "divisor"});
  expect_error([&] { parse(with(kDeepseekV3, {{"topk_group", 9}})); },
               ErrorKind::invalid_argument, {"field 'topk_group'"});
  expect_error([&] { parse(with(kDeepseekV3, {{"n_group", 64}, {"topk_group", 1}})); },
               ErrorKind::invalid_argument, {"field 'topk_group'", "num_experts_per_tok"});
  expect_error([&] { parse(with(kDeepseekV3, {{"n_routed_experts", 1024}})); },
               ErrorKind::invalid_argument, {"field 'n_routed_experts'"});
  expect_error([&] { parse(with(kDeepseekV3, {{"num_experts_per_tok", 300}})); },
               ErrorKind::invalid_argument, {"field 'num_experts_per_tok'"});
}

TEST(ConfigDeepseekErrors, AttentionShapes) {
  expect_error([&] { parse(with(kDeepseekV3, {{"qk_rope_head_dim", 63}})); },
               ErrorKind::invalid_argument, {"field 'qk_rope_head_dim'", "even"});
  expect_error([&] { parse(with(kDeepseekV3, {{"kv_lora_rank", 0}})); },
               ErrorKind::invalid_argument, {"field 'kv_lora_rank'"});
  expect_error([&] { parse(with(kDeepseekV3, {{"v_head_dim", 4096}})); },
               ErrorKind::invalid_argument, {"field 'v_head_dim'", "query width"});
  expect_error([&] { parse(with(kDeepseekV3, {{"attention_bias", true}})); },
               ErrorKind::unsupported, {"field 'attention_bias'"});
  expect_error([&] { parse(with(kDeepseekOcr, {{"language_config", "x"}})); },
               ErrorKind::invalid_argument, {"field 'language_config'", "an object"});
}

}  // namespace
}  // namespace braid::test
