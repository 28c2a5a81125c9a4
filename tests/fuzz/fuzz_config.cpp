// Fuzz target: config.json (then, after a NUL byte, generation_config.json) into a ModelConfig,
// for every family the parser knows (the seeds hold one config per family). An accepted config
// must be one the engine can size without overflow: its derived dimensions are computed and
// checked against the loader's limits.
#include <cstdint>
#include <string>

#include "braid/error.h"
#include "fuzz/fuzz_util.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [config, generation] = braid::fuzz::split_at_nul(data, size);
  try {
    const braid::model::ModelConfig m =
        braid::model::parse_config(std::string(config), std::string(generation));
    if (m.num_layers > braid::model::kMaxLayers || m.vocab_size > braid::model::kMaxVocab)
      braid::fuzz::property_failed("a config past the loader's limits was accepted");
    // What the engine computes from it at load time (int products included).
    volatile int64_t sink = int64_t{m.q_dim()} + m.kv_dim() + m.rope.rotary_dim;
    for (int layer = 0; layer < m.num_layers; ++layer) sink = sink + m.layer_is_moe(layer);
    if (m.num_heads % m.num_kv_heads != 0 || m.head_dim % 2 != 0)
      braid::fuzz::property_failed("head counts or head_dim the attention cannot run");
  } catch (const braid::Error&) {
  }
  return 0;
}
