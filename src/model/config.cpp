// config.json parsing. Every value is checked for type and range as it is read, and a failure
// names the file and the field; defaults are those of the transformers config class of the family.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "braid/error.h"

namespace braid::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct ArchInfo {
  Arch arch;
  std::string_view name;        // "architectures"[0]
  std::string_view model_type;  // "model_type"
};

constexpr ArchInfo kArchs[] = {
    {Arch::llama, "LlamaForCausalLM", "llama"},
    {Arch::qwen2, "Qwen2ForCausalLM", "qwen2"},
    {Arch::qwen3, "Qwen3ForCausalLM", "qwen3"},
    {Arch::qwen3_moe, "Qwen3MoeForCausalLM", "qwen3_moe"},
    {Arch::mixtral, "MixtralForCausalLM", "mixtral"},
    {Arch::deepseek_v2, "DeepseekV2ForCausalLM", "deepseek_v2"},
    {Arch::deepseek_v3, "DeepseekV3ForCausalLM", "deepseek_v3"},
};

// One JSON object being read: its file and, for nested objects, the path to it ("rope_scaling.").
struct Source {
  const json& obj;
  std::string file;
  std::string prefix;
};

std::string describe_value(const json* v) { return v == nullptr ? "nothing" : v->dump(); }

[[noreturn]] void field_error(ErrorKind kind, const Source& s, const std::string& key,
                              const std::string& expected, const json* got) {
  throw Error(kind, s.file + ": field '" + s.prefix + key + "': expected " + expected + ", got " +
                        describe_value(got));
}

[[noreturn]] void unsupported(const Source& s, const std::string& key, const std::string& what) {
  throw Error(ErrorKind::unsupported, s.file + ": field '" + s.prefix + key + "': " + what);
}

// The value, or nullptr when the field is absent or null (configs write null for "unset").
const json* get(const Source& s, const char* key) {
  auto it = s.obj.find(key);
  return it == s.obj.end() || it->is_null() ? nullptr : &*it;
}

// Integers may be written as 32768 or 32768.0; anything else, or out of int range, is rejected.
bool as_int(const json& v, int& out) {
  double d = 0;
  if (v.is_number_integer() || v.is_number_unsigned()) {
    d = v.is_number_unsigned() ? static_cast<double>(v.get<uint64_t>())
                               : static_cast<double>(v.get<int64_t>());
  } else if (v.is_number_float()) {
    d = v.get<double>();
    if (d != std::floor(d)) return false;
  } else {
    return false;
  }
  if (d < std::numeric_limits<int>::min() || d > std::numeric_limits<int>::max()) return false;
  out = static_cast<int>(d);
  return true;
}

constexpr int kNoLimit = std::numeric_limits<int>::max();

// An integer >= min and <= max (one of the loader limits of config.h). Too large for an int is
// reported as past the limit too: 2^40 and 10^6 get the same message.
int read_int(const Source& s, const char* key, const json* v, int min, int max = kNoLimit) {
  int out = 0;
  if (max != kNoLimit && v->is_number() && v->get<double>() > max)
    field_error(ErrorKind::invalid_argument, s, key,
                "at most " + std::to_string(max) + " (braidinfer's limit; no model is this large)",
                v);
  if (!as_int(*v, out) || out < min)
    field_error(ErrorKind::invalid_argument, s, key,
                min == 1 ? "a positive integer" : "an integer >= " + std::to_string(min), v);
  return out;
}

int required_int(const Source& s, const char* key, int min = 1, int max = kNoLimit) {
  const json* v = get(s, key);
  if (v == nullptr)
    field_error(ErrorKind::invalid_argument, s, key,
                min == 1 ? "a positive integer" : "an integer >= " + std::to_string(min), v);
  return read_int(s, key, v, min, max);
}

int optional_int(const Source& s, const char* key, int fallback, int min = 1,
                 int max = kNoLimit) {
  const json* v = get(s, key);
  return v == nullptr ? fallback : read_int(s, key, v, min, max);
}

// A finite number > 0 (or >= 0 when zero_ok).
double optional_number(const Source& s, const char* key, double fallback, bool zero_ok = false) {
  const json* v = get(s, key);
  if (v == nullptr) return fallback;
  const bool ok = v->is_number() && std::isfinite(v->get<double>()) &&
                  (zero_ok ? v->get<double>() >= 0 : v->get<double>() > 0);
  if (!ok) field_error(ErrorKind::invalid_argument, s, key,
                       zero_ok ? "a number >= 0" : "a number > 0", v);
  return v->get<double>();
}

