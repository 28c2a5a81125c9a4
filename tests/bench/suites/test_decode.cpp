// bench decode: the presets parse, the bytes a decode step must read match the published bf16
// weight sizes (ANCHORS.md: 0.99, 2.47 and 13.5 GB), and bad options are refused before the GPU.
#include <CLI/CLI.hpp>

#include <gtest/gtest.h>

#include "bench/suites/decode.h"
#include "braid/error.h"
#include "test_util.h"

namespace braid::bench {
namespace {

TEST(BenchDecode, PresetsParseAndWeightBytesMatchTheCheckpoints) {
  for (const auto& name : decode_preset_names()) EXPECT_NO_THROW(decode_preset(name)) << name;
  // One token at context 1: essentially the weights (the embedding read once as the LM head when
  // tied; an untied embedding table is not read in full).
  const double qwen = decode_step_bytes(decode_preset("qwen2.5-0.5b"), 1, 1, 2);
  const double llama1b = decode_step_bytes(decode_preset("llama-3.2-1b"), 1, 1, 2);
  const double llama7b = decode_step_bytes(decode_preset("llama-2-7b"), 1, 1, 2);
  EXPECT_NEAR(qwen / 1e9, 0.99, 0.01);
  EXPECT_NEAR(llama1b / 1e9, 2.47, 0.01);
  // Llama-2-7B has 6,738,415,616 parameters; untied, so of its embedding table only one row is
  // read. Plus the KV cache of one token (K and V, 32 layers x 4096); greedy writes no logits.
  EXPECT_DOUBLE_EQ(llama7b, (6738415616.0 - 32000 * 4096 + 4096) * 2 + 2 * 32 * 4096 * 2);
}

TEST(BenchDecode, KvCacheAndExpertsScaleWithBatchAndContext) {
  const auto c = decode_preset("llama-3.1-8b");
  const double kv_per_token = 2.0 * 32 * 8 * 128 * 2;  // K and V, 32 layers, 8 kv heads x 128, bf16
  EXPECT_NEAR(decode_step_bytes(c, 1, 4097, 2) - decode_step_bytes(c, 1, 1, 2), 4096 * kv_per_token, 1);
  const auto moe = decode_preset("qwen3-30b-a3b");
  const double expert = 3.0 * 2048 * 768 * 2 * 48;  // one expert in every layer, bf16
  // Each more sequence adds an embedding row and one token of KV cache
  // (K and V, 48 layers x 4 x 128, bf16) ...
  const double per_seq = 2048 * 2 + 2.0 * 48 * 512 * 2;
  // ... and the experts it can reach: one token reaches 8, two 16, 64 all 128.
  EXPECT_NEAR(decode_step_bytes(moe, 2, 1, 2) - decode_step_bytes(moe, 1, 1, 2),
              8 * expert + per_seq, 1);
  EXPECT_NEAR(decode_step_bytes(moe, 64, 1, 2) - decode_step_bytes(moe, 32, 1, 2), 32 * per_seq, 1);
}

// The two fp8 formats of Llama-3.1-8B read the same fp8 weights; their scales differ: one f32 per
// 128 x 128 block against one per row (qkv 6144 + o 4096 + gate|up 28672 + down 4096 rows a layer).
TEST(BenchDecode, Fp8DynamicPresetReadsOneScalePerRow) {
  const auto blocks = decode_preset("llama-3.1-8b-fp8");
  const auto rows = decode_preset("llama-3.1-8b-fp8-dynamic");
  EXPECT_EQ(rows.weights, model::WeightFormat::fp8_per_channel);
  const double block_scales = 32.0 * (48 * 32 + 32 * 32 + 224 * 32 + 32 * 112) * 4;
  const double row_scales = 32.0 * (6144 + 4096 + 28672 + 4096) * 4;
  EXPECT_NEAR(decode_step_bytes(rows, 1, 1, 2) - decode_step_bytes(blocks, 1, 1, 2),
              row_scales - block_scales, 1);
}

// Qwen3-30B-A3B-FP8: every expert a step reaches is read as fp8 values plus one f32 scale per
// 128 x 128 block (gate|up: 12 x 16 blocks, down: 16 x 6), half the bf16 preset's bytes.
TEST(BenchDecode, Fp8ExpertsAreReadAtOneBytePerWeight) {
  const auto fp8 = decode_preset("qwen3-30b-a3b-fp8");
  EXPECT_TRUE(fp8.fp8_experts());
  const double expert = (3.0 * 2048 * 768 + (12 * 16 + 16 * 6) * 4.0) * 48;
  const double per_seq = 2048 * 2 + 2.0 * 48 * 512 * 2;
  EXPECT_NEAR(decode_step_bytes(fp8, 2, 1, 2) - decode_step_bytes(fp8, 1, 1, 2),
              8 * expert + per_seq, 1);
  // The breakdown puts the experts' bytes under moe_experts, which decode steps run on fp8 too.
  const auto parts = decode_component_bytes(fp8, 1, 1, 2);
  EXPECT_EQ(parts.count("moe_gate_up"), 0u);
  EXPECT_NEAR(parts.at("moe_experts"), 8 * expert, 1);
  double sum = 0;
  for (const auto& [component, bytes] : decode_component_bytes(fp8, 4, 2048, 2)) sum += bytes;
  const double kv_written = 2.0 * fp8.num_layers * 4 * fp8.kv_dim() * 2;
  EXPECT_NEAR(sum, decode_step_bytes(fp8, 4, 2048, 2) + kv_written, 1.0);
}

#if BRAID_WITH_CUDA  // the decode suite is built with CUDA (suites/cuda/decode.cpp)
TEST(BenchDecode, CapacityBelowTheContextIsRefusedBeforeTheGpu) {
  CLI::App app;
  const SuiteRun run = decode_command(app);
  app.parse("--shape llama-3.2-1b --context 300 --capacity 100", false);
  test::expect_error([&] { run(); }, ErrorKind::invalid_argument,
                     {"bench decode", "--capacity (100)", "--context (300)"});
}
#endif

TEST(BenchDecode, UnknownShapeListsTheKnownOnes) {
  try {
    decode_preset("gpt-5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama-2-7b"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::bench

namespace braid::bench {
namespace {

TEST(BenchDecode, ComponentBytesAddUpToTheStep) {
  for (const auto& name : {"qwen2.5-0.5b", "qwen3-30b-a3b", "llama-2-7b"}) {
    const auto c = decode_preset(name);
    double sum = 0;
    for (const auto& [component, bytes] : decode_component_bytes(c, 4, 2048, 2)) sum += bytes;
    // The components also count the new tokens' K/V written into the cache (attention), which
    // the step's floor leaves out; everything else is the same bytes split up.
    const double kv_written = 2.0 * c.num_layers * 4 * c.kv_dim() * 2;
    EXPECT_NEAR(sum, decode_step_bytes(c, 4, 2048, 2) + kv_written, 1.0) << name;
  }
}

}  // namespace
}  // namespace braid::bench
