// bench moe-fp8: its shapes and options, FLOP and byte counts (executed and the definition's),
// floors, bounds, flashinfer-bench's match rule, the check verdicts, the summary figures, tables
// and JSON. CPU only.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "bench/suites/moe_fp8.h"
#include "braid/error.h"
#include "braid/ops.h"
#include "test_util.h"

namespace braid::bench {
namespace {

Stats median_only(double us) {
  Stats s;
  s.median_us = s.min_us = s.max_us = s.mean_us = us;
  s.count = 20;
  return s;
}

// copy 3 TB/s, bf16 GEMM 750 TFLOP/s, fp8 GEMM 1400 TFLOP/s.
const Ceilings kCeil{3000, 750, 1400};

TEST(BenchMoeFp8, PresetShapesAreSeed003AndSeed001) {
  const std::vector<Fp8Shape> all = moe_fp8_shapes("all", {});
  ASSERT_EQ(all.size(), 7u);
  EXPECT_EQ(all[0].layer, Fp8Layer::seed003);
  EXPECT_EQ(all[0].tokens, 1);
  EXPECT_EQ(all[0].label, "T=1");
  EXPECT_EQ(all[3].tokens, 4096);
  EXPECT_EQ(all[4].layer, Fp8Layer::seed001);
  EXPECT_EQ(all[4].label, "4x512");
  EXPECT_EQ(all[6].tokens, 65536);
  EXPECT_EQ(all[6].label, "32x2048");
  const std::vector<Fp8Shape> t = moe_fp8_shapes("seed003", {7, 300});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].tokens, 300);
  EXPECT_EQ(moe_fp8_shapes("seed001", {100})[0].label, "T=100");

  const Fp8Dims d = fp8_dims(Fp8Layer::seed003);
  EXPECT_EQ(d.hidden, 7168);
  EXPECT_EQ(d.inter, 2048);
  EXPECT_EQ(d.experts, 32);
  EXPECT_EQ(d.routed_experts, 256);
  EXPECT_EQ(d.k, 8);
  const Fp8Dims s = fp8_dims(Fp8Layer::seed001);
  EXPECT_EQ(s.hidden, 4096);
  EXPECT_EQ(s.inter, 11008);
  EXPECT_EQ(s.k, 2);
  EXPECT_EQ(seed001_target_ms(16 * 2048), 22.0);
  EXPECT_EQ(seed001_target_ms(32 * 2048), 38.0);
  EXPECT_EQ(seed001_target_ms(100), 0.0);
}

TEST(BenchMoeFp8, BadOptionsAreRejectedByName) {
  test::expect_error([] { moe_fp8_shapes("mixtral", {}); }, ErrorKind::invalid_argument,
                     {"--shape"});
  test::expect_error([] { moe_fp8_shapes("seed003", {4, 0}); }, ErrorKind::invalid_argument,
                     {"--tokens"});
  // seed001 below 17 tokens would be bench moe's decode path, not the grouped one.
  test::expect_error([] { moe_fp8_shapes("seed001", {16}); }, ErrorKind::invalid_argument,
                     {"--tokens", "16"});
  EXPECT_NO_THROW(moe_fp8_shapes("seed003", {1}));
  test::expect_error([] { validate_fp8_terms({3, 0}); }, ErrorKind::invalid_argument,
                     {"--terms"});
  test::expect_error([] { validate_fp8_terms({ops::kFp8MaxTerms + 1}); },
                     ErrorKind::invalid_argument, {"--terms"});
  test::expect_error([] { validate_fp8_terms({}); }, ErrorKind::invalid_argument, {"--terms"});
  EXPECT_NO_THROW(validate_fp8_terms({3, 1, 2}));
}