double required_number(const Source& s, const char* key) {
  if (get(s, key) == nullptr)
    field_error(ErrorKind::invalid_argument, s, key, "a number > 0", nullptr);
  return optional_number(s, key, 0.0);
}

bool optional_bool(const Source& s, const char* key, bool fallback) {
  const json* v = get(s, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) field_error(ErrorKind::invalid_argument, s, key, "true or false", v);
  return v->get<bool>();
}

std::string optional_string(const Source& s, const char* key, const std::string& fallback) {
  const json* v = get(s, key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) field_error(ErrorKind::invalid_argument, s, key, "a string", v);
  return v->get<std::string>();
}

json parse_object(const std::string& text, const std::string& file) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::io, file + ": not valid JSON: " + e.what());
  }
  if (!j.is_object())
    throw Error(ErrorKind::io, file + ": expected a JSON object, got " + std::string(j.type_name()));
  return j;
}

Arch detect_arch(const Source& s) {
  const json* archs = get(s, "architectures");
  if (archs != nullptr && !(archs->is_array() && (archs->empty() || (*archs)[0].is_string())))
    field_error(ErrorKind::invalid_argument, s, "architectures", "a list of names", archs);
  if (archs != nullptr && !archs->empty()) {
    const std::string name = (*archs)[0].get<std::string>();
    for (const auto& a : kArchs)
      if (a.name == name) return a.arch;
    throw Error(ErrorKind::unsupported, s.file + ": architecture '" + name +
                                            "' is not supported (supported: " +
                                            supported_architectures() + ")");
  }
  const json* type = get(s, "model_type");
  if (type == nullptr)
    throw Error(ErrorKind::invalid_argument,
                s.file + ": neither 'architectures' nor 'model_type' names the model (supported: " +
                    supported_architectures() + ")");
  if (!type->is_string())
    field_error(ErrorKind::invalid_argument, s, "model_type", "a string", type);
  const std::string mt = type->get<std::string>();
  for (const auto& a : kArchs)
    if (a.model_type == mt) return a.arch;
  throw Error(ErrorKind::unsupported, s.file + ": model_type '" + mt +
                                          "' is not supported (supported: " +
                                          supported_architectures() + ")");
}

DType parse_dtype(const Source& s) {
  // transformers 5 writes "dtype", 4 writes "torch_dtype"; absent means transformers' float32.
  const char* key = get(s, "dtype") != nullptr ? "dtype" : "torch_dtype";
  const std::string name = optional_string(s, key, "float32");
  if (name == "bfloat16") return DType::bf16;
  if (name == "float16") return DType::f16;
  if (name == "float32") return DType::f32;
  unsupported(s, key, "checkpoint dtype '" + name + "' is not supported (bfloat16, float16, float32)");
}

