// C wrappers: rope_apply and its configuration.
#include <string>

#include "braid/error.h"
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

namespace braid::capi {

ops::RopeConfig rope_config_of(const char* op, const braid_rope_config* c) {
  braid::ops::RopeConfig r;
  if (c == nullptr) return r;  // NULL: the defaults
  switch (c->scaling) {
    case BRAID_ROPE_NONE: r.scaling = braid::ops::RopeScaling::none; break;
    case BRAID_ROPE_LLAMA3: r.scaling = braid::ops::RopeScaling::llama3; break;
    case BRAID_ROPE_YARN: r.scaling = braid::ops::RopeScaling::yarn; break;
    default:
      braid::throw_arg_error(braid::ErrorKind::invalid_argument, op, "config.scaling",
                             "BRAID_ROPE_NONE (0), BRAID_ROPE_LLAMA3 (1) or BRAID_ROPE_YARN (2)",
                             std::to_string(c->scaling));
  }
  r.theta = c->theta;
  r.rotary_dim = c->rotary_dim;
  r.factor = c->factor;
  r.low_freq_factor = c->low_freq_factor;
  r.high_freq_factor = c->high_freq_factor;
  r.original_max_position = c->original_max_position;
  r.beta_fast = c->beta_fast;
  r.beta_slow = c->beta_slow;
  r.mscale = c->mscale;
  r.mscale_all_dim = c->mscale_all_dim;
  r.attention_factor = c->attention_factor;
  r.truncate = c->truncate != 0;
  r.interleaved = c->interleaved != 0;
  return r;
}

}  // namespace braid::capi

extern "C" {

void braid_rope_config_init(braid_rope_config* config) {
  if (config == nullptr) return;
  const braid::ops::RopeConfig d;  // the defaults live in one place: ops.h
  config->theta = d.theta;
  config->rotary_dim = d.rotary_dim;
  config->scaling = BRAID_ROPE_NONE;
  config->factor = d.factor;
  config->low_freq_factor = d.low_freq_factor;
  config->high_freq_factor = d.high_freq_factor;
  config->original_max_position = d.original_max_position;
  config->beta_fast = d.beta_fast;
  config->beta_slow = d.beta_slow;
  config->mscale = d.mscale;
  config->mscale_all_dim = d.mscale_all_dim;
  config->attention_factor = d.attention_factor;
  config->truncate = d.truncate ? 1 : 0;
  config->interleaved = d.interleaved ? 1 : 0;
}

braid_status braid_rope_apply(const braid_tensor* q, const braid_tensor* k,
                              const braid_tensor* positions, const braid_rope_config* config,
                              void* stream) {
  const char* op = "rope_apply";
  return guarded(op, [&] {
    braid::ops::rope_apply(tensor_arg(op, "q", q), optional_tensor_arg(op, "k", k),
                           tensor_arg(op, "positions", positions), rope_config_of(op, config),
                           stream_arg(stream));
  });
}

}  // extern "C"
