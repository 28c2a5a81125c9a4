#include "bench/suites/prefill.h"

#include <fmt/core.h>

#include <cstdio>
#include <map>

#include "bench/suites/attention.h"
#include "braid/error.h"

namespace braid::bench {

namespace {

model::ModelConfig llama_shape(int layers, int hidden, int heads) {
  const int intermediate = ((hidden * 8 / 3 + 255) / 256) * 256;
  const std::string json = fmt::format(
      R"({{"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": {},
      "intermediate_size": {}, "num_hidden_layers": {}, "num_attention_heads": {},
      "num_key_value_heads": {}, "max_position_embeddings": 4096, "rope_theta": 10000.0,
      "rms_norm_eps": 1e-5, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}})",
      hidden, intermediate, layers, heads, heads);
  return model::parse_config(json, "", "seed 001 prefill model");
}

}  // namespace

std::vector<PrefillModel> prefill_models() {
  return {
      {"small", llama_shape(12, 768, 12), {{1, 128, 0.8}, {4, 512, 4.2}, {16, 2048, 28.0}}},
      {"medium", llama_shape(24, 2048, 16), {{1, 128, 2.5}, {4, 512, 15.0}, {8, 1024, 45.0}}},
      {"large", llama_shape(32, 4096, 32), {{1, 128, 6.2}, {4, 512, 38.0}, {8, 2048, 185.0}}},
  };
}

PrefillModel prefill_model(const std::string& name) {
  std::string known;
  for (const PrefillModel& m : prefill_models()) {
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw Error(ErrorKind::invalid_argument,
              "bench prefill: unknown model '" + name + "' (known: " + known + ")");
}

double prefill_flops(const model::ModelConfig& c, int batch, int seq_len) {
  const double T = double(batch) * seq_len, H = c.hidden_size, I = c.intermediate_size;
  const double qkv = c.q_dim() + 2.0 * c.kv_dim();
  const double per_token_layer = 2.0 * H * qkv + 2.0 * c.q_dim() * H + 2.0 * H * 2.0 * I +
                                 2.0 * I * H;
  PrefillShape attn;
  attn.batch = batch;
  attn.seq_len = seq_len;
  attn.q_heads = c.num_heads;
  attn.kv_heads = c.num_kv_heads;
  attn.head_dim = c.head_dim;
  attn.causal = true;
  const double layer = T * per_token_layer + attention_prefill_flops(attn);
  return c.num_layers * layer + 2.0 * H * c.vocab_size;
}

double prefill_bytes(const model::ModelConfig& c, int batch, int seq_len, size_t dtype_bytes) {
  const double e = static_cast<double>(dtype_bytes);
  const double T = double(batch) * seq_len, H = c.hidden_size, I = c.intermediate_size;
  const double qkv = c.q_dim() + 2.0 * c.kv_dim();
  const double layer_weights = H * qkv + double(c.q_dim()) * H + 3.0 * H * I + 2.0 * H;
  const double kv = 2.0 * T * c.kv_dim();  // written, then read by attention
  const double layers = c.num_layers * (layer_weights * e + 2.0 * kv * e);
  const double embed_rows = T * H * e;
  const double head = (H * c.vocab_size + H) * e + c.vocab_size * 4.0;
  return layers + embed_rows + head;
}

std::string prefill_summary(const Report& run) {
  std::map<std::string, double> seed;
  for (const PrefillModel& m : prefill_models())
    for (const PrefillCase& pc : m.cases)
      seed[fmt::format("{} batch {} seq {}", m.name, pc.batch, pc.seq_len)] = pc.seed_h100_ms;
  std::string out =
      "Seed 001 end-to-end (one forward over the batch, graph-free, back to back)\n"
      "model   batch  seq len       ms    tokens/s  seed H100 ms  seed/ours\n";
  for (const ResultRow& r : run.rows) {
    if (r.name != "prefill_forward") continue;
    int batch = 0, seq = 0;
    char model[32] = {};
    if (std::sscanf(r.params.c_str(), "%31s batch %d seq %d", model, &batch, &seq) != 3) continue;
    const double ms = r.stats.median_us / 1e3;
    const auto it = seed.find(r.params);
    const double target = it == seed.end() ? 0 : it->second;
    out += fmt::format("{:<7} {:>5} {:>8} {:>8.2f} {:>11.0f} {:>13} {:>10}\n", model, batch, seq,
                       ms, ms > 0 ? batch * double(seq) / (ms / 1e3) : 0.0,
                       target > 0 ? fmt::format("{:.1f}", target) : "-",
                       target > 0 && ms > 0 ? fmt::format("{:.2f}x", target / ms) : "-");
  }
  return out;
}

}  // namespace braid::bench