// rope_theta and scaling, from transformers 5's "rope_parameters" or 4's "rope_theta" +
// "rope_scaling" (4's values may also sit inside rope_parameters: both spellings are read).
void parse_rope(const Source& cfg, ModelConfig& m, double default_theta) {
  const char* key = get(cfg, "rope_parameters") != nullptr ? "rope_parameters" : "rope_scaling";
  const json* p = get(cfg, key);
  if (p != nullptr && !p->is_object())
    field_error(ErrorKind::invalid_argument, cfg, key, "an object", p);
  static const json empty = json::object();
  const Source rp{p != nullptr ? *p : empty, cfg.file, std::string(key) + "."};
  for (const auto& [name, value] : rp.obj.items())
    if (value.is_object())  // transformers 5 nests per-layer-type parameters: not these families
      unsupported(rp, name, "per-layer-type rope parameters are not supported");

  m.rope = ops::RopeConfig{};
  const double top_theta = optional_number(cfg, "rope_theta", default_theta);
  m.rope.theta = static_cast<float>(optional_number(rp, "rope_theta", top_theta));

  // partial_rotary_factor: top level in transformers 4, inside rope_parameters in 5.
  const Source& ps = get(rp, "partial_rotary_factor") != nullptr ? rp : cfg;
  const double partial = optional_number(ps, "partial_rotary_factor", 1.0);
  m.rope.rotary_dim = m.head_dim;
  if (partial != 1.0) {
    // A factor above 1 is refused before the product is converted: a huge one does not fit int.
    m.rope.rotary_dim = partial > 1.0 ? 0 : static_cast<int>(m.head_dim * partial);
    if (m.rope.rotary_dim <= 0 || m.rope.rotary_dim % 2 != 0 || m.rope.rotary_dim > m.head_dim)
      field_error(ErrorKind::invalid_argument, ps, "partial_rotary_factor",
                  "a factor giving an even rotary dimension <= head_dim (" +
                      std::to_string(m.head_dim) + ")",
                  get(ps, "partial_rotary_factor"));
  }

  const char* type_key = get(rp, "rope_type") != nullptr ? "rope_type" : "type";
  const std::string type = optional_string(rp, type_key, "default");
  if (type == "default") {
    m.rope.scaling = ops::RopeScaling::none;
  } else if (type == "llama3") {
    m.rope.scaling = ops::RopeScaling::llama3;
    m.rope.factor = static_cast<float>(required_number(rp, "factor"));
    m.rope.low_freq_factor = static_cast<float>(required_number(rp, "low_freq_factor"));
    m.rope.high_freq_factor = static_cast<float>(required_number(rp, "high_freq_factor"));
    m.rope.original_max_position =
        required_int(rp, "original_max_position_embeddings", 1, kMaxPositions);
  } else if (type == "yarn") {
    m.rope.scaling = ops::RopeScaling::yarn;
    m.rope.original_max_position =
        optional_int(rp, "original_max_position_embeddings", m.max_position_embeddings, 1,
                     kMaxPositions);
    // transformers 5: without a factor, the context extension ratio is the factor.
    if (get(rp, "factor") == nullptr && get(rp, "original_max_position_embeddings") == nullptr)
      field_error(ErrorKind::invalid_argument, rp, "factor",
                  "a number > 0 (or original_max_position_embeddings)", nullptr);
    m.rope.factor = static_cast<float>(optional_number(
        rp, "factor",
        static_cast<double>(m.max_position_embeddings) / m.rope.original_max_position));
    // transformers reads beta_fast/beta_slow with `or`: 0 means the default too.
    m.rope.beta_fast = static_cast<float>(optional_number(rp, "beta_fast", 0.0, true));
    if (m.rope.beta_fast == 0.0f) m.rope.beta_fast = 32.0f;
    m.rope.beta_slow = static_cast<float>(optional_number(rp, "beta_slow", 0.0, true));
    if (m.rope.beta_slow == 0.0f) m.rope.beta_slow = 1.0f;
    m.rope.mscale = static_cast<float>(optional_number(rp, "mscale", 0.0, true));
    m.rope.mscale_all_dim = static_cast<float>(optional_number(rp, "mscale_all_dim", 0.0, true));
    m.rope.attention_factor = static_cast<float>(optional_number(rp, "attention_factor", 0.0, true));
    m.rope.truncate = optional_bool(rp, "truncate", true);
  } else {
    unsupported(rp, type_key,
                "rope type '" + type + "' is not supported (supported: default, llama3, yarn)");
  }

  // The rope op's own checks (the same ones it runs at every call) catch what is left.
  try {
    (void)ops::rope_table(m.rope, m.head_dim);
  } catch (const Error& e) {
    throw Error(ErrorKind::invalid_argument, cfg.file + ": " + key + ": " + e.what());
  }
}

void parse_moe(const Source& s, ModelConfig& m) {
  const char* experts_key = get(s, "num_experts") != nullptr ? "num_experts" : "num_local_experts";
  m.num_experts = required_int(s, experts_key, 1, kMaxExperts);
  m.experts_per_token = required_int(s, "num_experts_per_tok");
  if (m.experts_per_token > m.num_experts)
    field_error(ErrorKind::invalid_argument, s, "num_experts_per_tok",
                "at most " + std::string(experts_key) + " (" + std::to_string(m.num_experts) + ")",
                get(s, "num_experts_per_tok"));
  if (m.arch == Arch::mixtral) {
    // Mixtral's experts are intermediate_size wide and its router always renormalises top-k.
    m.moe_intermediate_size = m.intermediate_size;
    m.norm_topk_prob = true;
    return;
  }
  m.moe_intermediate_size = required_int(s, "moe_intermediate_size", 1, kMaxIntermediateSize);
  m.norm_topk_prob = optional_bool(s, "norm_topk_prob", false);  // Qwen3MoeConfig's default
  m.decoder_sparse_step = optional_int(s, "decoder_sparse_step", 1);
  const json* only = get(s, "mlp_only_layers");
  if (only == nullptr) return;
  if (!only->is_array())
    field_error(ErrorKind::invalid_argument, s, "mlp_only_layers", "a list of layer indices", only);
  for (const json& v : *only) {
    int layer = 0;
    if (!as_int(v, layer) || layer < 0 || layer >= m.num_layers)
      field_error(ErrorKind::invalid_argument, s, "mlp_only_layers",
                  "layer indices in [0, " + std::to_string(m.num_layers) + ")", only);
    m.mlp_only_layers.push_back(layer);
  }
}