TEST(BenchMoeFp8, RoutingCountsLocalPairsAndDistinctExperts) {
  // 3 tokens, top-2; local experts [4, 8).
  const std::vector<int32_t> ids = {4, 5, 5, 9, 7, 0};
  const Fp8Routing r = fp8_routing(ids.data(), 3, 2, 4, 4);
  EXPECT_EQ(r.pairs, 4);  // 4, 5, 5, 7
  EXPECT_EQ(r.active_experts, 3);
  EXPECT_EQ(fp8_routing(ids.data(), 3, 2, 100, 4).pairs, 0);
}

TEST(BenchMoeFp8, Seed003FlopsSeparateExecutedFromDefinition) {
  const Fp8Shape s = moe_fp8_shapes("seed003", {4096})[0];
  const Fp8Routing all{4096 * 8, 32};
  const double P = 4096 * 8, H = 7168, I = 2048;
  for (int terms : {1, 3}) {
    const Fp8Cost op = moe_fp8_step_cost(Fp8Step::ds_op, s, all, terms);
    EXPECT_DOUBLE_EQ(op.definition_flops, 2 * P * (2 * I * H + H * I));
    EXPECT_DOUBLE_EQ(op.flops, 2 * P * 2 * I * H + terms * 2 * P * I * H);
    EXPECT_TRUE(op.fp8);
    const Fp8Cost g2 = moe_fp8_step_cost(Fp8Step::ds_gemm2, s, all, terms);
    EXPECT_DOUBLE_EQ(g2.flops, terms * 2 * P * I * H);
    EXPECT_DOUBLE_EQ(g2.definition_flops, 2 * P * I * H);
    EXPECT_EQ(moe_fp8_step_cost(Fp8Step::ds_pipeline, s, all, terms).flops, op.flops);
  }
  const Fp8Cost g1 = moe_fp8_step_cost(Fp8Step::ds_gemm1, s, all, 3);
  EXPECT_DOUBLE_EQ(g1.flops, 2 * P * 2 * I * H);
  // GEMM1 reads the 32 experts' [4096, 7168] fp8 weights with their 128 x 128 scales, the
  // gathered rows with theirs, and writes 3 fp8 terms of h.
  EXPECT_DOUBLE_EQ(g1.bytes, 32 * 2 * I * H * kFp8WeightBytes + kFp8ActBytes * (P * H + 3 * P * I) +
                                 4 * 33);
  EXPECT_EQ(moe_fp8_step_cost(Fp8Step::ds_route, s, all, 3).flops, 0);
  EXPECT_FALSE(moe_fp8_step_cost(Fp8Step::ds_combine, s, all, 3).fp8);
  // Local weights: 32 x (4096 x 7168 + 7168 x 2048) B = 1.41 GB (docs/perf/moe.md).
  const Fp8Floor f = moe_fp8_floor(s, all, kCeil);
  EXPECT_NEAR(f.weight_bytes / 1e9, 1.409, 0.001);
}

TEST(BenchMoeFp8, FloorIsTheSlowerOfWeightsAndFlops) {
  const Fp8Shape one = moe_fp8_shapes("seed003", {1})[0];
  // One token, 8 local experts: 8 x 44.0 M weights = 352 MB -> 117 us at 3 TB/s; FLOPs
  // 2 * 8 * 44.0 M = 0.70 GFLOP -> 0.5 us at 1400 TFLOP/s.
  const Fp8Floor f1 = moe_fp8_floor(one, {8, 8}, kCeil);
  EXPECT_FALSE(f1.compute_bound);
  EXPECT_NEAR(f1.memory_us, 8 * 3 * 2048.0 * 7168 * kFp8WeightBytes / 3e6, 1e-9);  // 3e6 B/us
  EXPECT_DOUBLE_EQ(f1.floor_us, f1.memory_us);
  EXPECT_NEAR(f1.compute_us, 6.0 * 8 * 7168 * 2048 / 1.4e9, 1e-12);
  // 4096 tokens, every choice local: 2.89 TFLOP -> 2.06 ms against 0.47 ms of weights.
  const Fp8Shape big = moe_fp8_shapes("seed003", {4096})[0];
  const Fp8Floor f2 = moe_fp8_floor(big, {4096 * 8, 32}, kCeil);
  EXPECT_TRUE(f2.compute_bound);
  EXPECT_NEAR(f2.floor_us / 1e3, 2.0616, 0.001);
  // Unknown ceilings: no floor rather than a wrong one.
  EXPECT_EQ(moe_fp8_floor(big, {4096 * 8, 32}, Ceilings{3000, 750, 0}).floor_us, 0.0);
  // seed001 at 32x2048: 35.5 TFLOP of experts.
  const Fp8Shape s1 = moe_fp8_shapes("seed001", {65536})[0];
  EXPECT_NEAR(moe_fp8_floor(s1, {131072, 32}, kCeil).flops / 1e12, 35.46, 0.01);
}

