// bench moe: its shapes, FLOP and byte counts, roofline classes, timing plan, token sample, skew
// bias, summary figures, tables and JSON. CPU only.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench/suites/moe.h"
#include "braid/error.h"

namespace braid::bench {
namespace {

Stats median_only(double us) {
  Stats s;
  s.median_us = s.min_us = s.max_us = s.mean_us = us;
  s.count = 20;
  return s;
}

TEST(BenchMoe, PresetShapesAreSeed001AndQwen3) {
  const std::vector<MoeShape> all = moe_shapes("all", {});
  ASSERT_EQ(all.size(), 8u);
  EXPECT_EQ(all[0].model.name, "seed001");
  EXPECT_EQ(all[0].tokens, 2048);
  EXPECT_EQ(all[0].label, "4x512");
  EXPECT_EQ(all[1].label, "16x2048");
  EXPECT_EQ(all[2].label, "32x2048");
  EXPECT_EQ(all[2].tokens, 65536);
  EXPECT_FALSE(all[0].decode());
  EXPECT_EQ(all[3].model.name, "qwen3");
  EXPECT_EQ(all[3].model.experts, 128);
  EXPECT_EQ(all[3].model.k, 8);
  EXPECT_TRUE(all[3].decode());   // 1 token
  EXPECT_TRUE(all[5].decode());   // 16 tokens
  EXPECT_FALSE(all[6].decode());  // 512 tokens
  EXPECT_EQ(all[7].tokens, 4096);
  EXPECT_EQ(all[7].label, "T=4096");

  const std::vector<MoeShape> q = moe_shapes("qwen3", {7, 300});
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].tokens, 7);
  EXPECT_EQ(moe_shapes("seed001", {}).size(), 3u);
}

TEST(BenchMoe, BadOptionsAreRejectedByName) {
  EXPECT_THROW(moe_shapes("mixtral", {}), Error);
  EXPECT_THROW(moe_shapes("all", {4, 0}), Error);
  EXPECT_THROW(validate_moe_samples(-1), Error);
  EXPECT_NO_THROW(validate_moe_samples(0));
  try {
    moe_shapes("nope", {});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--shape"), std::string::npos) << e.what();
  }
}

TEST(BenchMoe, ExpertFlopsMatchTheFloorsPage) {
  // docs/perf/moe.md: 4x512 tokens, top-2 -> 4096 pairs, 1.11 TFLOP.
  EXPECT_DOUBLE_EQ(moe_expert_flops(seed001_model(), 4096), 6.0 * 4096 * 4096 * 11008);
  EXPECT_NEAR(moe_expert_flops(seed001_model(), 131072) / 1e12, 35.5, 0.05);
}

TEST(BenchMoe, StepCostsCountWeightsOfActiveExpertsOnly) {
  const MoeShape s = moe_shapes("seed001", {2048})[0];
  const MoeRouting all{4096, 32}, half{4096, 16};
  const double H = 4096, I = 11008, P = 4096, T = 2048;
  const MoeCost gu = moe_step_cost(MoeStep::gate_up, s, all);
  EXPECT_DOUBLE_EQ(gu.flops, 2 * P * H * 2 * I);
  EXPECT_DOUBLE_EQ(gu.bytes, 2 * (32 * 2 * I * H + P * H + P * I) + 4 * 33);
  EXPECT_LT(moe_step_cost(MoeStep::gate_up, s, half).bytes, gu.bytes);
  const MoeCost down = moe_step_cost(MoeStep::down, s, all);
  EXPECT_DOUBLE_EQ(down.flops, 2 * P * I * H);
  // The layer: x, router weight, all 32 experts (8.66 GB) and out.
  const MoeCost layer = moe_step_cost(MoeStep::layer, s, all);
  EXPECT_DOUBLE_EQ(layer.bytes, 2 * (T * H + 32 * H + 32 * 3 * I * H + T * H));
  EXPECT_DOUBLE_EQ(layer.flops, 2 * T * 32 * H + moe_expert_flops(s.model, 4096));
  EXPECT_EQ(moe_step_cost(MoeStep::layer_graph, s, all).bytes, layer.bytes);
  EXPECT_EQ(moe_step_cost(MoeStep::route, s, all).flops, 0);
  EXPECT_DOUBLE_EQ(moe_step_cost(MoeStep::route, s, all).bytes, 2 * T * 32 + 8 * T * 2);
  // Dense peer: the same FLOPs as the grouped GEMMs, one expert's weights.
  EXPECT_DOUBLE_EQ(moe_step_cost(MoeStep::dense_gate_up, s, all).flops, gu.flops);
  EXPECT_DOUBLE_EQ(moe_step_cost(MoeStep::dense_down, s, all).flops, down.flops);
  // Decode: Qwen3 at one token reads 8 experts, 75.5 MB.
  const MoeShape q = moe_shapes("qwen3", {1})[0];
  const MoeCost ex = moe_step_cost(MoeStep::experts, q, {8, 8});
  EXPECT_NEAR(ex.bytes / 1e6, 75.5, 0.1);
  EXPECT_DOUBLE_EQ(ex.flops, moe_expert_flops(q.model, 8));
}

