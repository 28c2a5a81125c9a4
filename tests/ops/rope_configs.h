// RoPE configurations the rope tests run: each scaling with a checkpoint's typical fields
// (Llama-3.1's llama3 scaling, a YaRN factor of 4 over 32768 positions).
#pragma once

#include "braid/ops.h"

namespace braid::test {

inline ops::RopeConfig rope_config_for(ops::RopeScaling s, int rotary_dim) {
  ops::RopeConfig c;
  if (s == ops::RopeScaling::llama3) {
    c.theta = 500000.0f;
    c.scaling = s;
    c.factor = 8.0f;
    c.original_max_position = 8192;
  } else if (s == ops::RopeScaling::yarn) {
    c.theta = 1000000.0f;
    c.scaling = s;
    c.factor = 4.0f;
    c.original_max_position = 32768;
  }
  c.rotary_dim = rotary_dim;
  return c;
}

}  // namespace braid::test