TEST(BenchMoeFp8, Seed001StepsReuseBenchMoeCostsForBf16Work) {
  const Fp8Shape s = moe_fp8_shapes("seed001", {2048})[0];
  const Fp8Routing r{4096, 32};
  const MoeShape bf16{seed001_model(), 2048, "4x512"};
  const MoeRouting br{4096, 32};
  EXPECT_DOUBLE_EQ(moe_fp8_step_cost(Fp8Step::router_gemm, s, r, 1).flops,
                   moe_step_cost(MoeStep::router_gemm, bf16, br).flops);
  EXPECT_DOUBLE_EQ(moe_fp8_step_cost(Fp8Step::bf16_layer_graph, s, r, 1).bytes,
                   moe_step_cost(MoeStep::layer_graph, bf16, br).bytes);
  const double P = 4096, H = 4096, I = 11008;
  const Fp8Cost gu = moe_fp8_step_cost(Fp8Step::gate_up, s, r, 1);
  EXPECT_DOUBLE_EQ(gu.flops, 2 * P * H * 2 * I);
  EXPECT_TRUE(gu.fp8);
  // The dense peer does the same FLOPs on one expert's weights.
  EXPECT_DOUBLE_EQ(moe_fp8_step_cost(Fp8Step::dense_gate_up, s, r, 1).flops, gu.flops);
  EXPECT_DOUBLE_EQ(moe_fp8_step_cost(Fp8Step::dense_down, s, r, 1).flops, 2 * P * I * H);
  // The FP8 layer reads half the bytes of weights the bf16 one does.
  const double fp8_layer = moe_fp8_step_cost(Fp8Step::layer_graph, s, r, 1).bytes;
  const double bf16_layer = moe_fp8_step_cost(Fp8Step::bf16_layer_graph, s, r, 1).bytes;
  EXPECT_NEAR(fp8_layer / bf16_layer, 0.5, 0.01);
}

TEST(BenchMoeFp8, BoundsUseTheFp8RidgeForFp8Work) {
  const Fp8Shape big = moe_fp8_shapes("seed003", {4096})[0];
  const Fp8Cost op = moe_fp8_step_cost(Fp8Step::ds_op, big, {4096 * 8, 32}, 1);
  EXPECT_EQ(fp8_step_bound(op, kCeil), Bound::compute_fp8);
  EXPECT_EQ(fp8_step_roofline(op, kCeil), Roofline::compute);
  const Fp8Shape one = moe_fp8_shapes("seed003", {1})[0];
  const Fp8Cost small = moe_fp8_step_cost(Fp8Step::ds_op, one, {8, 8}, 1);
  EXPECT_EQ(fp8_step_bound(small, kCeil), Bound::memory);
  EXPECT_EQ(fp8_step_roofline(small, kCeil), Roofline::memory);
  const Fp8Cost route = moe_fp8_step_cost(Fp8Step::ds_route, big, {4096 * 8, 32}, 1);
  EXPECT_EQ(fp8_step_bound(route, kCeil), Bound::memory);
  // Intensity between half and twice the ridge is balanced: the fp8 ridge is 1400e3/3000 = 467.
  Fp8Cost mid{467.0 * 1000, 467.0 * 1000, 1000, true};
  EXPECT_EQ(fp8_step_roofline(mid, kCeil), Roofline::balanced);
  mid.flops = 600.0 * 1000;  // 600 FLOP/B: still balanced against the fp8 ridge...
  EXPECT_EQ(fp8_step_roofline(mid, kCeil), Roofline::balanced);
  mid.fp8 = false;  // ...but above twice the bf16 ridge (2 x 250): compute
  EXPECT_EQ(fp8_step_roofline(mid, kCeil), Roofline::compute);
}

