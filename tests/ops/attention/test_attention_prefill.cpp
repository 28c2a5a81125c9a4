// attention_prefill (K/V in contiguous tensors): CUDA against the CPU reference on ragged batches
// of awkward lengths (1, 17, 1000, 4097 and lengths around the 64-row tiles), whole prompts and
// chunks whose queries are the last of a longer sequence, GQA/MQA/MHA, head_dim 64 and 128,
// f16/bf16, causal and full, q/k/v as views into one packed QKV buffer; outputs poisoned with
// NaN. The CPU reference (attention()'s, over one-token pages) is checked against the formula on
// a tiny case. Plus the argument checks.
#include <cmath>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct Seq {
  int32_t q_len, kv_len;
};

// A batch whose k and v are views into one packed [total_kv, (q_heads + 2 kv_heads) * d] buffer
// (as a QKV projection writes them) and whose queries are the first q_heads heads of rows that
// hold 8 heads more: every operand has a row stride wider than its heads.
struct PackedBatch {
  OwnedTensor qkv, q_wide, cu_q, cu_kv;
  int64_t total_q = 0, total_kv = 0, q_heads, kv_heads, d;
  int max_q = 0;
  Tensor q(const OwnedTensor& wide) const {
    Tensor t = wide.view();
    t.shape[1] = q_heads;
    return t;
  }
  Tensor k(const OwnedTensor& packed) const { return view(packed, q_heads, kv_heads); }
  Tensor v(const OwnedTensor& packed) const { return view(packed, q_heads + kv_heads, kv_heads); }
  Tensor view(const OwnedTensor& packed, int64_t head0, int64_t heads) const {
    Tensor t = packed.view();
    t.data = static_cast<char*>(t.data) + head0 * d * static_cast<int64_t>(dtype_size(t.dtype));
    t.ndim = 3;
    t.shape[0] = total_kv;
    t.shape[1] = heads;
    t.shape[2] = d;
    t.strides[0] = (q_heads + 2 * kv_heads) * d;
    t.strides[1] = d;
    t.strides[2] = 1;
    return t;
  }
};

PackedBatch make_batch(DType dtype, int64_t q_heads, int64_t kv_heads, int64_t d,
                       const std::vector<Seq>& seqs, uint64_t seed) {
  PackedBatch b;
  b.q_heads = q_heads;
  b.kv_heads = kv_heads;
  b.d = d;
  const int64_t batch = static_cast<int64_t>(seqs.size());
  b.cu_q = OwnedTensor(DType::i32, {batch + 1}, Device::cpu());
  b.cu_kv = OwnedTensor(DType::i32, {batch + 1}, Device::cpu());
  int32_t* cq = b.cu_q.view().ptr<int32_t>();
  int32_t* ck = b.cu_kv.view().ptr<int32_t>();
  cq[0] = ck[0] = 0;
  for (int64_t s = 0; s < batch; ++s) {
    cq[s + 1] = cq[s] + seqs[s].q_len;
    ck[s + 1] = ck[s] + seqs[s].kv_len;
    b.max_q = std::max(b.max_q, seqs[s].q_len);
  }
  b.total_q = cq[batch];
  b.total_kv = ck[batch];
  b.qkv = random_host(dtype, {b.total_kv, (q_heads + 2 * kv_heads) * d}, seed, -2.0f, 2.0f);
  b.q_wide = random_host(dtype, {b.total_q, q_heads + 8, d}, seed + 1, -2.0f, 2.0f);
  return b;
}

struct PrefillCase {
  std::string label;
  DType dtype;
  int64_t q_heads, kv_heads, d;
  bool causal;
  std::vector<Seq> seqs;
};

std::string case_name(const PrefillCase& c) {
  return c.label + "_" + std::string(dtype_name(c.dtype)) + "_q" + std::to_string(c.q_heads) + "k" +
         std::to_string(c.kv_heads) + "_d" + std::to_string(c.d) + (c.causal ? "_causal" : "_full");
}
void PrintTo(const PrefillCase& c, std::ostream* os) { *os << case_name(c); }

// Lengths of the issue (1, 17, 1000, 4097) and around the 64-row tiles (63, 64, 65, 128, 129);
// chunks: q_len < kv_len with the diagonal aligned to the end.
const std::vector<Seq> kAwkward = {{1, 1}, {17, 17}, {63, 63}, {64, 64}, {65, 65}, {129, 129}, {1000, 1000}};
const std::vector<Seq> kChunks = {{5, 105}, {64, 67}, {70, 260}, {1, 300}, {0, 12}};
const std::vector<Seq> kLong = {{4097, 4097}};

std::vector<PrefillCase> cases() {
  std::vector<PrefillCase> out;
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128})
      for (bool causal : {true, false}) {
        out.push_back({"awkward", t, 8, 2, d, causal, kAwkward});
        out.push_back({"chunks", t, 4, 4, d, causal, kChunks});
      }
  out.push_back({"mqa", DType::bf16, 6, 1, 128, true, {{200, 200}, {33, 90}}});
  out.push_back({"long", DType::bf16, 2, 1, 128, true, kLong});
  out.push_back({"long", DType::f16, 2, 2, 64, false, kLong});
  return out;
}

