// braid_sample_tokens through the C API, as a C caller uses it: only braid.h, plain descriptors,
// statuses and braid_last_error_message().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "capi_test_util.h"

namespace {

using namespace braid_capi_test;

struct Rows {
  std::vector<float> logits, temperature, top_p, min_p;
  std::vector<int32_t> top_k, tokens;
  std::vector<int64_t> seeds, steps;
  std::vector<int64_t> ls, rs;

  braid_status call() {
    const int64_t m = static_cast<int64_t>(temperature.size());
    ls = {m, static_cast<int64_t>(logits.size()) / m};
    rs = {m};
    tokens.assign(static_cast<size_t>(m), -1);
    braid_tensor l = cpu_tensor(logits.data(), ls, kF32), t = cpu_tensor(temperature.data(), rs, kF32),
                 k = cpu_tensor(top_k.data(), rs, kI32), p = cpu_tensor(top_p.data(), rs, kF32),
                 mp = cpu_tensor(min_p.data(), rs, kF32), s = cpu_tensor(seeds.data(), rs, kI64),
                 st = cpu_tensor(steps.data(), rs, kI64), out = cpu_tensor(tokens.data(), rs, kI32);
    return braid_sample_tokens(&l, &t, &k, &p, &mp, &s, &st, nullptr, &out, nullptr);
  }
};

TEST(CApi, SampleTokensGreedyTopKAndDraws) {
  Rows r;
  // Row 0 greedy, row 1 top_k = 1, rows 2.. sample {0, 1, 2} with p 1 : 1 : e^-30 (never 2).
  const std::vector<float> row = {2.0f, 2.0f, -28.0f, NAN};
  const int n = 40;
  for (int i = 0; i < n; ++i) {
    r.logits.insert(r.logits.end(), row.begin(), row.end());
    r.temperature.push_back(i == 0 ? 0.0f : 1.0f);
    r.top_k.push_back(i == 1 ? 1 : 0);
    r.top_p.push_back(1.0f);
    r.min_p.push_back(i == 1 ? 0.0f : 1e-6f);
    r.seeds.push_back(1234);
    r.steps.push_back(i);
  }
  ASSERT_EQ(r.call(), BRAID_OK) << braid_last_error_message();
  EXPECT_EQ(r.tokens[0], 0);
  std::set<int32_t> seen(r.tokens.begin() + 1, r.tokens.end());
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
  EXPECT_EQ(braid_sample_tokens_workspace_bytes(n, 4), 0);
  EXPECT_EQ(braid_sample_tokens_workspace_bytes(n, 0), -1);
  EXPECT_NE(std::string(braid_last_error_message()).find("'vocab'"), std::string::npos);
}

TEST(CApi, SampleTokensBadValueNamesTheRow) {
  Rows r;
  r.logits = {0.0f, 1.0f, 0.5f, 0.25f};
  r.temperature = {1.0f, 1.0f};
  r.top_k = {0, 0};
  r.top_p = {1.0f, 0.0f};
  r.min_p = {0.0f, 0.0f};
  r.seeds = {0, 0};
  r.steps = {0, 0};
  EXPECT_EQ(r.call(), BRAID_ERR_INVALID_ARGUMENT);
  const std::string msg = braid_last_error_message();
  for (const char* f : {"sample_tokens", "argument 'top_p'", "top_p[1]"})
    EXPECT_NE(msg.find(f), std::string::npos) << msg;
}

}  // namespace
