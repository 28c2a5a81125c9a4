// The checks of a matmul op's weight (ops::Weight): a 16-bit matrix in the activations' dtype, or
// fp8 e4m3 with its f32 scales in one of the two layouts ops.h describes.
#pragma once

#include <cstdint>

#include "braid/ops.h"

namespace braid::check {

// Checks w against activations of `act` dtype and k columns; returns n, w's rows.
int64_t weight(const char* op, const ops::Weight& w, DType act, int64_t k);

// The fp8 scale layout: rows of w per scale row (128 or 1) and columns per scale column (128, or
// k for one scale per row). Assumes a checked fp8 weight.
struct ScaleBlocks {
  int64_t rows, cols;
};
ScaleBlocks scale_blocks(const ops::Weight& w);

}  // namespace braid::check
