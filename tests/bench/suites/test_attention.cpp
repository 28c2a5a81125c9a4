// bench attention: the FLOP and byte counts behind its rows, the rows it validates, its fp64
// reference (against ops::attention_prefill's CPU reference) and its error summary. CPU only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "bench/suites/attention.h"
#include "braid/buffer.h"
#include "braid/ops.h"
#include "test_util.h"

namespace braid::bench {
namespace {

TEST(BenchAttention, VisiblePairsCountTheMaskExactly) {
  // Brute force over small shapes, including q_len < kv_len (the diagonal aligned to the end).
  for (int64_t q : {1, 3, 7, 16})
    for (int64_t kv : {16, 17, 40})
      for (bool causal : {false, true}) {
        double n = 0;
        for (int64_t i = 0; i < q; ++i)
          for (int64_t j = 0; j < kv; ++j) n += !causal || j <= kv - q + i;
        EXPECT_EQ(attention_visible_pairs(q, kv, causal), n) << q << " " << kv << " " << causal;
      }
  EXPECT_EQ(attention_visible_pairs(2048, 2048, true), 2048.0 * 2049 / 2);
  EXPECT_EQ(attention_visible_pairs(2048, 2048, false), 2048.0 * 2048);
}

TEST(BenchAttention, FlopsMatchAnchorsTable) {
  // ANCHORS.md: B=16 S=2048 H=16 D=64 full, cuDNN 0.587 ms at 468 TF/s: 4 * B * H * S^2 * D.
  const PrefillShape full{16, 2048, 16, 16, 64, false};
  EXPECT_EQ(attention_prefill_flops(full), 4.0 * 16 * 16 * 2048 * 2048 * 64);
  EXPECT_NEAR(attention_prefill_flops(full) / 0.587e-3 / 1e12, 468, 1);
  PrefillShape causal = full;
  causal.causal = true;
  EXPECT_EQ(attention_prefill_flops(causal), 4.0 * 64 * 16 * 16 * (2048.0 * 2049 / 2));
  // GQA changes the bytes, not the FLOPs.
  PrefillShape gqa = full;
  gqa.kv_heads = 4;
  EXPECT_EQ(attention_prefill_flops(gqa), attention_prefill_flops(full));
}

TEST(BenchAttention, BytesAreQKVReadAndOutWritten) {
  const PrefillShape s{32, 4096, 32, 32, 128, true};
  EXPECT_EQ(attention_prefill_bytes(s, 2), 4.0 * 32 * 4096 * 32 * 128 * 2);  // 4 GiB
  PrefillShape gqa = s;
  gqa.kv_heads = 8;
  EXPECT_EQ(attention_prefill_bytes(gqa, 2), (2.0 * 32 + 2.0 * 8) * 32 * 4096 * 128 * 2);
}

TEST(BenchAttention, NaiveScoreMatrixBytes) {
  const PrefillShape s{1, 2048, 32, 32, 128, false};
  EXPECT_EQ(naive_attention_extra_bytes(s), 32.0 * 2048 * 2048 * 6);  // 768 MiB
  EXPECT_EQ(naive_attention_extra_bytes(s, 4, 0), 32.0 * 2048 * 2048 * 4);
}

TEST(BenchAttention, ValidationRowsCoverEndsAndTileEdges) {
  const std::vector<int64_t> rows = validation_rows(4096, 64, 7);
  ASSERT_EQ(rows.size(), 64u);
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  EXPECT_EQ(std::adjacent_find(rows.begin(), rows.end()), rows.end());  // distinct
  EXPECT_GE(rows.front(), 0);
  EXPECT_LT(rows.back(), 4096);
  for (int64_t r : {0, 63, 64, 127, 128, 255, 256, 511, 512, 2047, 2048, 4095 - 63, 4095})
    EXPECT_TRUE(std::binary_search(rows.begin(), rows.end(), r)) << r;
  EXPECT_EQ(validation_rows(4096, 64, 7), rows);  // a function of the seed
  // Short sequences: every row; an awkward length keeps every row in range.
  EXPECT_EQ(validation_rows(5, 64, 1), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  for (int64_t r : validation_rows(100, 20, 3)) EXPECT_LT(r, 100);
  EXPECT_EQ(validation_rows(100, 20, 3).size(), 20u);
}

// The fp64 reference agrees with ops::attention_prefill's CPU reference (f32), with causal
// masking and GQA, on the bench's layout (B sequences of S tokens, the first and last checked).
TEST(BenchAttention, ReferenceMatchesTheOpOnTheCpu) {
  const int64_t B = 2, S = 37, H = 4, KV = 2, D = 16;
  const OwnedTensor q = test::random_host(DType::f32, {B * S, H, D}, 11);
  const OwnedTensor k = test::random_host(DType::f32, {B * S, KV, D}, 12);
  const OwnedTensor v = test::random_host(DType::f32, {B * S, KV, D}, 13);
  OwnedTensor cu(DType::i32, {B + 1}, Device::cpu());
  for (int64_t b = 0; b <= B; ++b) cu.view().ptr<int32_t>()[b] = static_cast<int32_t>(b * S);
  const float scale = 1.0f / std::sqrt(float(D));
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    OwnedTensor out(DType::f32, {B * S, H, D}, Device::cpu());
    OwnedTensor lse(DType::f32, {B * S, H}, Device::cpu());
    ops::attention_prefill(q, k, v, cu, cu, static_cast<int>(S), causal, scale, out, lse);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t t = b * S + i, kvh = h / (H / KV);
          std::vector<double> ref(D);
          const double ref_lse =
              reference_attention_row(q.view().ptr<float>() + (t * H + h) * D,
                                      k.view().ptr<float>() + (b * S * KV + kvh) * D,
                                      v.view().ptr<float>() + (b * S * KV + kvh) * D,
                                      causal ? i + 1 : S, D, KV * D, scale, ref.data());
          for (int64_t d = 0; d < D; ++d)
            ASSERT_NEAR(out.view().ptr<float>()[(t * H + h) * D + d], ref[d], 1e-5)
                << "b " << b << " i " << i << " h " << h << " d " << d;
          ASSERT_NEAR(lse.view().ptr<float>()[t * H + h], ref_lse, 1e-5);
        }
  }
}

TEST(BenchAttention, ReferenceOfOneKeyIsItsValue) {
  const float q[2] = {1, 2}, k[2] = {3, 4}, v[2] = {-0.5f, 0.25f};
  double out[2];
  const double lse = reference_attention_row(q, k, v, 1, 2, 2, 0.5, out);
  EXPECT_DOUBLE_EQ(out[0], -0.5);
  EXPECT_DOUBLE_EQ(out[1], 0.25);
  EXPECT_DOUBLE_EQ(lse, 0.5 * 11);  // log(exp(s)) = s
}

TEST(BenchAttention, ErrorSummary) {
  ErrorAccumulator acc;
  const double ref[4] = {1.0, -2.0, 0.0, 2.0};  // RMS 1.5, floor 0.15
  const float out[4] = {1.0f, -2.1f, 0.03f, 2.0f};
  acc.add(out, ref, 4);
  const ErrorSummary s = acc.summary();
  EXPECT_EQ(s.elements, 4);
  EXPECT_NEAR(s.max_abs, 0.1, 1e-6);
  EXPECT_NEAR(s.mean_abs, (0.1 + 0.03) / 4, 1e-6);
  EXPECT_NEAR(s.max_rel, 0.03 / 0.15,
              1e-6);  // the zero, measured against the floor (0.1 / 2 < 0.2)
  EXPECT_NEAR(s.rel_l2, std::sqrt((0.01 + 0.0009) / 9.0), 1e-6);
  EXPECT_EQ(s.rounding_max_abs, 0.0);  // every reference value is a bf16 already

  ErrorAccumulator nan;
  const float bad[4] = {1.0f, NAN, 0.0f, 2.0f};
  nan.add(bad, ref, 4);
  EXPECT_TRUE(std::isnan(nan.summary().max_abs));
  EXPECT_TRUE(std::isnan(nan.summary().rel_l2));
}

}  // namespace
}  // namespace braid::bench
