// bench throughput's step-time model and a whole run on the CPU (tiny random-weight model).
#include <gtest/gtest.h>

#include "bench/suites/decode.h"
#include "bench/suites/throughput.h"
#include "braid/error.h"
#include "engine/tiny_model.h"

namespace braid::bench {
namespace {

Ceilings ceilings(double copy_gbps, double gemm_tflops) {
  Ceilings c;
  c.copy_gbps = copy_gbps;
  c.gemm_tflops = gemm_tflops;
  return c;
}

TEST(BenchThroughput, StepWorkSplitsMatrixProductsFromAttention) {
  const model::ModelConfig c = decode_preset("llama-3.1-8b");
  engine::StepInfo s;
  s.tokens = 2048;
  s.seqs = 200;
  s.kv_tokens = 200 * 1000;
  s.attention_pairs = 1e6;
  const StepWork w = step_work(c, s, 2);
  EXPECT_DOUBLE_EQ(w.bytes, w.matmul_bytes + w.attention_bytes);
  EXPECT_DOUBLE_EQ(w.flops, w.matmul_flops + w.attention_flops);
  // Llama-3.1-8B: 6.98e9 weights outside the embeddings, 2 FLOPs each per token, plus the LM
  // head (4096 x 128256) on every sequence's sampled row.
  EXPECT_NEAR(w.matmul_flops, 2 * 6.98e9 * 2048 + 2.0 * 4096 * 128256 * 200, 0.01 * w.matmul_flops);
  // K and V: 32 layers x 8 heads x 128 x 2 bytes each, per key read.
  EXPECT_DOUBLE_EQ(w.attention_bytes, 2.0 * 32 * 8 * 128 * 2 * 200000);
  EXPECT_DOUBLE_EQ(w.attention_flops, 4.0 * 32 * 32 * 128 * 1e6);
}

TEST(BenchThroughput, TheSequentialFloorAddsWhatTheFloorOverlaps) {
  StepWork w;
  w.matmul_bytes = 16e9, w.matmul_flops = 30e12;    // compute bound: 40 ms at 750 TFLOP/s
  w.attention_bytes = 30e9, w.attention_flops = 0;  // memory bound: 10 ms at 3000 GB/s
  w.bytes = w.matmul_bytes + w.attention_bytes;
  w.flops = w.matmul_flops + w.attention_flops;
  const Ceilings c = ceilings(3000, 750);
  EXPECT_NEAR(step_floor_seconds(w, c), 0.040, 1e-9);        // max(46 GB / 3 TB/s, 40 ms)
  EXPECT_NEAR(sequential_floor_seconds(w, c), 0.050, 1e-9);  // 40 ms + 10 ms
  EXPECT_EQ(step_floor_seconds(w, ceilings(0, 750)), 0.0) << "an unknown ceiling gives no floor";
  EXPECT_EQ(sequential_floor_seconds(w, ceilings(3000, 0)), 0.0);
}

TEST(BenchThroughput, AnFp8CheckpointsMatrixProductsArePricedAtTheFp8Rate) {
  StepWork w;
  w.matmul_bytes = 8e9, w.matmul_flops = 30e12;     // 20 ms at 1500 TFLOP/s, 40 ms at 750
  w.attention_bytes = 0, w.attention_flops = 1.5e12;  // 2 ms at 750
  w.bytes = w.matmul_bytes + w.attention_bytes;
  w.flops = w.matmul_flops + w.attention_flops;
  Ceilings c = ceilings(3000, 750);
  c.fp8_gemm_tflops = 1500;
  EXPECT_NEAR(step_floor_seconds(w, c, true), 0.022, 1e-9);
  EXPECT_NEAR(step_floor_seconds(w, c, false), 0.042, 1e-9);
  EXPECT_NEAR(sequential_floor_seconds(w, c, true), 0.022, 1e-9);
  c.fp8_gemm_tflops = 0;
  EXPECT_EQ(step_floor_seconds(w, c, true), 0.0) << "no fp8 ceiling, no fp8 floor";
}

TEST(BenchThroughput, ARunOnTheCpuCountsEveryTokenAndSaysWhyItHasNoProfile) {
  test::TinyModelDir dir(test::TinyModelSpec{});
  ThroughputOptions o;
  o.model_dir = dir.path();
  o.input_len = 9;
  o.output_len = 4;
  o.num_prompts = 6;
  o.engine.device = Device::cpu();
  o.engine.max_model_len = 16;
  o.profile_steps = 2;
  const ThroughputRun run = run_throughput(o);
  EXPECT_NE(run.summary.find("6 prompts (54 prompt tokens, 24 generated)"), std::string::npos) << run.summary;
  EXPECT_NE(run.summary.find("no profile"), std::string::npos) << run.summary;
  ASSERT_FALSE(run.report.rows.empty());
  EXPECT_EQ(run.report.rows.back().name.rfind("throughput ", 0), 0u) << run.report.rows.back().name;
}

TEST(BenchThroughput, BadOptionsAreNamed) {
  ThroughputOptions o;
  o.shape = "llama-3.1-8b";
  o.profile_steps = -1;
  try {
    run_throughput(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--profile-steps"), std::string::npos) << e.what();
  }
  o.profile_steps = 0;
  o.output_len = 0;
  EXPECT_THROW(run_throughput(o), Error);
}

}  // namespace
}  // namespace braid::bench