// A field that is written as null means something else than one left out (DeepSeek's q_lora_rank:
// null is "no q LoRA", absent is transformers' default).
bool written_null(const Source& s, const char* key) {
  auto it = s.obj.find(key);
  return it != s.obj.end() && it->is_null();
}

// DeepSeek-V2/V3 attention: MLA widths (transformers' defaults for absent fields), or plain
// multi-head attention with use_mla false (DeepSeek-OCR's language model).
void parse_deepseek_attention(const Source& s, ModelConfig& m) {
  if (!optional_bool(s, "use_mla", true)) return;
  m.kv_lora_rank = optional_int(s, "kv_lora_rank", 512, 1, kMaxHiddenSize);
  m.q_lora_rank = written_null(s, "q_lora_rank") ? 0 : optional_int(s, "q_lora_rank", 1536, 1, kMaxHiddenSize);
  m.qk_nope_head_dim = optional_int(s, "qk_nope_head_dim", 128, 1, kMaxHeadDim);
  m.qk_rope_head_dim = optional_int(s, "qk_rope_head_dim", 64, 2, kMaxHeadDim);
  m.v_head_dim = optional_int(s, "v_head_dim", 128, 1, kMaxHeadDim);
  if (m.qk_rope_head_dim % 2 != 0)
    field_error(ErrorKind::invalid_argument, s, "qk_rope_head_dim", "an even number (RoPE rotates pairs)",
                get(s, "qk_rope_head_dim"));
  for (auto [key, width] : {std::pair{"qk_nope_head_dim", m.mla_q_head_dim()}, {"v_head_dim", m.v_head_dim}})
    if (int64_t{m.num_heads} * width > kMaxQDim)
      field_error(ErrorKind::invalid_argument, s, key,
                  "at most " + std::to_string(kMaxQDim) + " / num_attention_heads (" +
                      std::to_string(m.num_heads) + ") per head (braidinfer's limit on the query width)",
                  get(s, key));
  m.head_dim = m.qk_rope_head_dim;  // what RoPE rotates
}

