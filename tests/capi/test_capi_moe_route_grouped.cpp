// braid_moe_route_grouped and braid_moe_route_softmax_grouped through the C API, as a C caller
// uses them: only braid.h, plain descriptors, statuses and braid_last_error_message().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "capi_test_util.h"

namespace {

using namespace braid_capi_test;

// The worked example of tests/ops/moe/test_moe_route_grouped.cpp: 8 experts in 4 groups of 2, keep
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

// The worked example of tests/ops/moe/test_moe_route_softmax_grouped.cpp: 8 experts in 4 groups of
// 2, keep the 2 with the largest p, k = 3; renormalised, times 16.
TEST(CApi, MoeRouteSoftmaxGroupedWorkedExample) {
  std::vector<float> logits = {3, -3, 2.5f, 2.4f, 1, 0.9f, 2.8f, -4};
  std::vector<float> weights(3, NAN);
  std::vector<int32_t> ids(3, -1);
  std::vector<int64_t> ls{1, 8}, ks{1, 3};
  braid_tensor tl = cpu_tensor(logits.data(), ls, kF32);
  braid_tensor tw = cpu_tensor(weights.data(), ks, kF32), ti = cpu_tensor(ids.data(), ks, kI32);
  ASSERT_EQ(braid_moe_route_softmax_grouped(&tl, 4, 2, 3, 1, 16.0f, &tw, &ti, nullptr), BRAID_OK)
      << braid_last_error_message();
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 6, 1}));
  const double e0 = 1, e6 = std::exp(-0.2), e1 = std::exp(-6.0), sum = e0 + e6 + e1;
  EXPECT_NEAR(weights[0], e0 / sum * 16, 16e-6);
  EXPECT_NEAR(weights[1], e6 / sum * 16, 16e-6);
  EXPECT_NEAR(weights[2], e1 / sum * 16, 16e-6);

  // renormalize 0, one group (greedy): the global top 3 and their p.
  ASSERT_EQ(braid_moe_route_softmax_grouped(&tl, 1, 1, 3, 0, 1.0f, &tw, &ti, nullptr), BRAID_OK)
      << braid_last_error_message();
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 6, 2}));
  double total = 0;
  for (float x : logits) total += std::exp(double(x) - 3);
  EXPECT_NEAR(weights[0], 1 / total, 1e-6);
  EXPECT_NEAR(weights[2], std::exp(-0.5) / total, 1e-6);
}

TEST(CApi, MoeRouteSoftmaxGroupedBadArguments) {
  std::vector<float> logits(2 * 8, 0.0f), weights(2 * 3);
  std::vector<int32_t> ids(2 * 3);
  std::vector<int64_t> ls{2, 8}, ks{2, 3};
  braid_tensor tl = cpu_tensor(logits.data(), ls, kF32);
  braid_tensor tw = cpu_tensor(weights.data(), ks, kF32), ti = cpu_tensor(ids.data(), ks, kI32);
  EXPECT_EQ(braid_moe_route_softmax_grouped(&tl, 4, 2, 5, 1, 1.0f, &tw, &ti, nullptr),
            BRAID_ERR_INVALID_ARGUMENT);  // k = 5 > min(16, 2 groups of 2)
  std::string msg = braid_last_error_message();
  EXPECT_NE(msg.find("moe_route_softmax_grouped"), std::string::npos) << msg;
  EXPECT_NE(msg.find("argument 'k'"), std::string::npos) << msg;
  EXPECT_EQ(braid_moe_route_softmax_grouped(&tl, 4, 2, 3, 1, INFINITY, &tw, &ti, nullptr),
            BRAID_ERR_INVALID_ARGUMENT);
  msg = braid_last_error_message();
  EXPECT_NE(msg.find("argument 'routed_scaling_factor'"), std::string::npos) << msg;
  EXPECT_EQ(braid_moe_route_softmax_grouped(nullptr, 4, 2, 3, 1, 1.0f, &tw, &ti, nullptr),
            BRAID_ERR_INVALID_ARGUMENT);  // no logits
  msg = braid_last_error_message();
  EXPECT_NE(msg.find("argument 'logits'"), std::string::npos) << msg;
}

}  // namespace
