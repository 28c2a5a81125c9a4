// braid_moe_route_grouped through the C API, as a C caller uses it: only braid.h, plain
// descriptors, statuses and braid_last_error_message().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/braid.h"

namespace {

braid_tensor cpu_tensor(void* data, std::vector<int64_t>& shape, braid_dtype dtype) {
  braid_tensor t{};
  t.data = data;
  t.device = {BRAID_DEVICE_CPU, 0};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = dtype;
  t.shape = shape.data();
  return t;
}

const braid_dtype kF32 = {BRAID_DTYPE_FLOAT, 32, 1};
const braid_dtype kI32 = {BRAID_DTYPE_INT, 32, 1};

// The worked example of tests/ops/test_moe_route_grouped.cpp: 8 experts in 4 groups of 2, keep
// 2 groups, k = 3; the best expert (0) sits in a dropped group.
TEST(CApi, MoeRouteGroupedWorkedExample) {
  std::vector<float> logits = {3, -3, 0.5f, 0.5f, 1, -1, 2, -4};
  std::vector<float> bias = {0, 0, 0, 0, 0, 0.3f, 0, 0};
  std::vector<float> weights(3, NAN);
  std::vector<int32_t> ids(3, -1);
  std::vector<int64_t> ls{1, 8}, bs{8}, ks{1, 3};
  braid_tensor tl = cpu_tensor(logits.data(), ls, kF32), tb = cpu_tensor(bias.data(), bs, kF32);
  braid_tensor tw = cpu_tensor(weights.data(), ks, kF32), ti = cpu_tensor(ids.data(), ks, kI32);
  ASSERT_EQ(braid_moe_route_grouped(&tl, &tb, 4, 2, 3, 2.5f, &tw, &ti, nullptr), BRAID_OK)
      << braid_last_error_message();
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 2, 3}));
  const double s4 = 1 / (1 + std::exp(-1.0)), s2 = 1 / (1 + std::exp(-0.5)), sum = s4 + 2 * s2;
  EXPECT_NEAR(weights[0], s4 / sum * 2.5, 1e-6);
  EXPECT_NEAR(weights[1], s2 / sum * 2.5, 1e-6);
  EXPECT_NEAR(weights[2], s2 / sum * 2.5, 1e-6);
}

TEST(CApi, MoeRouteGroupedBadArguments) {
  std::vector<float> logits(2 * 8, 0.0f), bias(8, 0.0f), weights(2 * 3);
  std::vector<int32_t> ids(2 * 3);
  std::vector<int64_t> ls{2, 8}, bs{8}, ks{2, 3};
  braid_tensor tl = cpu_tensor(logits.data(), ls, kF32), tb = cpu_tensor(bias.data(), bs, kF32);
  braid_tensor tw = cpu_tensor(weights.data(), ks, kF32), ti = cpu_tensor(ids.data(), ks, kI32);
  EXPECT_EQ(braid_moe_route_grouped(&tl, &tb, 3, 1, 3, 1.0f, &tw, &ti, nullptr),
            BRAID_ERR_INVALID_ARGUMENT);  // 3 does not divide 8
  std::string msg = braid_last_error_message();
  EXPECT_NE(msg.find("moe_route_grouped"), std::string::npos) << msg;
  EXPECT_NE(msg.find("argument 'n_group'"), std::string::npos) << msg;
  EXPECT_EQ(braid_moe_route_grouped(&tl, nullptr, 4, 2, 3, 1.0f, &tw, &ti, nullptr),
            BRAID_ERR_INVALID_ARGUMENT);  // no bias
  msg = braid_last_error_message();
  EXPECT_NE(msg.find("argument 'bias'"), std::string::npos) << msg;
}

}  // namespace