// DeepSeek-V2/V3 MoE: shared experts, dense first layers, and the router (topk_method,
// scoring_func). n_routed_experts null (or absent) is a dense model.
void parse_deepseek_moe(const Source& s, ModelConfig& m) {
  const bool v3 = m.arch == Arch::deepseek_v3;
  if (get(s, "n_routed_experts") == nullptr) return;
  m.num_experts = required_int(s, "n_routed_experts", 1, ops::kMoeMaxExperts);
  m.experts_per_token = required_int(s, "num_experts_per_tok", 1, ops::kMoeMaxTopK);
  if (m.experts_per_token > m.num_experts)
    field_error(ErrorKind::invalid_argument, s, "num_experts_per_tok",
                "at most n_routed_experts (" + std::to_string(m.num_experts) + ")",
                get(s, "num_experts_per_tok"));
  m.moe_intermediate_size = optional_int(s, "moe_intermediate_size", v3 ? 2048 : 1407, 1, kMaxIntermediateSize);
  m.n_shared_experts = written_null(s, "n_shared_experts") ? 0 : optional_int(s, "n_shared_experts", v3 ? 1 : 2, 0, 64);
  m.first_k_dense_replace = optional_int(s, "first_k_dense_replace", v3 ? 3 : 0, 0);
  m.moe_layer_freq = optional_int(s, "moe_layer_freq", 1);
  m.routed_scaling_factor = static_cast<float>(optional_number(s, "routed_scaling_factor", v3 ? 2.5 : 1.0));

  const std::string method = optional_string(s, "topk_method", v3 ? "noaux_tc" : "greedy");
  const std::string scoring = optional_string(s, "scoring_func", v3 ? "sigmoid" : "softmax");
  // What transformers runs: V2 softmax with greedy or group-limited top-k, V3 sigmoid noaux_tc.
  if (v3 ? method != "noaux_tc" : method != "greedy" && method != "group_limited_greedy")
    unsupported(s, "topk_method", "topk_method '" + method + "' is not supported for " +
                                      std::string(arch_name(m.arch)) +
                                      (v3 ? " (noaux_tc)" : " (greedy, group_limited_greedy)"));
  if (scoring != (v3 ? "sigmoid" : "softmax"))
    unsupported(s, "scoring_func", "scoring_func '" + scoring + "' is not supported for " +
                                       std::string(arch_name(m.arch)) + (v3 ? " (sigmoid)" : " (softmax)"));
  if (v3) {
    m.router = ModelConfig::Router::sigmoid_grouped;
    m.norm_topk_prob = optional_bool(s, "norm_topk_prob", true);
    if (!m.norm_topk_prob)
      unsupported(s, "norm_topk_prob", "sigmoid routing without renormalised weights is not supported");
  } else {
    m.router = ModelConfig::Router::softmax_grouped;
    // The original DeepSeek-V2 code renormalises when norm_topk_prob (and k > 1), and then does
    // not scale; transformers 5 ignores the flag. Every released V2 checkpoint has it false,
    // where both agree.
    m.norm_topk_prob = optional_bool(s, "norm_topk_prob", false) && m.experts_per_token > 1;
    if (m.norm_topk_prob) m.routed_scaling_factor = 1.0f;
  }
  if (v3 || method == "group_limited_greedy") {
    m.n_group = optional_int(s, "n_group", v3 ? 8 : 1, 1, m.num_experts);
    m.topk_group = optional_int(s, "topk_group", v3 ? 4 : 1, 1, m.n_group);
  }
  if (m.num_experts % m.n_group != 0)
    field_error(ErrorKind::invalid_argument, s, "n_group",
                "a divisor of n_routed_experts (" + std::to_string(m.num_experts) + ")", get(s, "n_group"));
  if (int64_t{m.topk_group} * (m.num_experts / m.n_group) < m.experts_per_token)
    field_error(ErrorKind::invalid_argument, s, "topk_group",
                "enough groups to hold num_experts_per_tok (" + std::to_string(m.experts_per_token) +
                    ") experts",
                get(s, "topk_group"));
}

// The softmax scale DeepSeek's attention uses: (q head width)^-0.5, times YaRN's
// mscale(factor, mscale_all_dim)^2 when the rope is scaled (transformers' yarn_apply_mscale).
float deepseek_softmax_scale(const ModelConfig& m) {
  double scale = 1.0 / std::sqrt(static_cast<double>(m.mla() ? m.mla_q_head_dim() : m.head_dim));
  if (m.rope.scaling != ops::RopeScaling::none && m.rope.mscale_all_dim != 0 && m.rope.factor > 1) {
    const double mscale = 0.1 * m.rope.mscale_all_dim * std::log(m.rope.factor) + 1.0;
    scale *= mscale * mscale;
  }
  return static_cast<float>(scale);
}