TEST(BenchMoe, ComponentsFollowThePath) {
  EXPECT_EQ(moe_components(true),
            (std::vector<MoeStep>{MoeStep::router_gemm, MoeStep::route, MoeStep::experts}));
  const std::vector<MoeStep> grouped = moe_components(false);
  ASSERT_EQ(grouped.size(), 7u);
  EXPECT_EQ(grouped[4], MoeStep::gate_up);
  EXPECT_EQ(grouped[6], MoeStep::combine);
  EXPECT_STREQ(moe_step_name(MoeStep::gate_up), "moe_grouped_gemm_swiglu");
  EXPECT_STREQ(moe_step_name(MoeStep::layer_graph), "moe_layer");
}

TEST(BenchMoe, TimingBatchesFillASample) {
  TimingConfig g = moe_timing(1000, false, TimingMode::graph);
  EXPECT_EQ(g.mode, TimingMode::graph);
  EXPECT_EQ(g.batch, 10);
  EXPECT_EQ(g.reps, 20);
  EXPECT_NO_THROW(validate(g));
  EXPECT_EQ(moe_timing(1000, true, TimingMode::graph).batch, 2);
  EXPECT_EQ(moe_timing(1, false, TimingMode::graph).batch, 200);
  EXPECT_EQ(moe_timing(60000, false, TimingMode::back_to_back).batch, 1);
  const TimingConfig b = moe_timing(60000, false, TimingMode::back_to_back);
  EXPECT_GE(b.warmup, 2);
  EXPECT_NO_THROW(validate(b));
}

TEST(BenchMoe, SampleTokensIncludeBothEndsAndAreDistinct) {
  EXPECT_EQ(moe_sample_tokens(3, 64, 1), (std::vector<int64_t>{0, 1, 2}));
  const std::vector<int64_t> s = moe_sample_tokens(65536, 64, 7);
  ASSERT_EQ(s.size(), 64u);
  EXPECT_EQ(s.front(), 0);
  EXPECT_EQ(s.back(), 65535);
  EXPECT_EQ(std::set<int64_t>(s.begin(), s.end()).size(), 64u);
  EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
  EXPECT_EQ(moe_sample_tokens(65536, 64, 7), s);
  EXPECT_TRUE(moe_sample_tokens(10, 0, 1).empty());
}

TEST(BenchMoe, SkewBiasFavoursTheFirstExperts) {
  const std::vector<float> b = moe_skew_bias(32, 2);
  ASSERT_EQ(b.size(), 32u);
  EXPECT_EQ(b[0], kMoeSkewBias);
  EXPECT_EQ(b[1], kMoeSkewBias);
  EXPECT_EQ(b[2], 0.0f);
  const std::vector<float> q = moe_skew_bias(128, 8);
  EXPECT_EQ(q[7], kMoeSkewBias);
  EXPECT_EQ(q[8], 0.0f);
}

