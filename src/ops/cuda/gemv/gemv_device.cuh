// Device helpers shared by the GEMV kernels (gemv.cu, gemv_fused.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace braid::cuda::gemv_device {

// 16 bytes of weights: read once, so kept out of L1, with a 256-byte L2 prefetch so DRAM is
// asked for whole blocks (3-7% faster than without on the large shapes). Predicated off (zeros,
// no access) past the end of a slice.
__device__ __forceinline__ uint4 load_weights(const uint4* p, bool pred) {
  uint4 v;
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
      " @p ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)));
  return v;
}

// d += A * B for one m16n8k16 tile; A = {a0, a1, a2, a3}, B = {b0, b1} as PTX lays them out.
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// A warp's two m16n8 accumulators (16 rows of w, activation rows g and g + 8) into its slice of
// the block's partial sums, element [column in the tile * 16 + activation row]; rows past m are
// left unwritten (never read).
__device__ __forceinline__ void store_partial(float* slice, const float (&acc)[2][4], int g, int t,
                                              bool has_lo, bool has_hi) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int col = r * 8 + 2 * t + j;
      if (has_lo) slice[col * 16 + g] = acc[r][j];
      if (has_hi) slice[col * 16 + g + 8] = acc[r][2 + j];
    }
  }
}

}  // namespace braid::cuda::gemv_device