// bos_token_id (an int) and eos_token_id (an int or a list); absent or null fields leave the
// current values, so generation_config.json can be read after config.json and win.
void parse_token_ids(const Source& s, ModelConfig& m) {
  m.bos_token_id = optional_int(s, "bos_token_id", m.bos_token_id, 0);
  const json* eos = get(s, "eos_token_id");
  if (eos == nullptr) return;
  const json list = eos->is_array() ? *eos : json::array({*eos});
  const char* expected = "a token id >= 0 or a non-empty list of them";
  if (list.empty()) field_error(ErrorKind::invalid_argument, s, "eos_token_id", expected, eos);
  std::vector<int> ids;
  for (const json& v : list) {
    int id = 0;
    if (!as_int(v, id) || id < 0)
      field_error(ErrorKind::invalid_argument, s, "eos_token_id", expected, eos);
    ids.push_back(id);
  }
  m.eos_token_ids = ids;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string_view arch_name(Arch a) {
  for (const auto& info : kArchs)
    if (info.arch == a) return info.name;
  return "unknown";
}

std::string supported_architectures() {
  std::string s;
  for (const auto& info : kArchs) s += (s.empty() ? "" : ", ") + std::string(info.name);
  return s;
}

bool ModelConfig::layer_is_moe(int layer) const {
  if (num_experts <= 0) return false;
  if (arch == Arch::mixtral) return true;
  if (arch == Arch::deepseek_v2 || arch == Arch::deepseek_v3)
    return layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  if (arch != Arch::qwen3_moe) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end())
    return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

namespace {

// quantization_config: which fp8 format the linear layers are in (checked field by field), into
// m.weights and m.fp8_scale_per_tensor, with a note for what of it is not used.
void parse_quantization(const Source& cfg, ModelConfig& m) {
  m.weights = WeightFormat::dense;
  const json* q = get(cfg, "quantization_config");
  if (q == nullptr) return;
  if (!q->is_object()) field_error(ErrorKind::invalid_argument, cfg, "quantization_config", "an object", q);
  const Source s{*q, cfg.file, "quantization_config."};
  const std::string method = optional_string(s, "quant_method", "");
  if (method == "fp8") {
    const std::string fmt = optional_string(s, "fmt", "e4m3");
    if (fmt != "e4m3") unsupported(s, "fmt", "fp8 format '" + fmt + "' is not supported (e4m3)");
    const std::string act = optional_string(s, "activation_scheme", "dynamic");
    if (act != "dynamic")
      unsupported(s, "activation_scheme",
                  "activation scheme '" + act + "' is not supported (dynamic: scales per token)");
    const json* block = get(s, "weight_block_size");
    if (block == nullptr || *block != json::array({128, 128}))
      unsupported(s, "weight_block_size",
                  "fp8 weights need 128 x 128 scale blocks ([128, 128]); got " + describe_value(block));
    m.weights = WeightFormat::fp8_blocks;
    m.fp8_scale_suffix = "_scale_inv";
    return;
  }
  if (method == "compressed-tensors") {
    // One config group of 8-bit float weights with a scale per 128 x 128 block (FP8-block: the
    // layout of quant_method fp8, scales named "<name>_scale"), per output channel (FP8-dynamic)
    // or per matrix (static FP8: one weight_scale each, copied to the rows at load, which keeps
    // q, k and v exact where one shared scale would requantize them).
    // Activations: dynamic per token, or static (an input_scale per layer, which the engine does
    // not use: its fp8 products take the activations as they are, or quantize them per token and
    // 128 columns itself, as for every fp8 checkpoint).
    const json* groups = get(s, "config_groups");
    if (groups == nullptr || !groups->is_object() || groups->size() != 1)
      unsupported(s, "config_groups", "compressed-tensors checkpoints with one config group are supported");
    const Source g{groups->begin().value(), cfg.file, s.prefix + "config_groups." + groups->begin().key() + "."};
    const json* w = get(g, "weights");
    // Compared as JSON values: a field of the wrong type is a mismatch, not an exception.
    auto field_is = [](const json* o, const char* key, const json& want) {
      return o != nullptr && o->is_object() && o->contains(key) && (*o)[key] == want;
    };
    const bool fp8 = field_is(w, "num_bits", 8) && field_is(w, "type", "float");
    const bool per_channel = field_is(w, "strategy", "channel");
    const bool per_tensor = field_is(w, "strategy", "tensor");
    const bool blocks = field_is(w, "strategy", "block");
    if (!fp8 || !(per_channel || per_tensor || blocks))
      unsupported(g, "weights", "only 8-bit float weights with a scale per 128 x 128 block, per "
                                "channel or per tensor (FP8-block, FP8-dynamic, FP8) are "
                                "supported; got " + describe_value(w));
    if (blocks && !field_is(w, "block_structure", json::array({128, 128})))
      unsupported(g, "weights", "fp8 weight blocks must be 128 x 128 (block_structure [128, 128]); "
                                "got " + describe_value(w));
    const json* a = get(g, "input_activations");
    if (a != nullptr && !a->is_null()) {
      if (!field_is(a, "num_bits", 8) || !field_is(a, "type", "float"))
        unsupported(g, "input_activations",
                    "only 8-bit float activations (or none) are supported; got " + describe_value(a));
      if (!field_is(a, "dynamic", true))
        m.notes.push_back("compressed-tensors: the checkpoint's static activation scales "
                          "(input_scale) are not used; the fp8 products take the activations as "
                          "they are, or quantize them per token and 128 columns");
    }
    const json* kv = get(s, "kv_cache_scheme");
    if (kv != nullptr && !kv->is_null())
      m.notes.push_back("compressed-tensors: kv_cache_scheme is not used; the KV cache stays in the "
                        "compute dtype");
    m.weights = blocks ? WeightFormat::fp8_blocks : WeightFormat::fp8_per_channel;
    m.fp8_scale_per_tensor = per_tensor;
    m.fp8_scale_suffix = "_scale";
    return;
  }
  unsupported(s, "quant_method", "quantization '" + method +
                                     "' is not supported (fp8, compressed-tensors float8 per "
                                     "block, channel or tensor)");
}

}  // namespace

float ModelConfig::attention_scale() const {
  return softmax_scale > 0 ? softmax_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::dense: return "dense";
    case WeightFormat::fp8_blocks: return "fp8 (128 x 128 blocks)";
    case WeightFormat::fp8_per_channel: return "fp8 (per channel)";
  }
  return "?";
}

