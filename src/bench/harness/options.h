// Option values the suites' commands share with the rest of the command line.
#pragma once

#include <string>

#include "braid/tensor.h"

namespace braid::bench {

// --device cpu | cuda | auto, as every engine command takes it; errors name `command`.
Device device_from_option(const std::string& name, const char* command);

}  // namespace braid::bench
