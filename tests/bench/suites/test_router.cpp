// bench router: its byte count, derived figures, argument checks, output check (against the CPU
// op it checks the GPU with) and tables. CPU only.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bench/suites/router.h"
#include "braid/buffer.h"
#include "braid/dtype.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench {
namespace {

Stats median_only(double us) {
  Stats s;
  s.median_us = s.min_us = s.max_us = s.mean_us = us;
  s.count = 100;
  return s;
}

RouterLine line(int64_t tokens, double us, double baseline_us, double gbps) {
  RouterLine l;
  l.shape = {tokens, 128, 8, 2};
  l.mode = "alone";
  l.timing = "per_launch";
  l.stats = median_only(us);
  l.baseline_us = baseline_us;
  l.copy_gbps = gbps;
  l.check.entries = tokens * 8;
  return l;
}

TEST(BenchRouter, BytesAreLogitsReadAndBothOutputsWritten) {
  // Qwen3-30B-A3B: 128 bf16 logits + 8 f32 weights + 8 i32 ids per token.
  EXPECT_EQ(router_bytes({1, 128, 8, 2}), 320.0);
  EXPECT_EQ(router_bytes({1024, 128, 8, 2}), 1024 * 320.0);
  EXPECT_EQ(router_bytes({3, 64, 4, 4}), 3 * (64 * 4 + 4 * 8.0));
}

TEST(BenchRouter, GroupedRouterAlsoReadsItsBiasOncePerCall) {
  // DeepSeek-V3: 256 f32 logits + 8 f32 weights + 8 i32 ids per token, 256 bf16 biases per call.
  const RouterShape one{1, 256, 8, 4, 8, 4, 2}, many{1024, 256, 8, 4, 8, 4, 2};
  EXPECT_EQ(router_bytes(one), 1024 + 64 + 512.0);
  EXPECT_EQ(router_bytes(many), 1024 * (1024 + 64.0) + 512);
  EXPECT_STREQ(router_op_name(one), "moe_route_grouped");
  EXPECT_STREQ(router_op_name({1, 128, 8, 2}), "moe_route_topk_softmax");
  EXPECT_FALSE(torch_router_anchor({1, 128, 8, 2, 8, 4, 2}).has_value());  // softmax's anchor
}

TEST(BenchRouter, FiguresFollowFromTimeBaselineAndCeiling) {
  EXPECT_EQ(transfer_ns(3000, 3000), 1.0);  // 3000 B at 3000 GB/s = 1 ns
  EXPECT_EQ(transfer_ns(3000, 0), 0.0);
  const RouterFigures f = router_figures(line(1024, 8.0, 6.0, 2000));
  EXPECT_DOUBLE_EQ(f.bytes, 327680);
  EXPECT_DOUBLE_EQ(f.transfer_ns, 163.84);
  EXPECT_DOUBLE_EQ(f.bw_utilisation, 163.84 / 8000);
  EXPECT_DOUBLE_EQ(f.overhead_share, 0.75);
  EXPECT_DOUBLE_EQ(f.above_baseline_us, 2.0);
  const RouterFigures none = router_figures(line(1, 8.0, 0, 2000));
  EXPECT_EQ(none.overhead_share, 0);
  EXPECT_EQ(none.above_baseline_us, 0);
}

TEST(BenchRouter, ArgumentsAreCheckedAtTheEdge) {
  EXPECT_NO_THROW(validate_router_args(128, 8, {1, 4, 256, 1024}));
  EXPECT_NO_THROW(validate_router_args(4, 4, {1}));
  EXPECT_THROW(validate_router_args(0, 1, {1}), Error);
  EXPECT_THROW(validate_router_args(513, 8, {1}), Error);
  EXPECT_THROW(validate_router_args(128, 17, {1}), Error);
  EXPECT_THROW(validate_router_args(4, 5, {1}), Error);
  EXPECT_THROW(validate_router_args(128, 0, {1}), Error);
  EXPECT_THROW(validate_router_args(128, 8, {}), Error);
  EXPECT_THROW(validate_router_args(128, 8, {4, 0}), Error);
}

TEST(BenchRouter, CheckPassesTheReferenceAndCatchesUnwrittenOutputs) {
  // The reference against itself, on bf16 logits with many ties.
  const int64_t T = 16, E = 128, k = 8;
  OwnedTensor logits(DType::bf16, {T, E}, Device::cpu());
  for (int64_t i = 0; i < T * E; ++i)
    logits.view().ptr<uint16_t>()[i] = float_to_bf16(float((i * 37) % 23) / 4.0f - 2.0f);
  OwnedTensor w(DType::f32, {T, k}, Device::cpu()), ids(DType::i32, {T, k}, Device::cpu());
  ops::moe_route_topk_softmax(logits, int(k), true, w, ids);
  const float* pw = w.view().ptr<float>();
  const int32_t* pi = ids.view().ptr<int32_t>();
  RouterCheck c = check_router(pw, pi, pw, pi, T * k);
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(c.entries, T * k);

  std::vector<float> w2(pw, pw + T * k);
  std::vector<int32_t> i2(pi, pi + T * k);
  w2[5] += 1e-4f;
  c = check_router(w2.data(), i2.data(), pw, pi, T * k);
  EXPECT_FALSE(c.ok());
  EXPECT_NEAR(c.max_abs_weight_error, 1e-4, 1e-6);

  w2[5] = pw[5];
  w2[T * k - 1] = NAN;  // as the poisoning leaves an unwritten weight
  w2[T * k - 2] = 0.5f;  // a later finite error must not hide the NaN
  c = check_router(w2.data(), i2.data(), pw, pi, T * k);
  EXPECT_TRUE(std::isnan(c.max_abs_weight_error));
  EXPECT_FALSE(c.ok());

  std::vector<float> w3(pw, pw + T * k);
  i2[0] = -1;  // 0xFFFFFFFF, an unwritten id
  c = check_router(w3.data(), i2.data(), pw, pi, T * k);
  EXPECT_EQ(c.id_mismatches, 1);
  EXPECT_FALSE(c.ok());
}

TEST(BenchRouter, AnchorsOnlyForTheirShape) {
  ASSERT_TRUE(torch_router_anchor({1, 128, 8, 2}).has_value());
  EXPECT_EQ(torch_router_anchor({1, 128, 8, 2})->eager_us, 19.6);
  EXPECT_EQ(torch_router_anchor({1024, 128, 8, 2})->graph_us, 28.4);
  EXPECT_FALSE(torch_router_anchor({4, 128, 8, 2}).has_value());  // not in ANCHORS.md
  EXPECT_FALSE(torch_router_anchor({1, 64, 8, 2}).has_value());
  EXPECT_FALSE(torch_router_anchor({1, 128, 4, 2}).has_value());
}

TEST(BenchRouter, TablesAndJsonCarryEveryLine) {
  std::vector<RouterLine> lines = {line(1, 6.0, 5.0, 3000), line(4, 6.0, 5.0, 3000),
                                   line(1024, 7.5, 5.0, 3000)};
  lines[2].check.id_mismatches = 2;
  const std::string table = router_table(lines);
  EXPECT_NE(table.find("1024"), std::string::npos);
  EXPECT_NE(table.find("FAIL"), std::string::npos);
  EXPECT_NE(table.find("83.33%"), std::string::npos);  // 5 / 6 fixed-cost share
  EXPECT_EQ(router_ratios(lines), "data ratio: 1 : 4 : 1024\ntime ratio: 1.00 : 1.00 : 1.25\n");

  const std::string targets = router_targets(lines, 5.0);
  EXPECT_NE(targets.find("not met"), std::string::npos);
  EXPECT_NE(targets.find("above the target"), std::string::npos);  // baseline 5 us > 4 us
  EXPECT_NE(targets.find("19.6"), std::string::npos);              // ANCHORS.md, 1 token
  EXPECT_NE(targets.find("compare router"), std::string::npos);

  const std::vector<BaselineLine> base = {{"minimal_rw_kernel", "alone", "per_launch",
                                           median_only(5.0)}};
  EXPECT_NE(baseline_table(base).find("minimal_rw_kernel"), std::string::npos);
  const nlohmann::json j = router_json(base, lines);
  ASSERT_EQ(j["lines"].size(), 3u);
  EXPECT_EQ(j["lines"][2]["check"]["ok"], false);
  EXPECT_EQ(j["lines"][0]["bytes"], 320.0);
  EXPECT_TRUE(j["lines"][0].contains("anchors_torch_h100"));
  EXPECT_FALSE(j["lines"][1].contains("anchors_torch_h100"));
  EXPECT_EQ(j["baselines"].size(), 1u);
  EXPECT_EQ(j["targets"]["alone_us"], 4.0);
}

}  // namespace
}  // namespace braid::bench
