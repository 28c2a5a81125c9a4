#include "ops/cuda/tma_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "core/cuda_check.h"

namespace braid::cuda {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    BRAID_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                      cudaEnableDefault, &found));
    return found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p)
               : nullptr;
  }();
  return fn;
}

}  // namespace

bool make_tma_map_rows_heads(CUtensorMap* map, DType dtype, const void* base, int64_t rows,
                             int64_t heads, int64_t cols, int64_t row_stride, int box_rows) {
  CUtensorMapDataType type{};
  if (dtype == DType::bf16) type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  else if (dtype == DType::f16) type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  else if (dtype == DType::f8e4m3) type = CU_TENSOR_MAP_DATA_TYPE_UINT8;  // bytes to TMA
  else return false;
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  if ((reinterpret_cast<uintptr_t>(base) & 15u) != 0 || (row_stride * elem) % 16 != 0) return false;
  if (rows <= 0 || rows > (int64_t{1} << 31) || box_rows < 1 || box_rows > 256) return false;
  const auto encode = encode_tiled();
  if (!encode) return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols * elem),
                                 static_cast<cuuint64_t>(row_stride * elem)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(128 / elem), 1,
                             static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(map, type, 3, const_cast<void*>(base), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

}  // namespace braid::cuda