ModelConfig parse_config(const std::string& config_json, const std::string& generation_config_json,
                         const std::string& source_name, const std::string& generation_source_name) {
  const json root = parse_object(config_json, source_name);
  const Source top{root, source_name, ""};
  // DeepSeek-OCR (model_type deepseek_vl_v2): the language model's config is language_config;
  // the vision encoder's weights are not loaded.
  const json* language = get(top, "language_config");
  if (language != nullptr && !language->is_object())
    field_error(ErrorKind::invalid_argument, top, "language_config", "an object", language);
  const bool vl = language != nullptr && optional_string(top, "model_type", "") == "deepseek_vl_v2";
  const Source s = vl ? Source{*language, source_name, "language_config."} : top;
  ModelConfig m;
  if (vl)
    m.notes.push_back("DeepSeek-OCR (deepseek_vl_v2): the language model runs from token ids; "
                      "the vision encoder's weights are not loaded");
  m.arch = detect_arch(s);
  const bool mixtral = m.arch == Arch::mixtral;
  const bool deepseek = m.arch == Arch::deepseek_v2 || m.arch == Arch::deepseek_v3;
  const bool qwen = m.arch == Arch::qwen2 || m.arch == Arch::qwen3 || m.arch == Arch::qwen3_moe;

  m.vocab_size = required_int(s, "vocab_size", 1, kMaxVocab);
  m.hidden_size = required_int(s, "hidden_size", 1, kMaxHiddenSize);
  m.intermediate_size = required_int(s, "intermediate_size", 1, kMaxIntermediateSize);
  m.num_layers = required_int(s, "num_hidden_layers", 1, kMaxLayers);
  m.num_heads = required_int(s, "num_attention_heads", 1, kMaxHeads);
  m.num_kv_heads = optional_int(s, "num_key_value_heads", m.num_heads, 1, kMaxHeads);
  if (m.num_heads % m.num_kv_heads != 0)
    field_error(ErrorKind::invalid_argument, s, "num_key_value_heads",
                "a divisor of num_attention_heads (" + std::to_string(m.num_heads) + ")",
                get(s, "num_key_value_heads"));
  const bool mla = deepseek && optional_bool(s, "use_mla", true);
  if (get(s, "head_dim") == nullptr && m.hidden_size % m.num_heads != 0 && !mla)
    field_error(ErrorKind::invalid_argument, s, "head_dim",
                "a head_dim, as hidden_size (" + std::to_string(m.hidden_size) +
                    ") is not a multiple of num_attention_heads (" + std::to_string(m.num_heads) +
                    ")",
                nullptr);
  m.head_dim = optional_int(s, "head_dim", m.hidden_size / m.num_heads, 1, kMaxHeadDim);
  if (int64_t{m.num_heads} * m.head_dim > kMaxQDim)
    field_error(ErrorKind::invalid_argument, s, "head_dim",
                "at most " + std::to_string(kMaxQDim) + " / num_attention_heads (" +
                    std::to_string(m.num_heads) + ") (braidinfer's limit on the query width)",
                get(s, "head_dim"));
  if (m.head_dim % 2 != 0 && !mla)
    field_error(ErrorKind::invalid_argument, s, "head_dim", "an even number (RoPE rotates pairs)",
                get(s, "head_dim"));

  // Family defaults as in transformers' config classes.
  m.rms_norm_eps = static_cast<float>(optional_number(s, "rms_norm_eps", mixtral ? 1e-5 : 1e-6));
  const int default_max_pos = m.arch == Arch::llama || m.arch == Arch::deepseek_v2 ? 2048
                              : m.arch == Arch::deepseek_v3                      ? 4096
                              : mixtral                                          ? 4096 * 32
                                                                                 : 32768;
  m.max_position_embeddings =
      optional_int(s, "max_position_embeddings", default_max_pos, 1, kMaxPositions);
  m.tie_word_embeddings = optional_bool(s, "tie_word_embeddings", false);
  // DeepSeek-OCR's language_config may leave the dtype and the quantization to the top level.
  m.dtype = parse_dtype(vl && get(s, "dtype") == nullptr && get(s, "torch_dtype") == nullptr ? top : s);
  parse_quantization(vl && get(s, "quantization_config") == nullptr ? top : s, m);

  const std::string act = optional_string(s, "hidden_act", "silu");
  if (act != "silu")
    unsupported(s, "hidden_act", "activation '" + act + "' is not supported (silu)");

  switch (m.arch) {
    case Arch::llama:
      m.qkv_bias = m.o_bias = optional_bool(s, "attention_bias", false);
      if (optional_bool(s, "mlp_bias", false))
        unsupported(s, "mlp_bias", "MLP biases are not supported");
      break;
    case Arch::qwen2:
      m.qkv_bias = true;  // Qwen2 always has q/k/v biases and no o_proj bias
      break;
    case Arch::qwen3:
    case Arch::qwen3_moe:
      m.qk_norm = true;
      m.qkv_bias = m.o_bias = optional_bool(s, "attention_bias", false);
      break;
    case Arch::mixtral:
      break;
    case Arch::deepseek_v2:
    case Arch::deepseek_v3:
      if (optional_bool(s, "attention_bias", false))
        unsupported(s, "attention_bias", "attention biases are not supported for DeepSeek models");
      if (optional_bool(s, "mlp_bias", false))
        unsupported(s, "mlp_bias", "MLP biases are not supported");
      parse_deepseek_attention(s, m);
      break;
  }

  // Sliding-window attention would silently change results past the window: refuse it.
  if (qwen && optional_bool(s, "use_sliding_window", false))
    unsupported(s, "use_sliding_window", "sliding-window attention is not supported");
  if (const json* types = get(s, "layer_types"); types != nullptr) {
    if (!types->is_array())
      field_error(ErrorKind::invalid_argument, s, "layer_types", "a list of layer kinds", types);
    for (const json& t : *types)
      if (t != "full_attention")
        unsupported(s, "layer_types", "layer kind " + t.dump() +
                                          " is not supported (only \"full_attention\")");
  }
  if (mixtral) {
    const json* window = get(s, "sliding_window");
    if (window != nullptr &&
        read_int(s, "sliding_window", window, 1) < m.max_position_embeddings)
      unsupported(s, "sliding_window",
                  "sliding-window attention is not supported (window " + window->dump() +
                      " < max_position_embeddings " + std::to_string(m.max_position_embeddings) +
                      ")");
  }

  parse_rope(s, m, mixtral ? 1e6 : 10000.0);
  if (m.arch == Arch::qwen3_moe || mixtral) parse_moe(s, m);
  if (deepseek) {
    // transformers' DeepseekV2 rotates adjacent pairs always under MLA; V3 unless rope_interleave
    // is false. (V3 reorders the pairs to the half-split layout first: the values differ in
    // order only, and every q.k product is the same.)
    m.rope.interleaved = m.mla() && (m.arch == Arch::deepseek_v2 || optional_bool(s, "rope_interleave", true));
    parse_deepseek_moe(s, m);
    m.softmax_scale = deepseek_softmax_scale(m);
  }

  parse_token_ids(s, m);
  if (!generation_config_json.empty()) {
    const json gen = parse_object(generation_config_json, generation_source_name);
    parse_token_ids(Source{gen, generation_source_name, ""}, m);
  }
  return m;
}

ModelConfig load_config(const std::string& dir) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  std::error_code ec;
  if (!fs::is_regular_file(config_path, ec))
    throw Error(ErrorKind::io, dir + ": no config.json (not a Hugging Face model folder?)");
  const std::string config_text = read_text_file(config_path);
  const std::string gen_text = fs::is_regular_file(gen_path, ec) ? read_text_file(gen_path) : "";
  return parse_config(config_text, gen_text, config_path, gen_path);
}

}  // namespace braid::model
