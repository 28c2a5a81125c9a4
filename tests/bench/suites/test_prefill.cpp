// bench prefill's models and arithmetic (CPU only, runs in CI).
#include <gtest/gtest.h>

#include "bench/harness/report.h"
#include "bench/suites/prefill.h"
#include "braid/error.h"

namespace braid::bench {
namespace {

TEST(BenchPrefill, TheSeedsThreeModelsAtItsPairs) {
  const auto models = prefill_models();
  ASSERT_EQ(models.size(), 3u);
  const auto& small = models[0].config;
  EXPECT_EQ(models[0].name, "small");
  EXPECT_EQ(small.num_layers, 12);
  EXPECT_EQ(small.hidden_size, 768);
  EXPECT_EQ(small.num_heads, 12);
  EXPECT_EQ(small.num_kv_heads, 12);
  EXPECT_EQ(small.head_dim, 64);
  EXPECT_EQ(small.intermediate_size, 2048);
  EXPECT_EQ(models[1].config.intermediate_size, 5632);
  EXPECT_EQ(models[1].config.head_dim, 128);
  EXPECT_EQ(models[2].config.intermediate_size, 11008);  // Llama-2-7B's
  EXPECT_EQ(models[2].config.num_layers, 32);
  ASSERT_EQ(models[2].cases.size(), 3u);
  EXPECT_EQ(models[2].cases[2].batch, 8);
  EXPECT_EQ(models[2].cases[2].seq_len, 2048);
  EXPECT_DOUBLE_EQ(models[2].cases[2].seed_h100_ms, 185.0);
  for (const auto& m : models)
    for (const auto& c : m.cases) EXPECT_LE(c.seq_len, m.config.max_position_embeddings);
}

TEST(BenchPrefill, UnknownModelIsNamed) {
  try {
    prefill_model("huge");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'huge'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("small, medium, large"), std::string::npos) << e.what();
  }
}

TEST(BenchPrefill, FlopsByHand) {
  // small, 1 x 128: per token and layer 2*768*2304 + 2*768*768 + 2*768*4096 + 2*2048*768
  // = 14,155,776; causal attention 4*64*12*(128*129/2) = 25,362,432 per layer; LM head for one
  // token 2*768*32000.
  const auto small = prefill_model("small").config;
  const double layer = 128.0 * 14'155'776 + 25'362'432;
  EXPECT_DOUBLE_EQ(prefill_flops(small, 1, 128), 12 * layer + 2.0 * 768 * 32000);
  // Twice the batch: twice the projections and attention, the same LM head.
  EXPECT_DOUBLE_EQ(prefill_flops(small, 2, 128) - 2.0 * 768 * 32000, 2 * 12 * layer);
}

TEST(BenchPrefill, BytesByHand) {
  // small, 1 x 128, bf16: per layer weights 768*2304 + 768*768 + 3*768*2048 + 2*768 elements,
  // K and V written and read (2 * 2 * 128 * 768 elements); embedding rows 128*768; LM head
  // 768*32000 + final norm 768, logits 32000 fp32.
  const auto small = prefill_model("small").config;
  const double layer = (768.0 * 2304 + 768.0 * 768 + 3.0 * 768 * 2048 + 2 * 768) * 2 +
                       4.0 * 128 * 768 * 2;
  const double expected = 12 * layer + 128.0 * 768 * 2 + (768.0 * 32000 + 768) * 2 + 32000 * 4.0;
  EXPECT_DOUBLE_EQ(prefill_bytes(small, 1, 128, 2), expected);
}

TEST(BenchPrefill, SummaryReadsTheRowsInTheSeedsLayout) {
  Report run;
  ResultRow r;
  r.name = "prefill_forward";
  r.params = "large batch 8 seq 2048";
  r.stats.median_us = 200'000;  // 200 ms
  run.rows.push_back(r);
  r.name = "copy_kernel";  // other rows are left out
  run.rows.push_back(r);
  const std::string s = prefill_summary(run);
  EXPECT_NE(s.find("large"), std::string::npos) << s;
  EXPECT_NE(s.find("200.00"), std::string::npos) << s;
  EXPECT_NE(s.find("81920"), std::string::npos) << s;  // 16384 tokens / 0.2 s
  EXPECT_NE(s.find("185.0"), std::string::npos) << s;
  EXPECT_NE(s.find("0.93x"), std::string::npos) << s;
  EXPECT_EQ(s.find("copy_kernel"), std::string::npos) << s;
}

}  // namespace
}  // namespace braid::bench
