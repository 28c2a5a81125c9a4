// Element types and host-side conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace braid {

enum class DType : uint8_t { f32, f16, bf16, f8e4m3, f8e5m2, i32, i64, u8 };

// Bytes per element.
size_t dtype_size(DType t);
// Short name as used in error messages and reports: "f32", "bf16", "f8e4m3", ...
std::string_view dtype_name(DType t);
// Parses the names above and the PyTorch / safetensors spellings ("bfloat16", "BF16",
// "float8_e4m3fn", "F8_E4M3", ...). Throws braid::Error for an unknown name.
DType dtype_from_name(std::string_view name);
bool is_floating(DType t);

// ---- scalar conversions (host). Rounding is round-to-nearest-even, as on the GPU. ----

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);
// OCP FP8: e4m3 is the "fn" variant (no infinities, max 448, saturating here like cuda's
// __NV_SATFINITE); e5m2 keeps infinities.
uint8_t float_to_f8e4m3(float f);
float f8e4m3_to_float(uint8_t v);
uint8_t float_to_f8e5m2(float f);
float f8e5m2_to_float(uint8_t v);

// Rounds v to the precision of t and returns it as float (identity for f32 and integers).
float quantize(DType t, float v);

// Reads element `i` of a buffer of type `t` as float / writes a float into it (rounding).
float load_as_float(const void* base, DType t, int64_t i);
void store_from_float(void* base, DType t, int64_t i, float v);

}  // namespace braid