class AttentionPrefillDiff : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(AttentionPrefillDiff, MatchesReference) {
  BRAID_REQUIRE_CUDA();
  const PrefillCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  PackedBatch b = make_batch(c.dtype, c.q_heads, c.kv_heads, c.d, c.seqs, seed);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  const Device cpu = Device::cpu(), gpu = Device::cuda(0);

  auto ref = poisoned(c.dtype, {b.total_q, c.q_heads, c.d}, cpu);
  auto ref_lse = poisoned(DType::f32, {b.total_q, c.q_heads}, cpu);
  ops::attention_prefill(b.q(b.q_wide), b.k(b.qkv), b.v(b.qkv), b.cu_q, b.cu_kv, b.max_q, c.causal,
                         scale, ref, ref_lse);

  OwnedTensor qkv = to_device(b.qkv, gpu), q_wide = to_device(b.q_wide, gpu);
  OwnedTensor cu_q = to_device(b.cu_q, gpu), cu_kv = to_device(b.cu_kv, gpu);
  auto out = poisoned(c.dtype, {b.total_q, c.q_heads, c.d}, gpu);
  auto lse = poisoned(DType::f32, {b.total_q, c.q_heads}, gpu);
  ops::attention_prefill(b.q(q_wide), b.k(qkv), b.v(qkv), cu_q, cu_kv, b.max_q, c.causal, scale,
                         out, lse);

  const std::vector<float> got = to_floats(out);
  for (float x : got) ASSERT_FALSE(std::isnan(x)) << "NaN in the output";
  EXPECT_LE(rel_error(got, to_floats(ref)), tolerance(c.dtype));
  EXPECT_LE(rel_error(to_floats(lse), to_floats(ref_lse)), tolerance(DType::f32));
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionPrefillDiff, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return case_name(info.param); });

// A sequence's last key tile overlaps the next sequence's rows, which the TMA kernel loads whole:
// a NaN in the next sequence's first value row must not reach this sequence's output (p = 0 for
// keys past kv_len, but 0 * NaN is NaN unless those rows are dropped).
TEST(AttentionPrefillIsolation, NextSequenceNaNDoesNotLeak) {
  BRAID_REQUIRE_CUDA();
  for (int64_t d : {64, 128})
    for (bool causal : {false, true}) {
      SCOPED_TRACE("d " + std::to_string(d) + (causal ? " causal" : " full"));
      const std::vector<Seq> seqs = {{70, 70}, {30, 30}};
      PackedBatch b = make_batch(DType::bf16, 2, 1, d, seqs, fresh_seed());
      const int64_t row_elems = (b.q_heads + 2 * b.kv_heads) * d;
      auto* qkv = static_cast<uint16_t*>(b.qkv.view().data);
      for (int64_t e = (b.q_heads + b.kv_heads) * d; e < row_elems; ++e)
        qkv[70 * row_elems + e] = 0x7fc0;  // bf16 NaN in v's row 70 (sequence 1, key 0)
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));
      const Device cpu = Device::cpu(), gpu = Device::cuda(0);
      auto ref = poisoned(DType::bf16, {b.total_q, b.q_heads, d}, cpu);
      auto ref_lse = poisoned(DType::f32, {b.total_q, b.q_heads}, cpu);
      ops::attention_prefill(b.q(b.q_wide), b.k(b.qkv), b.v(b.qkv), b.cu_q, b.cu_kv, b.max_q,
                             causal, scale, ref, ref_lse);
      OwnedTensor qkv_gpu = to_device(b.qkv, gpu), q_wide = to_device(b.q_wide, gpu);
      OwnedTensor cu_q = to_device(b.cu_q, gpu), cu_kv = to_device(b.cu_kv, gpu);
      auto out = poisoned(DType::bf16, {b.total_q, b.q_heads, d}, gpu);
      auto lse = poisoned(DType::f32, {b.total_q, b.q_heads}, gpu);
      ops::attention_prefill(b.q(q_wide), b.k(qkv_gpu), b.v(qkv_gpu), cu_q, cu_kv, b.max_q, causal,
                             scale, out, lse);
      const int64_t seq0 = 70 * b.q_heads * d;  // sequence 0's output elements
      std::vector<float> got = to_floats(out), want = to_floats(ref);
      got.resize(seq0);
      want.resize(seq0);
      for (float x : got) ASSERT_FALSE(std::isnan(x)) << "NaN leaked into sequence 0";
      EXPECT_LE(rel_error(got, want), tolerance(DType::bf16));
    }
}