TEST(BenchMoeFp8, MatchRuleFailsOnlyWhenBothToleranceAreExceeded) {
  const MatchRule rule;  // atol 1e-2, rtol 1e-2, 95%
  EXPECT_TRUE(element_matches(1.005, 1.0, rule));     // |d| 5e-3 <= atol
  EXPECT_TRUE(element_matches(1000.5, 1000.0, rule));  // |d| 0.5 but 5e-4 relative
  EXPECT_FALSE(element_matches(1.05, 1.0, rule));     // 5e-2 both ways
  EXPECT_FALSE(element_matches(0.02, 0.0, rule));     // ref 0: relative error infinite
  EXPECT_TRUE(element_matches(0.005, 0.0, rule));
  EXPECT_FALSE(element_matches(std::nan(""), 1.0, rule));
  EXPECT_FALSE(element_matches(std::numeric_limits<double>::infinity(), 1.0, rule));
  EXPECT_FALSE(element_matches(1.0, std::nan(""), rule));

  MatchCounter counter(rule);
  std::vector<float> out(100, 1.0f);
  std::vector<double> ref(100, 1.0);
  for (int i = 0; i < 5; ++i) out[i] = 2.0f;  // 5 of 100 fail: 95% matched, passes
  counter.add(out.data(), ref.data(), 100);
  EXPECT_EQ(counter.count().elements, 100);
  EXPECT_EQ(counter.count().matched, 95);
  EXPECT_DOUBLE_EQ(counter.count().ratio(), 0.95);
  EXPECT_TRUE(counter.count().passes(rule));
  out[5] = 2.0f;
  MatchCounter worse(rule);
  worse.add(out.data(), ref.data(), 100);
  EXPECT_FALSE(worse.count().passes(rule));
  EXPECT_FALSE(MatchCount{}.passes(rule));  // nothing checked is not a pass
}

TEST(BenchMoeFp8, CheckVerdicts) {
  Fp8DsCheck k;
  k.terms = 3;
  k.tokens = 16;
  k.match_fp32 = {1000, 990};
  k.match_cpu_op = {1000, 985};
  k.pipeline_vs_op.rel_l2 = 1e-4;
  EXPECT_TRUE(k.ok());
  k.match_cpu_op = {1000, 900};  // 90% < 95%
  EXPECT_FALSE(k.ok());
  k.terms = 1;  // one term is expected to fail the rule: not judged on it
  EXPECT_TRUE(k.ok());
  k.pipeline_vs_op.rel_l2 = 2 * kFp8PipelineVsOpTolerance;
  EXPECT_FALSE(k.ok());
  k.pipeline_vs_op.rel_l2 = 0;
  k.nonfinite = 1;
  EXPECT_FALSE(k.ok());

  Fp8LayerCheck l;
  l.tokens = 64;
  l.vs_fp32.rel_l2 = 0.06;  // what fp8 costs is shown, not judged
  l.vs_fp8_fp32.rel_l2 = 0.023;
  EXPECT_TRUE(l.ok());
  l.vs_fp8_fp32.rel_l2 = 2 * kFp8LayerRelL2Tolerance;
  EXPECT_FALSE(l.ok());
  l.vs_fp8_fp32.rel_l2 = std::nan("");
  EXPECT_FALSE(l.ok());
}

