// Host conversions between float and the 16- and 8-bit formats.
#include <gtest/gtest.h>

#include <cmath>

#include "braid/dtype.h"
#include "braid/error.h"

namespace braid {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f8e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(dtype_from_name("bfloat16"), DType::bf16);
  EXPECT_EQ(dtype_from_name("F8_E4M3"), DType::f8e4m3);
  EXPECT_EQ(dtype_name(DType::f8e5m2), "f8e5m2");
  EXPECT_THROW(dtype_from_name("float128"), Error);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(-2.5f)), -2.5f);
}

TEST(DType, F16RoundTripsEveryFiniteCode) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const auto h = static_cast<uint16_t>(c);
    const float f = f16_to_float(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_f16(f), h) << "code " << c;
  }
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);                // rounds to infinity
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
}

TEST(DType, F8E4M3FnRoundTripsAndSaturates) {
  for (uint32_t c = 0; c < 256; ++c) {
    const auto v = static_cast<uint8_t>(c);
    const float f = f8e4m3_to_float(v);
    if (std::isnan(f)) {
      EXPECT_EQ(c & 0x7f, 0x7fu);  // only S.1111.111 is NaN in the fn variant
      continue;
    }
    ASSERT_EQ(float_to_f8e4m3(f), v) << "code " << c;
  }
  EXPECT_EQ(f8e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(float_to_f8e4m3(1000.0f), 0x7e);   // saturates to the largest finite value
  EXPECT_EQ(float_to_f8e4m3(-1000.0f), 0xfe);
  EXPECT_EQ(f8e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(DType, F8E5M2RoundTripsAndOverflowsToInfinity) {
  for (uint32_t c = 0; c < 256; ++c) {
    const auto v = static_cast<uint8_t>(c);
    const float f = f8e5m2_to_float(v);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_f8e5m2(f), v) << "code " << c;
  }
  EXPECT_EQ(f8e5m2_to_float(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(f8e5m2_to_float(float_to_f8e5m2(1e6f))));
}

TEST(DType, QuantizeMatchesStoreThenLoad) {
  for (float v : {0.1f, -3.7f, 1000.3f, 1e-6f}) {
    for (DType t : {DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2}) {
      unsigned char buf[4];
      store_from_float(buf, t, 0, v);
      EXPECT_EQ(quantize(t, v), load_as_float(buf, t, 0));
    }
  }
}

}  // namespace
}  // namespace braid