// The reference against a direct formula on a tiny case: one sequence, 2 queries (the last two of
// 3 tokens), one head of width 1, scale 1: query 0 sees keys 0..1, query 1 sees all three.
TEST(AttentionPrefillReference, DirectFormula) {
  const Device cpu = Device::cpu();
  OwnedTensor q(DType::f32, {2, 1, 1}, cpu), k(DType::f32, {3, 1, 1}, cpu), v(DType::f32, {3, 1, 1}, cpu);
  const float qs[] = {1.0f, -0.5f}, ks[] = {0.2f, 1.0f, -1.0f}, vs[] = {3.0f, -2.0f, 7.0f};
  std::copy(qs, qs + 2, q.view().ptr<float>());
  std::copy(ks, ks + 3, k.view().ptr<float>());
  std::copy(vs, vs + 3, v.view().ptr<float>());
  OwnedTensor cu_q(DType::i32, {2}, cpu), cu_kv(DType::i32, {2}, cpu);
  cu_q.view().ptr<int32_t>()[0] = 0;
  cu_q.view().ptr<int32_t>()[1] = 2;
  cu_kv.view().ptr<int32_t>()[0] = 0;
  cu_kv.view().ptr<int32_t>()[1] = 3;
  OwnedTensor out(DType::f32, {2, 1, 1}, cpu), lse(DType::f32, {2, 1}, cpu);
  ops::attention_prefill(q, k, v, cu_q, cu_kv, 2, /*causal=*/true, 1.0f, out, lse);
  for (int i = 0; i < 2; ++i) {
    const int visible = i == 0 ? 2 : 3;
    double z = 0, acc = 0;
    for (int j = 0; j < visible; ++j) {
      const double w = std::exp(double(qs[i]) * ks[j]);
      z += w;
      acc += w * vs[j];
    }
    EXPECT_NEAR(out.view().ptr<float>()[i], acc / z, 1e-6) << "query " << i;
    EXPECT_NEAR(lse.view().ptr<float>()[i], std::log(z), 1e-6) << "query " << i;
  }
}

TEST(AttentionPrefillErrors, BadArguments) {
  const Device cpu = Device::cpu();
  OwnedTensor q(DType::bf16, {4, 8, 64}, cpu), k(DType::bf16, {6, 2, 64}, cpu), v(DType::bf16, {6, 2, 64}, cpu);
  OwnedTensor out(DType::bf16, {4, 8, 64}, cpu), lse(DType::f32, {4, 8}, cpu);
  OwnedTensor cu_q(DType::i32, {2}, cpu), cu_kv(DType::i32, {2}, cpu);
  cu_q.view().ptr<int32_t>()[0] = 0;
  cu_q.view().ptr<int32_t>()[1] = 4;
  cu_kv.view().ptr<int32_t>()[0] = 0;
  cu_kv.view().ptr<int32_t>()[1] = 6;
  const char* op = "attention_prefill";
  OwnedTensor k3(DType::bf16, {6, 3, 64}, cpu), k_f16(DType::f16, {6, 2, 64}, cpu);
  OwnedTensor k_d32(DType::bf16, {6, 2, 32}, cpu), cu_bad(DType::i32, {3}, cpu), cu_i64(DType::i64, {2}, cpu);
  expect_error([&] { ops::attention_prefill(q, k3, k3, cu_q, cu_kv, 4, true, 0.1f, out, lse); },
               ErrorKind::shape, {op, "'k'", "divides"});
  expect_error([&] { ops::attention_prefill(q, k_f16, v, cu_q, cu_kv, 4, true, 0.1f, out, lse); },
               ErrorKind::dtype, {op, "'k'", "bf16", "f16"});
  expect_error([&] { ops::attention_prefill(q, k_d32, k_d32, cu_q, cu_kv, 4, true, 0.1f, out, lse); },
               ErrorKind::shape, {op, "'k'", "head_dim"});
  expect_error([&] { ops::attention_prefill(q, k, v, cu_q, cu_bad, 4, true, 0.1f, out, lse); },
               ErrorKind::shape, {op, "'cu_seqlens_kv'"});
  expect_error([&] { ops::attention_prefill(q, k, v, cu_i64, cu_kv, 4, true, 0.1f, out, lse); },
               ErrorKind::dtype, {op, "'cu_seqlens_q'", "i32"});
  // Index values, on the CPU: max_seqlen_q below a q_len, and a causal chunk with more queries
  // than keys.
  expect_error([&] { ops::attention_prefill(q, k, v, cu_q, cu_kv, 3, true, 0.1f, out, lse); },
               ErrorKind::invalid_argument, {op, "'max_seqlen_q'", "3"});
  cu_kv.view().ptr<int32_t>()[1] = 3;
  OwnedTensor k_short(DType::bf16, {3, 2, 64}, cpu);
  expect_error([&] { ops::attention_prefill(q, k_short, k_short, cu_q, cu_kv, 4, true, 0.1f, out, lse); },
               ErrorKind::invalid_argument, {op, "'cu_seqlens_kv'", "kv_len >= q_len"});
  // CUDA-only limits, named before any launch.
  expect_error([&] {
    ops::attention_prefill(fake_cuda(DType::bf16, {4, 8, 64}), k, v, cu_q, cu_kv, 4, true, 0.1f, out, lse);
  }, ErrorKind::device, {op});
}

}  // namespace
}  // namespace braid::test
