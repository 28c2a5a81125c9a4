// Option values the suites' commands share with the rest of the command line.
#pragma once

#include <string>

#include "braid/tensor.h"
#include "model/weights.h"

namespace braid::bench {

// --device cpu | cuda | auto, as every engine command takes it; errors name `command`.
Device device_from_option(const std::string& name, const char* command);

// --quantize none | fp8 (model::Quantize), as the commands that load a --model folder take it;
// errors name `command`.
model::Quantize quantize_from_option(const std::string& name, const char* command);

// The help text of --quantize.
inline constexpr const char* kQuantizeHelp =
    "fp8: quantize a 16-bit checkpoint's linear layers to fp8 with 128 x 128 block scales at "
    "load (as DeepSeek-V3's fp8 checkpoints; fp8 decode speed); none: as stored";

}  // namespace braid::bench
