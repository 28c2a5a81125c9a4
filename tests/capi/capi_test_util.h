// What the C API tests share, written as a C caller would: a descriptor of a contiguous host
// buffer, and the dtype codes they use. Only braid.h.
#pragma once

#include <cstdint>
#include <vector>

#include "braid/braid.h"

namespace braid_capi_test {

inline const braid_dtype kF32 = {BRAID_DTYPE_FLOAT, 32, 1};
inline const braid_dtype kI32 = {BRAID_DTYPE_INT, 32, 1};
inline const braid_dtype kI64 = {BRAID_DTYPE_INT, 64, 1};

// A contiguous CPU tensor over `data` (strides NULL); `shape` must outlive the descriptor.
inline braid_tensor cpu_tensor(void* data, std::vector<int64_t>& shape, braid_dtype dtype) {
  braid_tensor t{};
  t.data = data;
  t.device = {BRAID_DEVICE_CPU, 0};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = dtype;
  t.shape = shape.data();
  return t;
}

}  // namespace braid_capi_test
