// The argument checks of the decode step's attention ops, shared by each op and by
// qk_norm_rope_kv_append_attention_decode, which is both: errors name the op that was called.
#pragma once

#include "braid/ops.h"

namespace braid::ops::detail {

struct QkRopeKvChecked {
  Device device;
  RopeTable table;
  bool norm = false;  // q_norm and k_norm given
};

// qk_norm_rope_kv_append's checks (slot values on the CPU too); the device every tensor is on.
QkRopeKvChecked check_qk_norm_rope_kv_append(const char* op, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& q_norm,
                                             const Tensor& k_norm, float eps,
                                             const Tensor& positions, const RopeConfig& rope,
                                             const Tensor& slots, const Tensor& k_pages,
                                             const Tensor& v_pages);

// attention_decode's checks (index values on the CPU too); the device every tensor is on.
Device check_attention_decode(const char* op, const Tensor& q, const PagedKV& kv,
                              float softmax_scale, const Tensor& out, const Tensor& lse,
                              const Tensor& workspace);

}  // namespace braid::ops::detail