// A case with every row measured at the given medians (microseconds).
MoeFp8Case make_case(Fp8Layer layer, int64_t tokens, Fp8Routing r, int terms,
                     const std::vector<std::pair<Fp8Step, double>>& times) {
  MoeFp8Case c;
  c.shape = moe_fp8_shapes(fp8_layer_name(layer), {tokens})[0];
  c.routing = r;
  c.terms = terms;
  for (const auto& [step, us] : times) {
    const Fp8Cost cost = moe_fp8_step_cost(step, c.shape, r, terms);
    ResultRow row;
    row.name = fp8_step_name(step);
    row.timing = "graph x5";
    row.stats = median_only(us);
    row.flops = cost.flops;
    row.bytes = cost.bytes;
    row.bound = fp8_step_bound(cost, kCeil);
    c.steps.push_back(step);
    c.rows.push_back(row);
  }
  return c;
}

TEST(BenchMoeFp8, Seed003SummaryReadsTheOpAgainstItsFloor) {
  const MoeFp8Case c = make_case(Fp8Layer::seed003, 4096, {4096 * 8, 32}, 3,
                                 {{Fp8Step::ds_route, 20},
                                  {Fp8Step::ds_gemm1, 2000},
                                  {Fp8Step::ds_pipeline, 4000},
                                  {Fp8Step::ds_op, 3000}});
  const MoeFp8Summary s = moe_fp8_summary(c, kCeil);
  EXPECT_DOUBLE_EQ(s.time_ms, 3.0);
  EXPECT_DOUBLE_EQ(s.pipeline_ms, 4.0);
  EXPECT_NEAR(s.percent_of_floor, 100 * s.floor.floor_us / 3000, 1e-9);
  const double P = 4096 * 8, H = 7168, I = 2048;
  EXPECT_NEAR(s.definition_tflops, 6 * P * H * I / 3000 / 1e6, 1e-9);
  EXPECT_NEAR(s.executed_tflops, 10 * P * H * I / 3000 / 1e6, 1e-9);  // 3 terms: 2 + 3 x 1
  EXPECT_EQ(s.roofline, Roofline::compute);

  const std::string table = moe_fp8_case_table(c, kCeil);
  for (const char* frag : {"seed003 T=4096 terms=3", "moe_route_grouped",
                           "moe_grouped_gemm_fp8_swiglu_gate_last", "moe_fp8_block_scale (graph)",
                           "pipeline_of_public_ops (graph)"})
    EXPECT_NE(table.find(frag), std::string::npos) << frag << " not in\n" << table;
  const std::string lines = moe_fp8_summary_lines(c, kCeil);
  EXPECT_NE(lines.find("of the floor"), std::string::npos) << lines;
  EXPECT_NE(lines.find("(1.33x the op)"), std::string::npos) << lines;
}

TEST(BenchMoeFp8, Seed001SummaryComparesWithBf16DenseAndTheTarget) {
  const MoeFp8Case c = make_case(Fp8Layer::seed001, 32768, {65536, 32}, 1,
                                 {{Fp8Step::router_gemm, 100},
                                  {Fp8Step::route, 10},
                                  {Fp8Step::gate_up, 12000},
                                  {Fp8Step::down, 6000},
                                  {Fp8Step::layer_graph, 20000},
                                  {Fp8Step::bf16_layer_graph, 31000},
                                  {Fp8Step::dense_gate_up, 10000},
                                  {Fp8Step::dense_down, 5000}});
  const MoeFp8Summary s = moe_fp8_summary(c, kCeil);
  const double flops = 6.0 * 65536 * 4096 * 11008;
  EXPECT_DOUBLE_EQ(s.time_ms, 20.0);
  EXPECT_NEAR(s.expert_tflops, flops / 18000 / 1e6, 1e-9);
  EXPECT_NEAR(s.dense_fp8_tflops, flops / 15000 / 1e6, 1e-9);
  EXPECT_NEAR(s.percent_of_dense_fp8, 100.0 * 15000 / 18000, 1e-9);
  EXPECT_NEAR(s.expert_percent_of_fp8, 100 * s.expert_tflops / 1400, 1e-9);
  EXPECT_DOUBLE_EQ(s.bf16_layer_ms, 31.0);
  EXPECT_DOUBLE_EQ(s.speedup_vs_bf16, 1.55);
  EXPECT_DOUBLE_EQ(s.router_share, 110.0 / 20000);
  EXPECT_EQ(s.seed_target_ms, 22.0);
  const std::string lines = moe_fp8_summary_lines(c, kCeil);
  EXPECT_NE(lines.find("seed 001 H100 target 22.0 ms: met"), std::string::npos) << lines;
  EXPECT_NE(lines.find("FP8 1.55x faster"), std::string::npos) << lines;

  MoeFp8Case no_dense = make_case(Fp8Layer::seed001, 2048, {4096, 32}, 1,
                                  {{Fp8Step::layer_graph, 5000}});
  no_dense.dense_error = "cuBLASLt has no fp8 e4m3 algorithm for m=1";
  EXPECT_NE(moe_fp8_summary_lines(no_dense, kCeil).find("cuBLASLt has no fp8"), std::string::npos);
  EXPECT_NE(moe_fp8_summary_lines(no_dense, kCeil).find("target 3.8 ms: not met"),
            std::string::npos);
}

