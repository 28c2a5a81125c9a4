#include "braid/dtype.h"

#include <cmath>
#include <cstring>

#include "braid/error.h"

namespace braid {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::f8e4m3: case DType::f8e5m2: case DType::u8: return 1;
    case DType::i64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f8e4m3: return "f8e4m3";
    case DType::f8e5m2: return "f8e5m2";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

DType dtype_from_name(std::string_view n) {
  struct Alias { std::string_view name; DType type; };
  static constexpr Alias aliases[] = {
      {"f32", DType::f32}, {"float32", DType::f32}, {"F32", DType::f32}, {"float", DType::f32},
      {"f16", DType::f16}, {"float16", DType::f16}, {"F16", DType::f16}, {"half", DType::f16},
      {"bf16", DType::bf16}, {"bfloat16", DType::bf16}, {"BF16", DType::bf16},
      {"f8e4m3", DType::f8e4m3}, {"float8_e4m3fn", DType::f8e4m3}, {"F8_E4M3", DType::f8e4m3},
      {"f8e5m2", DType::f8e5m2}, {"float8_e5m2", DType::f8e5m2}, {"F8_E5M2", DType::f8e5m2},
      {"i32", DType::i32}, {"int32", DType::i32}, {"I32", DType::i32},
      {"i64", DType::i64}, {"int64", DType::i64}, {"I64", DType::i64},
      {"u8", DType::u8}, {"uint8", DType::u8}, {"U8", DType::u8},
  };
  for (const auto& a : aliases)
    if (a.name == n) return a.type;
  throw Error(ErrorKind::dtype, "unknown dtype name '" + std::string(n) +
                                    "' (known: f32, f16, bf16, f8e4m3, f8e5m2, i32, i64, u8)");
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f8e4m3 ||
         t == DType::f8e5m2;
}

// Generic round-to-nearest-even encoder for small IEEE-like formats with `exp_bits` exponent
// bits and `man_bits` mantissa bits. `finite_max` saturates (e4m3fn); otherwise overflow -> inf.
static uint32_t encode_small_float(float f, int exp_bits, int man_bits, bool has_inf,
                                   float finite_max) {
  const uint32_t sign = (float_bits(f) >> 31) << (exp_bits + man_bits);
  const int bias = (1 << (exp_bits - 1)) - 1;
  if (std::isnan(f)) {
    // e4m3fn NaN is S.1111.111; others: exponent all ones with a mantissa bit set.
    return sign | ((1u << (exp_bits + man_bits)) - 1u);
  }
  float a = std::fabs(f);
  if (!has_inf && a > finite_max) a = finite_max;  // saturate
  if (has_inf && a >= finite_max * 2) return sign | (((1u << exp_bits) - 1u) << man_bits);
  if (a == 0.0f) return sign;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;    // a = 1.xxx * 2^exp
  const int min_exp = 1 - bias;
  // Quantum (spacing of representable values) at this exponent.
  int q_exp = (exp < min_exp ? min_exp : exp) - man_bits;
  float scaled = std::ldexp(a, -q_exp);  // integer part = representable mantissa units
  float r = std::nearbyint(scaled);      // ties to even under the default rounding mode
  uint32_t units = static_cast<uint32_t>(r);
  // units counts quanta: for normal numbers it includes the hidden bit.
  uint32_t code;
  if (exp < min_exp) {
    code = units;  // subnormal (may round up into the smallest normal: still correct encoding)
  } else {
    if (units >= (2u << man_bits)) { units >>= 1; ++exp; }
    code = (static_cast<uint32_t>(exp + bias) << man_bits) | (units & ((1u << man_bits) - 1u));
  }
  uint32_t max_code = has_inf ? (((1u << exp_bits) - 1u) << man_bits)  // inf
                              : (((1u << exp_bits) - 1u) << man_bits) | ((1u << man_bits) - 2u);
  if (code > max_code) code = max_code;
  return sign | code;
}

static float decode_small_float(uint32_t v, int exp_bits, int man_bits, bool has_inf) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const bool neg = (v >> (exp_bits + man_bits)) & 1u;
  const uint32_t e = (v >> man_bits) & ((1u << exp_bits) - 1u);
  const uint32_t m = v & ((1u << man_bits) - 1u);
  float out;
  if (e == (1u << exp_bits) - 1u && has_inf) {
    out = m == 0 ? INFINITY : NAN;
  } else if (e == (1u << exp_bits) - 1u && !has_inf && m == (1u << man_bits) - 1u) {
    out = NAN;
  } else if (e == 0) {
    out = std::ldexp(static_cast<float>(m), 1 - bias - man_bits);
  } else {
    out = std::ldexp(static_cast<float>(m | (1u << man_bits)), static_cast<int>(e) - bias - man_bits);
  }
  return neg ? -out : out;
}

uint16_t float_to_f16(float f) {
  return static_cast<uint16_t>(encode_small_float(f, 5, 10, true, 65504.0f));
}
float f16_to_float(uint16_t h) { return decode_small_float(h, 5, 10, true); }
uint8_t float_to_f8e4m3(float f) {
  return static_cast<uint8_t>(encode_small_float(f, 4, 3, false, 448.0f));
}
float f8e4m3_to_float(uint8_t v) { return decode_small_float(v, 4, 3, false); }
uint8_t float_to_f8e5m2(float f) {
  return static_cast<uint8_t>(encode_small_float(f, 5, 2, true, 57344.0f));
}
float f8e5m2_to_float(uint8_t v) { return decode_small_float(v, 5, 2, true); }

float quantize(DType t, float v) {
  switch (t) {
    case DType::f16: return f16_to_float(float_to_f16(v));
    case DType::bf16: return bf16_to_float(float_to_bf16(v));
    case DType::f8e4m3: return f8e4m3_to_float(float_to_f8e4m3(v));
    case DType::f8e5m2: return f8e5m2_to_float(float_to_f8e5m2(v));
    default: return v;
  }
}

namespace {
// Element i of an array that may sit at any byte address (a safetensors file's data need not be
// aligned to its element size); memcpy compiles to one load.
template <typename T>
T load_unaligned(const void* base, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}
}  // namespace

float load_as_float(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return load_unaligned<float>(base, i);
    case DType::f16: return f16_to_float(load_unaligned<uint16_t>(base, i));
    case DType::bf16: return bf16_to_float(load_unaligned<uint16_t>(base, i));
    case DType::f8e4m3: return f8e4m3_to_float(static_cast<const uint8_t*>(base)[i]);
    case DType::f8e5m2: return f8e5m2_to_float(static_cast<const uint8_t*>(base)[i]);
    case DType::i32: return static_cast<float>(load_unaligned<int32_t>(base, i));
    case DType::i64: return static_cast<float>(load_unaligned<int64_t>(base, i));
    case DType::u8: return static_cast<float>(static_cast<const uint8_t*>(base)[i]);
  }
  return 0.0f;
}

void store_from_float(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = v; return;
    case DType::f16: static_cast<uint16_t*>(base)[i] = float_to_f16(v); return;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = float_to_bf16(v); return;
    case DType::f8e4m3: static_cast<uint8_t*>(base)[i] = float_to_f8e4m3(v); return;
    case DType::f8e5m2: static_cast<uint8_t*>(base)[i] = float_to_f8e5m2(v); return;
    case DType::i32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); return;
    case DType::i64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); return;
    case DType::u8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); return;
  }
}

}  // namespace braid
