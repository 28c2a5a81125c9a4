// bench kernels: the case list, the FLOP and byte counts (against values worked out by hand), the
// balanced routing, tolerances, timing rule and failure count (CPU); and, on a GPU, the --quick
// suite with every row's check passing.
#include <CLI/CLI.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "bench/harness/cuda_only.h"
#include "bench/suites/kernels.h"
#include "braid/error.h"
#include "test_util.h"

namespace braid::bench {
namespace {

const KernelCase& find_case(const std::vector<KernelCase>& cases, KernelOp op,
                            const std::string& params) {
  for (const KernelCase& c : cases)
    if (c.op == op && kernel_case_params(c) == params) return c;
  ADD_FAILURE() << "no case " << kernel_op_name(op) << " " << params;
  static const KernelCase none;
  return none;
}

TEST(KernelSuite, EveryOpHasCasesAndRowsAreUnique) {
  for (bool quick : {false, true}) {
    SCOPED_TRACE(quick ? "quick" : "full");
    const std::vector<KernelCase> cases = kernel_cases(quick);
    std::set<std::string> rows;
    std::set<std::string> ops;
    for (const KernelCase& c : cases) {
      EXPECT_TRUE(rows.insert(std::string(kernel_op_name(c.op)) + " " + kernel_case_params(c)).second)
          << "duplicate row " << kernel_case_params(c);
      ops.insert(kernel_op_name(c.op));
      const KernelCost cost = kernel_case_cost(c);
      EXPECT_GT(cost.bytes, 0) << kernel_case_params(c);
      EXPECT_GE(cost.flops, 0) << kernel_case_params(c);
    }
    for (KernelOp op : all_kernel_ops()) EXPECT_TRUE(ops.count(kernel_op_name(op))) << kernel_op_name(op);
  }
  EXPECT_LT(kernel_cases(true).size(), kernel_cases(false).size() / 2);
  EXPECT_EQ(all_kernel_ops().size(), 30u);
  std::set<std::string> names;
  for (KernelOp op : all_kernel_ops()) names.insert(kernel_op_name(op));
  EXPECT_EQ(names.size(), 30u);
}

TEST(KernelSuite, SweepsCoverTheModelShapes) {
  const std::vector<KernelCase> cases = kernel_cases(false);
  int row_cases = 0, gemm_cases = 0, fp8_gemm_cases = 0;
  for (const KernelCase& c : cases) {
    if (c.op == KernelOp::rms_norm) ++row_cases;
    if (c.op == KernelOp::gemm) ++(c.fp8_scale_rows > 0 ? fp8_gemm_cases : gemm_cases);
  }
  EXPECT_EQ(row_cases, 8);       // tokens {1, 16, 512, 4096} x hidden {2048, 4096}
  EXPECT_EQ(gemm_cases, 12);     // m {1, 16, 128, 4096} x {o, gate, down}
  EXPECT_EQ(fp8_gemm_cases, 12); // m {128, 4096} x {o, gate, down} x {128 x 128, per-row scales}
  find_case(cases, KernelOp::gemm, "llama-3-8b down m=4096 n=4096 k=14336");
  find_case(cases, KernelOp::rms_norm_gemm_argmax, "llama-3-8b lm_head m=1 n=128256 k=4096");
  find_case(cases, KernelOp::attention_prefill, "mha b=1 s=4096 h=32 kv=32 d=128 causal");
  find_case(cases, KernelOp::attention_decode, "llama-3-8b b=16 ctx=8192 h=32 kv=8 d=128");
  find_case(cases, KernelOp::moe_grouped_gemm, "qwen3-30b-a3b gate_up T=4096 E=128 k=8 H=2048 I=768");
}

TEST(KernelSuite, RowOpBytesAreEachInputReadAndEachOutputWrittenOnce) {
  const std::vector<KernelCase> cases = kernel_cases(false);
  // x [512, 4096] bf16 read, weight [4096] read, out [512, 4096] written.
  const KernelCost norm = kernel_case_cost(find_case(cases, KernelOp::rms_norm, "llama-3-8b T=512 H=4096"));
  EXPECT_EQ(norm.bytes, 2.0 * (512 * 4096 + 4096 + 512 * 4096));
  EXPECT_EQ(norm.bytes, 8396800.0);
  EXPECT_EQ(norm.flops, 0.0);
  // 16 i32 ids, 16 table rows of 2048 bf16 read, 16 rows written.
  EXPECT_EQ(kernel_case_cost(find_case(cases, KernelOp::embedding, "llama-3.2-1b T=16 H=2048 V=128256")).bytes,
            131136.0);
  // k and v: 16 tokens x 8 heads x 64 read and written (bf16), 16 i32 slots.
  EXPECT_EQ(kernel_case_cost(find_case(cases, KernelOp::kv_append, "llama-3.2-1b T=16 h=32 kv=8 d=64")).bytes,
            65600.0);
  // x, residual read; residual, out written; 4096 weights: 4 x 2 x 4096 x 2048 + 2 x 2048.
  EXPECT_EQ(kernel_case_cost(find_case(cases, KernelOp::add_rms_norm, "llama-3.2-1b T=4096 H=2048")).bytes,
            67112960.0);
  // f32 logits [16, 32000] read, 16 i32 ids written.
  EXPECT_EQ(kernel_case_cost(find_case(cases, KernelOp::argmax, "llama-2 T=16 V=32000")).bytes,
            2048064.0);
}

TEST(KernelSuite, GemmFlopsAre2mnkAndBytesOperandsPlusOutput) {
  const std::vector<KernelCase> cases = kernel_cases(false);
  const KernelCost g = kernel_case_cost(find_case(cases, KernelOp::gemm, "llama-3-8b gate m=128 n=14336 k=4096"));
  EXPECT_EQ(g.flops, 15032385536.0);
  EXPECT_EQ(g.bytes, 122159104.0);  // 2 (128 x 4096 + 14336 x 4096 + 128 x 14336)
  EXPECT_FALSE(g.fp8);
  // fp8 weights: one byte per weight, plus 112 x 32 block scales or 14336 row scales (f32).
  const KernelCase& blocks = find_case(cases, KernelOp::gemm, "llama-3-8b gate fp8 128x128 m=4096 n=14336 k=4096");
  EXPECT_EQ(blocks.fp8_scale_rows, 128);
  const KernelCost b = kernel_case_cost(blocks);
  EXPECT_EQ(b.flops, 2.0 * 4096 * 14336 * 4096);
  EXPECT_EQ(b.bytes, 2.0 * (4096 * 4096 + 4096 * 14336) + 14336.0 * 4096 + 4.0 * 112 * 32);
  EXPECT_TRUE(b.fp8);
  const KernelCase& rows = find_case(cases, KernelOp::gemm, "llama-3-8b down fp8 per-row m=128 n=4096 k=14336");
  EXPECT_EQ(rows.fp8_scale_rows, 1);
  EXPECT_EQ(kernel_case_cost(rows).bytes, 2.0 * (128 * 14336 + 128 * 4096) + 4096.0 * 14336 + 4.0 * 4096);
  EXPECT_EQ(kernel_case_tolerance(rows), 0.05);
  EXPECT_EQ(kernel_case_tolerance(find_case(cases, KernelOp::gemm, "llama-3-8b gate m=128 n=14336 k=4096")),
            1e-2);
  // The LM head: x and the norm weight [4096], w [32000, 4096] read, one i32 id written.
  const KernelCost head = kernel_case_cost(
      find_case(cases, KernelOp::rms_norm_gemm_argmax, "llama-2-7b lm_head m=1 n=32000 k=4096"));
  EXPECT_EQ(head.flops, 262144000.0);
  EXPECT_EQ(head.bytes, 262160388.0);
  // gemm_add: a, w read; the residual [4, 4096] read and written.
  const KernelCost add = kernel_case_cost(
      find_case(cases, KernelOp::gemm_add, "llama-3-8b o+residual m=4 n=4096 k=4096"));
  EXPECT_EQ(add.flops, 134217728.0);
  EXPECT_EQ(add.bytes, 2.0 * (4 * 4096 + 4096.0 * 4096 + 2 * 4 * 4096));
  // swiglu_gemm_add: [gate | up] [1, 2 x 14336], w [4096, 14336], residual [1, 4096] twice.
  const KernelCost swiglu = kernel_case_cost(
      find_case(cases, KernelOp::swiglu_gemm_add, "llama-3-8b down+residual m=1 n=4096 k=14336"));
  EXPECT_EQ(swiglu.flops, 2.0 * 4096 * 14336);
  EXPECT_EQ(swiglu.bytes, 117514240.0);
}

TEST(KernelSuite, AttentionCounts) {
  const std::vector<KernelCase> cases = kernel_cases(false);
  // Decode: 4 d q_heads ctx per sequence; K and V of 8192 tokens x 8 heads x 128 per sequence.
  const KernelCost d = kernel_case_cost(
      find_case(cases, KernelOp::attention_decode, "llama-3-8b b=16 ctx=8192 h=32 kv=8 d=128"));
  EXPECT_EQ(d.flops, 2147483648.0);
  EXPECT_EQ(d.bytes, 537133056.0);
  // Causal prefill of one 4096-token sequence, 32 heads of 128: 4 x 128 x 32 x 4096 x 4097 / 2.
  const KernelCost p = kernel_case_cost(
      find_case(cases, KernelOp::attention_prefill, "mha b=1 s=4096 h=32 kv=32 d=128 causal"));
  EXPECT_EQ(p.flops, 4.0 * 128 * 32 * (4096.0 * 4097 / 2));
  EXPECT_EQ(p.bytes, 4.0 * 2 * 4096 * 32 * 128);  // q, k, v, out
  // Gather: K and V of 512 tokens x 8 heads x 128 read and written (bf16); 32 page-table
  // entries (pages of 16), one kv_len and two offsets (i32).
  const KernelCost g = kernel_case_cost(
      find_case(cases, KernelOp::paged_kv_gather, "llama-3-8b b=1 s=512 kv=8 d=128"));
  EXPECT_EQ(g.flops, 0.0);
  EXPECT_EQ(g.bytes, 2.0 * 4 * 512 * 8 * 128 + 4 * (32 + 1 + 2));
  EXPECT_EQ(kernel_case_tolerance(find_case(cases, KernelOp::paged_kv_gather,
                                            "llama-3-8b b=1 s=512 kv=8 d=128")),
            0.0);
}

TEST(KernelSuite, MoeCountsUseTheBalancedRouting) {
  const std::vector<KernelCase> cases = kernel_cases(false);
  // 4096 pairs over all 128 experts: gate_up [128, 1536, 2048] read once, xs [4096, 2048] in,
  // h [4096, 768] out, 129 i32 offsets.
  const KernelCost gu = kernel_case_cost(
      find_case(cases, KernelOp::moe_grouped_gemm, "qwen3-30b-a3b gate_up T=512 E=128 k=8 H=2048 I=768"));
  EXPECT_EQ(gu.flops, 25769803776.0);
  EXPECT_EQ(gu.bytes, 828375556.0);
  // One token, 8 experts: gate_up and down of 8 experts, x and out, 8 weights and ids.
  const KernelCost ex = kernel_case_cost(
      find_case(cases, KernelOp::moe_experts, "qwen3-30b-a3b T=1 E=128 k=8 H=2048 I=768"));
  EXPECT_EQ(ex.flops, 75497472.0);
  EXPECT_EQ(ex.bytes, 75505728.0);
  EXPECT_EQ(kernel_case_cost(find_case(cases, KernelOp::moe_route_topk_softmax, "qwen3-30b-a3b T=256 E=128 k=8")).bytes,
            81920.0);
  // FP8 gemm2 of one token: 8 experts' w2 [7168, 2048] fp8 (+ a 4-byte scale per 128 x 128),
  // x [8, 2048] fp8 (+ a scale per 128), bf16 y [8, 7168], 33 offsets.
  const KernelCost g2 = kernel_case_cost(
      find_case(cases, KernelOp::moe_grouped_gemm_fp8, "deepseek-v3 gemm2 T=1 E=32 k=8 H=7168 I=2048"));
  EXPECT_EQ(g2.flops, 234881024.0);
  EXPECT_DOUBLE_EQ(g2.bytes, 8 * 7168 * 2048 * (1 + 4.0 / 16384) + 8 * 2048 * (1 + 4.0 / 128) +
                                 2.0 * 8 * 7168 + 4 * 33);
  EXPECT_TRUE(g2.fp8);
  // The whole FP8 layer for one token, 3 intermediate terms: gemm1 once, gemm2 three times.
  const KernelCost bs = kernel_case_cost(find_case(
      cases, KernelOp::moe_fp8_block_scale, "deepseek-v3 T=1 E=32/256 k=8 H=7168 I=2048 terms=3"));
  EXPECT_EQ(bs.flops, 1174405120.0);
  EXPECT_TRUE(bs.fp8);
}

TEST(KernelSuite, BalancedRoutingSpreadsPairsEvenly) {
  // 4 tokens x top 8 over 128 experts: 32 distinct experts, 8 distinct per token.
  std::set<int32_t> all;
  for (int64_t t = 0; t < 4; ++t) {
    std::set<int32_t> mine;
    for (int64_t j = 0; j < 8; ++j) {
      const int32_t e = balanced_expert(t * 8 + j, 0, 32, 128);
      EXPECT_GE(e, 0);
      EXPECT_LT(e, 128);
      mine.insert(e);
      all.insert(e);
    }
    EXPECT_EQ(mine.size(), 8u);
  }
  EXPECT_EQ(all.size(), 32u);
  EXPECT_EQ(balanced_active_experts(32, 128), 32);
  // 4096 pairs: every expert exactly 32 times.
  std::vector<int> count(128, 0);
  for (int64_t p = 0; p < 4096; ++p) ++count[balanced_expert(p, 0, 4096, 128)];
  EXPECT_TRUE(std::all_of(count.begin(), count.end(), [](int n) { return n == 32; }));
  // Another input set sends the same token elsewhere.
  EXPECT_NE(balanced_expert(0, 1, 8, 128), balanced_expert(0, 0, 8, 128));
  const std::vector<int32_t> off = balanced_expert_offsets(130, 128);
  ASSERT_EQ(off.size(), 129u);
  EXPECT_EQ(off[0], 0);
  EXPECT_EQ(off[1], 2);
  EXPECT_EQ(off[2], 4);
  EXPECT_EQ(off[3], 5);
  EXPECT_EQ(off[128], 130);
}

TEST(KernelSuite, TolerancesAndBounds) {
  const std::vector<KernelCase> cases = kernel_cases(false);
  EXPECT_EQ(kernel_case_tolerance(find_case(cases, KernelOp::argmax, "llama-2 T=16 V=32000")), 0.0);
  EXPECT_EQ(kernel_case_tolerance(find_case(cases, KernelOp::embedding, "llama-3.2-1b T=16 H=2048 V=128256")), 0.0);
  EXPECT_EQ(kernel_case_tolerance(find_case(cases, KernelOp::moe_route_topk_softmax, "qwen3-30b-a3b T=256 E=128 k=8")),
            1e-5);
  const KernelCase& big = find_case(cases, KernelOp::gemm, "llama-3-8b gate m=4096 n=14336 k=4096");
  const KernelCase& gemv = find_case(cases, KernelOp::gemm, "llama-3-8b gate m=1 n=14336 k=4096");
  EXPECT_EQ(kernel_case_tolerance(big), 1e-2);
  const Ceilings ceil{3000, 700, 1400};  // GB/s, TFLOP/s, fp8 TFLOP/s
  EXPECT_EQ(kernel_case_bound(big, ceil), Bound::compute);
  EXPECT_EQ(kernel_case_bound(gemv, ceil), Bound::memory);
  EXPECT_EQ(kernel_case_bound(find_case(cases, KernelOp::rms_norm, "llama-3-8b T=512 H=4096"), ceil),
            Bound::memory);
  const KernelCase& fp8 =
      find_case(cases, KernelOp::moe_grouped_gemm_fp8, "deepseek-v3 gemm1 T=256 E=32 k=8 H=7168 I=2048");
  EXPECT_EQ(kernel_case_tolerance(fp8), 1e-2);  // f32 out of fp8 tensor-core sums
  // 64 rows per expert: about 124 FLOP/B, under the fp8 ridge of 1400 TFLOP/s over 3 TB/s, above
  // that of a card with a tenth of the fp8 rate.
  EXPECT_EQ(kernel_case_bound(fp8, ceil), Bound::memory);
  EXPECT_EQ(kernel_case_bound(fp8, Ceilings{3000, 700, 140}), Bound::compute_fp8);
  // An exact check passes only with no difference at all.
  Accuracy a;
  a.rel_l2_tolerance = 0;
  EXPECT_TRUE(a.passed());
  a.error.rel_l2 = 1e-9;
  EXPECT_FALSE(a.passed());
}

TEST(KernelSuite, OnlySelectsOpsAndNamesUnknownOnes) {
  const std::vector<KernelCase> all = kernel_cases(true);
  EXPECT_EQ(select_kernel_cases(all, "").size(), all.size());
  const std::vector<KernelCase> some = select_kernel_cases(all, "gemm, rms_norm");
  ASSERT_FALSE(some.empty());
  for (const KernelCase& c : some) EXPECT_TRUE(c.op == KernelOp::gemm || c.op == KernelOp::rms_norm);
  EXPECT_EQ(some.size(), static_cast<size_t>(std::count_if(all.begin(), all.end(), [](const KernelCase& c) {
              return c.op == KernelOp::gemm || c.op == KernelOp::rms_norm;
            })));
  test::expect_error([&] { select_kernel_cases(all, "gemm,gemv"); }, ErrorKind::invalid_argument,
                     {"--only", "'gemv'", "rms_norm_gemm_argmax"});
  test::expect_error([&] { select_kernel_cases(all, " , "); }, ErrorKind::invalid_argument,
                     {"--only", "at least one op name"});
}

TEST(KernelSuite, TimingSizesTheBatchFromTheCalibration) {
  TimingConfig t = kernel_timing(10, false, 3);
  EXPECT_EQ(t.mode, TimingMode::graph);
  EXPECT_EQ(t.batch, 200);
  EXPECT_EQ(t.sets, 3);
  EXPECT_EQ(t.reps, 15);
  EXPECT_EQ(t.warmup, 20);
  t = kernel_timing(1000, false, 1);
  EXPECT_EQ(t.batch, 2);
  EXPECT_EQ(t.warmup, 2);
  EXPECT_EQ(kernel_timing(50000, false, 1).batch, 1);
  t = kernel_timing(10, true, 1);
  EXPECT_EQ(t.batch, 50);
  EXPECT_EQ(t.reps, 5);
  EXPECT_NO_THROW(validate(kernel_timing(0, true, 0)));
}

TEST(KernelSuite, FailuresCountCaseRowsNotMeasuredOrWrong) {
  Report run;
  ResultRow ceiling;
  ceiling.name = "copy_kernel";
  run.rows.push_back(ceiling);  // no accuracy: not a case
  ResultRow fp8_ceiling;
  fp8_ceiling.name = "gemm_fp8_e4m3";
  fp8_ceiling.note = "FAILED: no algorithm";
  run.rows.push_back(fp8_ceiling);  // a ceiling, not a case
  ResultRow ok;
  ok.name = "rms_norm";
  ok.accuracy = Accuracy{};
  run.rows.push_back(ok);
  EXPECT_EQ(kernel_suite_failures(run), 0);
  ResultRow wrong = ok;
  wrong.accuracy->error.rel_l2 = 0.5;
  run.rows.push_back(wrong);
  ResultRow thrown;
  thrown.name = "gemm";
  thrown.note = std::string(kKernelCaseFailed) + "cuBLASLt: no algorithm";
  run.rows.push_back(thrown);
  EXPECT_EQ(kernel_suite_failures(run), 2);
}

TEST(KernelSuite, ListShowsEveryCase) {
  const std::vector<KernelCase> cases = kernel_cases(true);
  const std::string list = kernel_case_list(cases);
  for (const KernelCase& c : cases) EXPECT_NE(list.find(kernel_case_params(c)), std::string::npos);
  EXPECT_NE(list.find(std::to_string(cases.size()) + " cases"), std::string::npos);
  EXPECT_NE(list.find("exact"), std::string::npos);
}

TEST(KernelSuite, WithoutADeviceTheRunSaysWhy) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is visible";
  // The runner where this build has one (a build without CUDA has none, and says so).
  const auto run_suite = [](const KernelSuiteOptions& o) {
    return cuda_only(BRAID_CUDA_ONLY(run_kernel_suite), "bench kernels")(o);
  };
  test::expect_error([&] { run_suite({true, 0, ""}); }, ErrorKind::unsupported, {"bench kernels"});
  // `bench kernels --only nope` names the unknown op before it looks for a GPU.
  CLI::App cmd;
  const SuiteRun run = kernels_command(cmd);
  cmd.parse("--quick --only nope", false);
  test::expect_error([&] { run(); }, ErrorKind::invalid_argument, {"'nope'"});
}

// ---- GPU ----------------------------------------------------------------------------------------

#if BRAID_WITH_CUDA

TEST(KernelSuiteGpu, QuickSuitePassesEveryCheck) {
  BRAID_REQUIRE_CUDA();
  const Report run = run_kernel_suite({true, 0, ""});
  EXPECT_GT(run.ceilings.copy_gbps, 0);
  EXPECT_GT(run.ceilings.gemm_tflops, 0);
  std::set<std::string> ops;
  for (const ResultRow& r : run.rows) {
    bool is_case = false;
    for (KernelOp op : all_kernel_ops()) is_case = is_case || r.name == kernel_op_name(op);
    if (!is_case) continue;
    ops.insert(r.name);
    SCOPED_TRACE(r.name + " " + r.params + ": " + r.note);
    EXPECT_EQ(r.note.rfind(kKernelCaseFailed, 0), std::string::npos);
    ASSERT_TRUE(r.accuracy.has_value());
    EXPECT_TRUE(r.accuracy->passed()) << "rel L2 " << r.accuracy->error.rel_l2 << " > "
                                      << r.accuracy->rel_l2_tolerance << " ("
                                      << r.accuracy->reference << ")";
    EXPECT_GT(r.stats.median_us, 0);
    EXPECT_GT(r.accuracy->error.elements, 0);
  }
  EXPECT_EQ(ops.size(), all_kernel_ops().size());
  EXPECT_EQ(kernel_suite_failures(run), 0);
}

#endif  // BRAID_WITH_CUDA

}  // namespace
}  // namespace braid::bench
