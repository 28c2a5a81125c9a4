// braid_llm_create's options JSON -> the serving engine's configuration.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/llm_engine.h"

namespace braid::capi::llm {

struct LlmOptions {
  engine::EngineConfig engine;
  std::optional<uint64_t> seed;  // seeds the requests that bring none
};

// Parses options_json (NULL or "" -> the defaults) and resolves the device ("auto" -> CUDA when
// usable). Throws braid::Error: invalid_argument naming the key for an unknown key, a wrong type
// or a bad value; unsupported for "cuda" without a usable GPU.
LlmOptions parse_options(const char* options_json);

}  // namespace braid::capi::llm
