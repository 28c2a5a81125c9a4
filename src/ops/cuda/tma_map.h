// Host side of TMA (hopper.cuh): tensor maps, the descriptors a kernel's cp.async.bulk.tensor
// copies read. Encoded through the driver's cuTensorMapEncodeTiled, found at run time through the
// runtime (no link against libcuda).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "braid/dtype.h"

namespace braid::cuda {

// A map over a [rows, heads, cols] tensor of f16/bf16 or f8e4m3 elements whose heads are `cols`
// elements apart and whose rows are `row_stride` elements apart, read in boxes of 128 bytes of
// columns (64 f16 or 128 fp8) x 1 head x box_rows rows with the 128-byte swizzle (wgmma's K-major
// layout; a box fills box_rows 128-byte lines). Rows past `rows` read as zeros. Returns false, leaving *map unspecified, when
// TMA cannot address the tensor (base or row stride not 16-byte aligned, a dimension too large).
bool make_tma_map_rows_heads(CUtensorMap* map, DType dtype, const void* base, int64_t rows,
                             int64_t heads, int64_t cols, int64_t row_stride, int box_rows);

}  // namespace braid::cuda
