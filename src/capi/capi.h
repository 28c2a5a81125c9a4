// Internal helpers of the C API: descriptor conversion and the exception boundary.
#pragma once

#include "braid/braid.h"
#include "braid/ops.h"
#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::capi {

// A required tensor argument: converts the DLPack-style descriptor into a braid::Tensor view, or
// throws braid::Error naming `op` and `arg` (NULL descriptor, bad ndim, unknown dtype or device).
Tensor tensor_arg(const char* op, const char* arg, const braid_tensor* t);
// An optional one: NULL gives the undefined Tensor{} ("none" in ops.h).
Tensor optional_tensor_arg(const char* op, const char* arg, const braid_tensor* t);

inline Stream stream_arg(void* stream) { return Stream{stream}; }

// A paged KV cache from its four descriptors, each named "kv.<field>" in messages (ops.h's names).
ops::PagedKV paged_kv_arg(const char* op, const braid_tensor* k_pages, const braid_tensor* v_pages,
                          const braid_tensor* page_table, const braid_tensor* kv_lens);

// A RoPE configuration argument (ops_rope.cpp): NULL gives the defaults; an unknown scaling code
// throws braid::Error naming `op` and "config.scaling".
ops::RopeConfig rope_config_of(const char* op, const braid_rope_config* c);

// To be called from inside a catch block: records the exception's message as this thread's last
// error and returns its status (braid::Error -> its kind, std::bad_alloc -> out of memory,
// anything else -> internal).
braid_status status_of_current_exception(const char* op) noexcept;

// Runs `body` and turns whatever it throws into a status: no exception crosses the C boundary.
template <typename F>
braid_status guarded(const char* op, F&& body) noexcept {
  try {
    body();
    return BRAID_OK;
  } catch (...) {
    return status_of_current_exception(op);
  }
}

}  // namespace braid::capi
