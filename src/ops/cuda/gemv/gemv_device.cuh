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

// Four e4m3 codes (a register, column 0 in the low byte) as four exact values of T in two
// registers (columns 0, 1 in the first, low half first: the mma's B packing). Integer moves and
// one multiply per pair, no conversion instructions (F2F runs at a quarter of the ALU rate on
// sm_90, and e4m3 -> bf16 would take three of them per pair through f16 and f32): each byte,
// spread to the top of a 16-bit half, has its exponent and mantissa bits moved under T's, which
// reads as the value times 2^-(T's bias - 7), and a multiply by the power of two restores it.
// Exact: every e4m3 value (subnormals included, 2^-9 .. 448) is a normal value of f16 and bf16,
// and their multiplies keep subnormal inputs. The NaN codes (0x7f, 0xff) become +-480: weights
// hold no NaN.
template <typename T>
__device__ __forceinline__ uint2 fp8x4_to(uint32_t codes) {
  // T's bits for a byte b = s eeee mmm: s at bit 15, eeee mmm under T's exponent's low bits and
  // the top of its mantissa (bits 10..4 for bf16, 13..7 for f16).
  constexpr int kShift = std::is_same_v<T, __nv_bfloat16> ? 4 : 1;
  constexpr uint32_t kMagnitude = 0x7f00u >> kShift;
  // 2^120 in bf16 (bias 127 - 7), 2^8 in f16 (bias 15 - 7), in both halves.
  constexpr uint32_t kRestore = std::is_same_v<T, __nv_bfloat16> ? 0x7b807b80u : 0x5c005c00u;
  uint2 r;
  const uint32_t lo = __byte_perm(codes, 0, 0x1404);  // bytes 0, 1 at the top of each half
  const uint32_t hi = __byte_perm(codes, 0, 0x3424);  // bytes 2, 3
  r.x = (lo & 0x80008000u) | ((lo >> kShift) & (kMagnitude * 0x10001u));
  r.y = (hi & 0x80008000u) | ((hi >> kShift) & (kMagnitude * 0x10001u));
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&r.x), y = *reinterpret_cast<__nv_bfloat162*>(&r.y);
    const uint32_t k = kRestore;
    const __nv_bfloat162 m = *reinterpret_cast<const __nv_bfloat162*>(&k);
    x = __hmul2(x, m);
    y = __hmul2(y, m);
    r.x = *reinterpret_cast<uint32_t*>(&x);
    r.y = *reinterpret_cast<uint32_t*>(&y);
  } else {
    __half2 x = *reinterpret_cast<__half2*>(&r.x), y = *reinterpret_cast<__half2*>(&r.y);
    const uint32_t k = kRestore;
    const __half2 m = *reinterpret_cast<const __half2*>(&k);
    x = __hmul2(x, m);
    y = __hmul2(y, m);
    r.x = *reinterpret_cast<uint32_t*>(&x);
    r.y = *reinterpret_cast<uint32_t*>(&y);
  }
  return r;
}

// Eight e4m3 weights (8 bytes, column 0 first) as the uint4 of eight T a 16-bit load gives.
template <typename T>
__device__ __forceinline__ uint4 fp8x8_to(uint2 codes) {
  const uint2 lo = fp8x4_to<T>(codes.x), hi = fp8x4_to<T>(codes.y);
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
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

// d += A * B for one m16n8k32 tile of e4m3 codes (4 to a register), fp32 accumulation; the
// fragments as PTX lays them out. The quantized fp8 GEMV (gemv_fp8_quantized.cu) feeds it the
// weights as loaded.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
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
