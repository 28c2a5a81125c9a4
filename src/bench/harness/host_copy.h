// Device tensors brought to the host, for the benchmarks' checks against CPU references.
#pragma once

#include <cstdint>
#include <vector>

#include "braid/buffer.h"

namespace braid::bench {

// A host copy of a contiguous tensor.
OwnedTensor to_host(const Tensor& t);
// Rows `rows` (indices into dim 0) of a contiguous tensor, as a host tensor [rows.size(), ...];
// one copy when `rows` is every row in order.
OwnedTensor host_rows(const Tensor& t, const std::vector<int64_t>& rows);
// Every element of a contiguous tensor, read as a float (integers converted).
std::vector<float> host_floats(const Tensor& t);

}  // namespace braid::bench