// A grouped case with every row measured at the given medians (microseconds).
MoeCase grouped_case(double gate_up_us, double down_us, double dense_gu_us, double dense_down_us) {
  MoeCase c;
  c.shape = moe_shapes("seed001", {2048})[0];
  c.routing = {4096, 32};
  c.load.counts.assign(32, 128);
  c.load.tokens = 2048;
  c.load.k = 2;
  const std::vector<std::pair<MoeStep, double>> times = {{MoeStep::router_gemm, 50},
                                                         {MoeStep::route, 10},
                                                         {MoeStep::permute, 5},
                                                         {MoeStep::gather, 20},
                                                         {MoeStep::gate_up, gate_up_us},
                                                         {MoeStep::down, down_us},
                                                         {MoeStep::combine, 15},
                                                         {MoeStep::layer, 2200},
                                                         {MoeStep::layer_graph, 2000},
                                                         {MoeStep::dense_gate_up, dense_gu_us},
                                                         {MoeStep::dense_down, dense_down_us}};
  for (const auto& [step, us] : times) {
    const MoeCost cost = moe_step_cost(step, c.shape, c.routing);
    ResultRow r;
    r.name = moe_step_name(step);
    r.timing = "graph x5";
    r.stats = median_only(us);
    r.flops = cost.flops;
    r.bytes = cost.bytes;
    c.steps.push_back(step);
    c.rows.push_back(r);
  }
  return c;
}

TEST(BenchMoe, SummaryReadsRouterShareAndDenseRatio) {
  const MoeCase c = grouped_case(1200, 600, 1000, 500);
  const Ceilings ceil{3000, 750};
  const MoeSummary s = moe_summary(c, ceil);
  EXPECT_DOUBLE_EQ(s.layer_ms, 2.2);
  EXPECT_DOUBLE_EQ(s.layer_graph_ms, 2.0);
  EXPECT_DOUBLE_EQ(s.router_share, 60.0 / 2000);
  const double flops = moe_expert_flops(c.shape.model, 4096);
  EXPECT_DOUBLE_EQ(s.expert_tflops, flops / 1800 / 1e6);
  EXPECT_DOUBLE_EQ(s.dense_tflops, flops / 1500 / 1e6);
  EXPECT_NEAR(s.percent_of_dense, 100.0 * 1500 / 1800, 1e-9);
  EXPECT_GT(s.expert_copy_percent, 0);
  EXPECT_GT(s.layer_tflops, 0);
}

TEST(BenchMoe, TablesAndJsonCarryEveryCase) {
  MoeCase c = grouped_case(1200, 600, 1000, 500);
  MoeCheck check;
  check.tokens = 64;
  check.layer_vs_cpu.rel_l2 = 3e-3;
  c.check = check;
  const Ceilings ceil{3000, 750};
  const std::string table = moe_case_table(c, ceil);
  EXPECT_NE(table.find("moe_grouped_gemm_swiglu"), std::string::npos) << table;
  EXPECT_NE(table.find("moe_layer (graph)"), std::string::npos) << table;
  EXPECT_NE(table.find("dense_cublas_down"), std::string::npos) << table;
  const std::string lines = moe_summary_lines(c, ceil);
  EXPECT_NE(lines.find("of dense cuBLAS"), std::string::npos) << lines;
  EXPECT_NE(lines.find("torch._grouped_mm"), std::string::npos) << lines;
  const std::string load = moe_load_table({c});
  EXPECT_NE(load.find("4x512"), std::string::npos) << load;
  EXPECT_NE(moe_validation_table({c}).find(" ok"), std::string::npos);

  const nlohmann::json j = moe_json({c}, ceil);
  ASSERT_EQ(j["cases"].size(), 1u);
  const auto& jc = j["cases"][0];
  EXPECT_EQ(jc["model"], "seed001");
  EXPECT_EQ(jc["path"], "grouped");
  EXPECT_EQ(jc["rows"].size(), c.rows.size());
  EXPECT_EQ(jc["rows"][4]["step"], "moe_grouped_gemm_swiglu");
  EXPECT_TRUE(jc["check"]["ok"].get<bool>());
  EXPECT_NEAR(jc["summary"]["percent_of_dense_cublas"].get<double>(), 100.0 * 1500 / 1800, 1e-9);
  EXPECT_EQ(jc["anchors_h100"]["torch_grouped_mm_ms"], 5.20);
  EXPECT_EQ(j["targets"]["percent_of_dense_cublas"], kMoeTargetPercentOfDense);
}

TEST(BenchMoe, CheckFailsOnNonFiniteOrLargeError) {
  MoeCheck c;
  c.layer_vs_cpu.rel_l2 = 5e-3;
  EXPECT_TRUE(c.ok());
  c.nonfinite = 1;
  EXPECT_FALSE(c.ok());
  c.nonfinite = 0;
  c.layer_vs_cpu.rel_l2 = 0.5;
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace braid::bench
