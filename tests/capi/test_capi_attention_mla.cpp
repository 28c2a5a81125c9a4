// braid_attention_mla through the C API, as a C caller uses it: only braid.h, plain descriptors,
// statuses and braid_last_error_message().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "capi_test_util.h"

namespace {

using namespace braid_capi_test;

// One sequence of two tokens, both queries (causal), one head, r = 2, dr = 1, scale 0.5:
//   rows c0 = [1, 0 | 1], c1 = [0, 2 | -1]
//   query 0 ([1, 1 | 1]) sees c0 only: out = [1, 0], lse = (1 + 0 + 1) * 0.5 = 1
//   query 1 ([0, 1 | 2]) scores c0: (0 + 0 + 2) * 0.5 = 1, c1: (0 + 2 - 2) * 0.5 = 0, so
//   out = (e c0 + c1)[:2] / (e + 1) = [e, 2] / (e + 1), lse = log(e + 1)
TEST(CApi, AttentionMlaWorkedExample) {
  std::vector<float> q_latent = {1, 1, 0, 1}, q_rope = {1, 2}, cache = {1, 0, 1, 0, 2, -1};
  std::vector<int32_t> cu = {0, 2}, table = {0}, lens = {2};
  std::vector<float> out(4, NAN), lse(2, NAN);
  std::vector<int64_t> ql_s{2, 1, 2}, qr_s{2, 1, 1}, c_s{1, 2, 1, 3}, cu_s{2}, t_s{1, 1}, l_s{1},
      lse_s{2, 1};
  braid_tensor tql = cpu_tensor(q_latent.data(), ql_s, kF32),
               tqr = cpu_tensor(q_rope.data(), qr_s, kF32);
  braid_tensor tc = cpu_tensor(cache.data(), c_s, kF32), tcu = cpu_tensor(cu.data(), cu_s, kI32);
  braid_tensor tt = cpu_tensor(table.data(), t_s, kI32), tl = cpu_tensor(lens.data(), l_s, kI32);
  braid_tensor to = cpu_tensor(out.data(), ql_s, kF32), tlse = cpu_tensor(lse.data(), lse_s, kF32);
  EXPECT_EQ(braid_attention_mla_workspace_floats(2, 1, 2, 2), 0);
  ASSERT_EQ(
      braid_attention_mla(&tql, &tqr, &tcu, &tc, &tt, &tl, 1, 0.5f, &to, &tlse, nullptr, nullptr),
      BRAID_OK)
      << braid_last_error_message();
  const double e = std::exp(1.0);
  EXPECT_NEAR(out[0], 1.0, 1e-6);
  EXPECT_NEAR(out[1], 0.0, 1e-6);
  EXPECT_NEAR(out[2], e / (e + 1), 1e-6);
  EXPECT_NEAR(out[3], 2 / (e + 1), 1e-6);
  EXPECT_NEAR(lse[0], 1.0, 1e-6);
  EXPECT_NEAR(lse[1], std::log(e + 1), 1e-6);
}

TEST(CApi, AttentionMlaBadArguments) {
  std::vector<float> q_latent(4), q_rope(2), cache(8), out(4);
  std::vector<int32_t> cu = {0, 2}, table = {0}, lens = {2};
  std::vector<int64_t> ql_s{2, 1, 2}, qr_s{2, 1, 1}, c_s{1, 2, 1, 4}, cu_s{2}, t_s{1, 1}, l_s{1};
  braid_tensor tql = cpu_tensor(q_latent.data(), ql_s, kF32),
               tqr = cpu_tensor(q_rope.data(), qr_s, kF32);
  braid_tensor tc = cpu_tensor(cache.data(), c_s, kF32), tcu = cpu_tensor(cu.data(), cu_s, kI32);
  braid_tensor tt = cpu_tensor(table.data(), t_s, kI32), tl = cpu_tensor(lens.data(), l_s, kI32);
  braid_tensor to = cpu_tensor(out.data(), ql_s, kF32);
  // The cache rows are 4 wide, not r + dr = 3.
  EXPECT_EQ(
      braid_attention_mla(&tql, &tqr, &tcu, &tc, &tt, &tl, 1, 0.5f, &to, nullptr, nullptr, nullptr),
      BRAID_ERR_SHAPE);
  std::string msg = braid_last_error_message();
  EXPECT_NE(msg.find("attention_mla"), std::string::npos) << msg;
  EXPECT_NE(msg.find("argument 'cache'"), std::string::npos) << msg;
  EXPECT_EQ(braid_attention_mla(nullptr, &tqr, &tcu, &tc, &tt, &tl, 1, 0.5f, &to, nullptr, nullptr,
                                nullptr),
            BRAID_ERR_INVALID_ARGUMENT);
  msg = braid_last_error_message();
  EXPECT_NE(msg.find("argument 'q_latent'"), std::string::npos) << msg;
}

}  // namespace