TEST(BenchMoeFp8, ValidationTableAndJsonCarryEveryCase) {
  MoeFp8Case ds = make_case(Fp8Layer::seed003, 256, {2048, 32}, 1, {{Fp8Step::ds_op, 300}});
  Fp8DsCheck dk;
  dk.terms = 1;
  dk.tokens = 16;
  dk.match_cpu_op = {1000, 250};
  dk.match_fp32 = {1000, 251};
  ds.ds_check = dk;
  MoeFp8Case layer =
      make_case(Fp8Layer::seed001, 2048, {4096, 32}, 1, {{Fp8Step::layer_graph, 2500}});
  Fp8LayerCheck lk;
  lk.tokens = 16;
  lk.vs_fp8_fp32.rel_l2 = 0.02;
  layer.layer_check = lk;
  const std::vector<MoeFp8Case> cases = {ds, layer};

  const std::string v = moe_fp8_validation_table(cases);
  EXPECT_NE(v.find("seed003 T=256 terms=1"), std::string::npos) << v;
  EXPECT_NE(v.find("25.00%"), std::string::npos) << v;
  EXPECT_NE(v.find("ok*"), std::string::npos) << v;  // one term: shown, not judged
  EXPECT_NE(v.find("seed001 4x512"), std::string::npos) << v;

  const nlohmann::json j = moe_fp8_json(cases, kCeil);
  ASSERT_EQ(j["cases"].size(), 2u);
  const auto& j0 = j["cases"][0];
  EXPECT_EQ(j0["layer"], "seed003");
  EXPECT_EQ(j0["intermediate_terms"], 1);
  EXPECT_EQ(j0["routed_experts"], 256);
  EXPECT_EQ(j0["rows"][0]["step"], "moe_fp8_block_scale");
  EXPECT_TRUE(j0["rows"][0]["fp8"].get<bool>());
  EXPECT_GT(j0["rows"][0]["definition_flops"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j0["check"]["match_vs_cpu_op"]["ratio"].get<double>(), 0.25);
  EXPECT_FALSE(j0["check"]["judged_on_rule"].get<bool>());
  EXPECT_TRUE(j0["check"]["ok"].get<bool>());
  EXPECT_GT(j0["summary"]["floor_ms"].get<double>(), 0);
  EXPECT_EQ(j["cases"][1]["layer"], "seed001");
  EXPECT_DOUBLE_EQ(j["cases"][1]["check"]["vs_fp8_fp32"]["rel_l2_error"].get<double>(), 0.02);
  EXPECT_DOUBLE_EQ(j["cases"][1]["summary"]["seed001_target_ms"].get<double>(), 3.8);
  EXPECT_DOUBLE_EQ(j["ceilings"]["fp8_gemm_tflops"].get<double>(), 1400);
  EXPECT_DOUBLE_EQ(j["rule"]["required_ratio"].get<double>(), 0.95);
}

}  // namespace
}  // namespace braid::bench
