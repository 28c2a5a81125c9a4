// attention (CPU reference) against a naive attention over contiguous K/V written here, decode
// against prefill, lse against its definition, and argument errors.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct Seq {
  int64_t q_len, kv_len;
};

// A batch laid out as the op wants it, plus the same K/V kept contiguous per sequence.
struct Batch {
  DType dtype;
  int64_t q_heads, kv_heads, head_dim, page_size;
  std::vector<Seq> seqs;
  OwnedTensor q, k_pages, v_pages, page_table, kv_lens, cu_seqlens_q;
  std::vector<OwnedTensor> k, v;  // per sequence: [kv_len, kv_heads, head_dim]

  ops::PagedKV paged() const { return {k_pages, v_pages, page_table, kv_lens}; }
  int64_t total_q() const { return q.view().shape[0]; }
};

// Random q and per-sequence K/V, scattered into pages in shuffled order. Spare pages, the tail of
// each sequence's last page and unused page-table entries hold garbage (NaN, -1), so reading
// anything outside the sequence shows up.
Batch make_batch(DType dtype, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                 int64_t page_size, std::vector<Seq> seqs, uint64_t seed) {
  Batch b{dtype, q_heads, kv_heads, head_dim, page_size, seqs, {}, {}, {}, {}, {}, {}, {}, {}};
  const int64_t batch = static_cast<int64_t>(seqs.size());
  int64_t total_q = 0, pages_needed = 0, max_pages = 1;
  for (const Seq& s : seqs) {
    total_q += s.q_len;
    const int64_t p = (s.kv_len + page_size - 1) / page_size;
    pages_needed += p;
    max_pages = std::max(max_pages, p + 1);  // one spare column of padding
  }
  const int64_t num_pages = pages_needed + 3;
  b.q = random_host(dtype, {total_q, q_heads, head_dim}, seed);
  b.k_pages = poisoned(dtype, {num_pages, page_size, kv_heads, head_dim}, Device::cpu());
  b.v_pages = poisoned(dtype, {num_pages, page_size, kv_heads, head_dim}, Device::cpu());
  b.page_table = OwnedTensor(DType::i32, {batch, max_pages}, Device::cpu());
  b.kv_lens = OwnedTensor(DType::i32, {batch}, Device::cpu());
  b.cu_seqlens_q = OwnedTensor(DType::i32, {batch + 1}, Device::cpu());

  std::vector<int32_t> free_pages(static_cast<size_t>(num_pages));
  std::iota(free_pages.begin(), free_pages.end(), 0);
  std::shuffle(free_pages.begin(), free_pages.end(), std::mt19937_64(seed + 1));
  int32_t* table = b.page_table.view().ptr<int32_t>();
  std::fill_n(table, batch * max_pages, -1);
  const int64_t token_elems = kv_heads * head_dim;
  b.cu_seqlens_q.view().ptr<int32_t>()[0] = 0;
  for (int64_t s = 0; s < batch; ++s) {
    const Seq& seq = seqs[static_cast<size_t>(s)];
    b.kv_lens.view().ptr<int32_t>()[s] = static_cast<int32_t>(seq.kv_len);
    b.cu_seqlens_q.view().ptr<int32_t>()[s + 1] =
        b.cu_seqlens_q.view().ptr<int32_t>()[s] + static_cast<int32_t>(seq.q_len);
    b.k.push_back(random_host(dtype, {seq.kv_len, kv_heads, head_dim}, seed + 10 + 2 * s));
    b.v.push_back(random_host(dtype, {seq.kv_len, kv_heads, head_dim}, seed + 11 + 2 * s));
    for (int64_t j = 0; j < seq.kv_len; ++j) {
      if (j % page_size == 0) {
        table[s * max_pages + j / page_size] = free_pages.back();
        free_pages.pop_back();
      }
      const int64_t slot = table[s * max_pages + j / page_size] * page_size + j % page_size;
      for (int64_t e = 0; e < token_elems; ++e) {
        const int64_t src = j * token_elems + e, dst = slot * token_elems + e;
        store_from_float(b.k_pages.data(), dtype, dst, load_as_float(b.k.back().data(), dtype, src));
        store_from_float(b.v_pages.data(), dtype, dst, load_as_float(b.v.back().data(), dtype, src));
      }
    }
  }
  return b;
}

// Naive attention over the contiguous K/V, in double: for each query token and head, the
// softmax-weighted values and the log-sum-exp. Masking is written as "key position <= query
// position", with positions counted from the start of the sequence.
struct Naive {
  std::vector<float> out;  // [total_q, q_heads, head_dim]
  std::vector<float> lse;  // [total_q, q_heads]
};

Naive naive_attention(const Batch& b, bool causal, double scale) {
  const auto q = to_floats(b.q);
  const int64_t hd = b.head_dim, group = b.q_heads / b.kv_heads;
  Naive r{std::vector<float>(q.size()),
          std::vector<float>(static_cast<size_t>(b.total_q() * b.q_heads))};
  int64_t t = 0;
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    const auto k = to_floats(b.k[s]), v = to_floats(b.v[s]);
    const Seq seq = b.seqs[s];
    for (int64_t i = 0; i < seq.q_len; ++i, ++t) {
      const int64_t q_pos = seq.kv_len - seq.q_len + i;
      for (int64_t h = 0; h < b.q_heads; ++h) {
        const int64_t kh = h / group;
        std::vector<double> w;  // exp(score) of each visible key, unnormalised
        for (int64_t j = 0; j < seq.kv_len; ++j) {
          if (causal && j > q_pos) break;
          double score = 0;
          for (int64_t d = 0; d < hd; ++d)
            score += static_cast<double>(q[(t * b.q_heads + h) * hd + d]) * k[(j * b.kv_heads + kh) * hd + d];
          w.push_back(std::exp(score * scale));  // inputs in [-1, 1): no overflow
        }
        const double total = std::accumulate(w.begin(), w.end(), 0.0);
        for (int64_t d = 0; d < hd; ++d) {
          double o = 0;
          for (size_t j = 0; j < w.size(); ++j) o += w[j] / total * v[(j * b.kv_heads + kh) * hd + d];
          r.out[(t * b.q_heads + h) * hd + d] = static_cast<float>(o);
        }
        r.lse[t * b.q_heads + h] = static_cast<float>(std::log(total));
      }
    }
  }
  return r;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// (a) The reference against the naive attention.

struct AttnCase {
  DType dtype;
  int64_t page_size, q_heads, kv_heads, head_dim;
  bool causal;
};

std::string case_name(const AttnCase& p) {
  return std::string(dtype_name(p.dtype)) + "_page" + std::to_string(p.page_size) + "_q" +
         std::to_string(p.q_heads) + "k" + std::to_string(p.kv_heads) + "_d" +
         std::to_string(p.head_dim) + (p.causal ? "_causal" : "_full");
}
void PrintTo(const AttnCase& p, std::ostream* os) { *os << case_name(p); }

class AttentionReference : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionReference, MatchesNaiveContiguousAttention) {
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Chunked prefill (q_len < kv_len), a whole prompt (q_len == kv_len), and a decode step.
  auto b = make_batch(c.dtype, c.q_heads, c.kv_heads, c.head_dim, c.page_size,
                      {{6, 37}, {13, 13}, {1, 20}}, seed);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  auto out = poisoned(c.dtype, {b.total_q(), c.q_heads, c.head_dim}, Device::cpu());
  auto lse = poisoned(DType::f32, {b.total_q(), c.q_heads}, Device::cpu());
  ops::attention(b.q, b.cu_seqlens_q, b.paged(), c.causal, static_cast<float>(scale), out, lse);

  const Naive ref = naive_attention(b, c.causal, scale);
  EXPECT_LE(rel_error(to_floats(out), ref.out), tolerance(c.dtype));
  EXPECT_LE(max_abs_diff(to_floats(lse), ref.lse), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionReference,
    ::testing::Values(AttnCase{DType::f32, 16, 8, 2, 64, true},     // GQA 4:1
                      AttnCase{DType::bf16, 16, 28, 4, 128, true},  // GQA 7:1
                      AttnCase{DType::bf16, 1, 4, 1, 64, false},    // MQA, one token per page
                      AttnCase{DType::f32, 7, 7, 1, 128, false},    // 7:1, pages of 7
                      AttnCase{DType::f16, 7, 16, 4, 64, true},
                      AttnCase{DType::bf16, 16, 8, 8, 64, true},    // MHA
                      AttnCase{DType::f32, 1, 8, 1, 128, true},     // MQA
                      AttnCase{DType::bf16, 7, 14, 2, 64, false},
                      AttnCase{DType::f32, 16, 12, 3, 128, false}),
    [](const auto& info) { return case_name(info.param); });

TEST(AttentionReference, LseIsOptionalAndStridedQueriesWork) {
  // q and out as head views of wider packed buffers (q inside a QKV projection output).
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto b = make_batch(DType::bf16, 4, 2, 64, 16, {{3, 9}, {5, 5}}, seed);
  auto packed = random_host(DType::bf16, {8, 8, 64}, seed + 5);  // [tokens, q + k + v heads, d]
  Tensor q_view = packed.view().slice(1, 0, 4);
  for (int64_t t = 0; t < 8; ++t)
    for (int64_t e = 0; e < 4 * 64; ++e)
      store_from_float(q_view.data, DType::bf16, t * q_view.strides[0] + e,
                       load_as_float(b.q.data(), DType::bf16, t * 4 * 64 + e));
  auto wide_out = poisoned(DType::bf16, {8, 6, 64}, Device::cpu());
  Tensor out_view = wide_out.view().slice(1, 1, 5);
  ops::attention(q_view, b.cu_seqlens_q, b.paged(), true, 0.125f, out_view, Tensor{});
  auto ref = poisoned(DType::bf16, {8, 4, 64}, Device::cpu());
  ops::attention(b.q, b.cu_seqlens_q, b.paged(), true, 0.125f, ref, Tensor{});
  EXPECT_EQ(to_floats(out_view), to_floats(ref));
  // The heads around the out view stay untouched (still NaN).
  for (int64_t t = 0; t < 8; ++t)
    for (int64_t h : {0, 5})
      for (int64_t d = 0; d < 64; ++d)
        ASSERT_TRUE(std::isnan(load_as_float(wide_out.data(), DType::bf16, (t * 6 + h) * 64 + d)));
  EXPECT_LE(rel_error(to_floats(ref), naive_attention(b, true, 0.125).out), tolerance(DType::bf16));
}

// ---------------------------------------------------------------------------------------------
// (b) A decode step equals the last row of the causal prefill of the same sequence.

TEST(AttentionReference, DecodeEqualsLastRowOfCausalPrefill) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t qh = 14, kvh = 2, hd = 64;
  const std::vector<int64_t> lens = {1, 19, 40};
  auto prefill = make_batch(DType::f32, qh, kvh, hd, 16, {{1, 1}, {19, 19}, {40, 40}}, seed);
  auto pre_out = poisoned(DType::f32, {60, qh, hd}, Device::cpu());
  auto pre_lse = poisoned(DType::f32, {60, qh}, Device::cpu());
  ops::attention(prefill.q, prefill.cu_seqlens_q, prefill.paged(), true, 0.125f, pre_out, pre_lse);

  // The same caches, with only each sequence's last query.
  const int64_t row = qh * hd;
  OwnedTensor q_last(DType::f32, {3, qh, hd}, Device::cpu());
  OwnedTensor cu(DType::i32, {4}, Device::cpu());
  std::vector<float> want_out, want_lse;
  const auto all_out = to_floats(pre_out), all_lse = to_floats(pre_lse);
  int64_t end = 0;
  for (int64_t s = 0; s < 3; ++s) {
    end += lens[static_cast<size_t>(s)];
    std::copy_n(prefill.q.view().ptr<float>() + (end - 1) * row, row,
                q_last.view().ptr<float>() + s * row);
    want_out.insert(want_out.end(), all_out.begin() + (end - 1) * row, all_out.begin() + end * row);
    want_lse.insert(want_lse.end(), all_lse.begin() + (end - 1) * qh, all_lse.begin() + end * qh);
    cu.view().ptr<int32_t>()[s + 1] = static_cast<int32_t>(s + 1);
  }
  cu.view().ptr<int32_t>()[0] = 0;
  auto dec_out = poisoned(DType::f32, {3, qh, hd}, Device::cpu());
  auto dec_lse = poisoned(DType::f32, {3, qh}, Device::cpu());
  ops::attention(q_last, cu, prefill.paged(), true, 0.125f, dec_out, dec_lse);
  EXPECT_LE(rel_error(to_floats(dec_out), want_out), 1e-6);
  EXPECT_LE(max_abs_diff(to_floats(dec_lse), want_lse), 1e-6);
  // Causal masking mattered: the full (non-causal) prefill's last row is the same, but not the
  // earlier rows.
  auto full_out = poisoned(DType::f32, {60, qh, hd}, Device::cpu());
  ops::attention(prefill.q, prefill.cu_seqlens_q, prefill.paged(), false, 0.125f, full_out, Tensor{});
  EXPECT_GT(rel_error(to_floats(full_out), all_out), 1e-3);
}

// ---------------------------------------------------------------------------------------------
// (c) lse is log(sum(exp(scaled scores))), and exp(score - lse) sums to 1.

TEST(AttentionReference, LseIsLogSumExpOfScaledScores) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t hd = 32;
  // One head, one sequence with 3 queries over 5 keys; scale 0.7 and inputs up to 3 make the
  // scores large enough that a missing scale or a missing log would show.
  auto b = make_batch(DType::f32, 1, 1, hd, 2, {{3, 5}}, seed);
  for (float& x : std::span(b.q.view().ptr<float>(), 3 * hd)) x *= 3;
  auto lse = poisoned(DType::f32, {3, 1}, Device::cpu());
  auto out = poisoned(DType::f32, {3, 1, hd}, Device::cpu());
  ops::attention(b.q, b.cu_seqlens_q, b.paged(), true, 0.7f, out, lse);
  const auto q = to_floats(b.q), k = to_floats(b.k[0]);
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<double> s;
    for (int64_t j = 0; j <= 2 + i; ++j)  // query i sits at position 5 - 3 + i
      s.push_back(0.7 * std::inner_product(q.begin() + i * hd, q.begin() + (i + 1) * hd,
                                           k.begin() + j * hd, 0.0));
    double sum_exp = 0, probs = 0;
    for (double x : s) sum_exp += std::exp(x);
    const double got = lse.view().ptr<float>()[i];
    EXPECT_NEAR(got, std::log(sum_exp), 1e-5) << "query " << i;
    for (double x : s) probs += std::exp(x - got);
    EXPECT_NEAR(probs, 1.0, 1e-5) << "query " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// (d) Argument errors.

class AttentionErrors : public ::testing::Test {
 protected:
  void SetUp() override { reset(); }
  // A fresh valid batch (the index tests below corrupt its values in place).
  void reset() { b = make_batch(DType::bf16, 8, 2, 64, 4, {{2, 5}, {3, 3}}, 1); }

  void run(const Tensor& q, const Tensor& cu, const ops::PagedKV& kv, const Tensor& out,
           const Tensor& lse, float scale = 0.125f) {
    ops::attention(q, cu, kv, true, scale, out, lse);
  }
  // Expects the call with one tensor replaced to fail with `kind` and message fragments.
  template <typename F>
  void expect(F&& mutate, ErrorKind kind, const std::vector<std::string>& fragments) {
    Tensor q = b.q, cu = b.cu_seqlens_q, out = out_.view(), lse = lse_.view();
    ops::PagedKV kv = b.paged();
    float scale = 0.125f;
    mutate(q, cu, kv, out, lse, scale);
    std::vector<std::string> all = {"attention"};
    all.insert(all.end(), fragments.begin(), fragments.end());
    expect_error([&] { run(q, cu, kv, out, lse, scale); }, kind, all);
  }

  Batch b;
  OwnedTensor out_{DType::bf16, {5, 8, 64}, Device::cpu()};
  OwnedTensor lse_{DType::f32, {5, 8}, Device::cpu()};
};

using T = Tensor;
using KV = ops::PagedKV;

TEST_F(AttentionErrors, ValidBatchRuns) {
  EXPECT_NO_THROW(run(b.q, b.cu_seqlens_q, b.paged(), out_, lse_));
}

TEST_F(AttentionErrors, Shapes) {
  OwnedTensor q_i32(DType::i32, {5, 8, 64}, Device::cpu()), q_2d(DType::bf16, {5, 512}, Device::cpu());
  OwnedTensor q_hd(DType::bf16, {5, 8, 32}, Device::cpu()), q_heads(DType::bf16, {5, 5, 64}, Device::cpu());
  OwnedTensor pages_f32(DType::f32, {6, 4, 2, 64}, Device::cpu());
  OwnedTensor pages_3d(DType::bf16, {6, 4, 128}, Device::cpu());
  OwnedTensor pages_other(DType::bf16, {6, 4, 1, 64}, Device::cpu());
  OwnedTensor table_i64(DType::i64, {2, 3}, Device::cpu()), table_1d(DType::i32, {6}, Device::cpu());
  OwnedTensor table_b3(DType::i32, {3, 3}, Device::cpu());
  OwnedTensor lens_3(DType::i32, {3}, Device::cpu()), lens_i64(DType::i64, {2}, Device::cpu());
  OwnedTensor cu_2(DType::i32, {2}, Device::cpu()), cu_f32(DType::f32, {3}, Device::cpu());
  OwnedTensor out_f32(DType::f32, {5, 8, 64}, Device::cpu()), out_4(DType::bf16, {4, 8, 64}, Device::cpu());
  OwnedTensor lse_f16(DType::f16, {5, 8}, Device::cpu()), lse_bad(DType::f32, {5, 4}, Device::cpu());

  expect([&](T& q, T&, KV&, T&, T&, float&) { q = q_i32; }, ErrorKind::dtype, {"'q'", "i32"});
  expect([&](T& q, T&, KV&, T&, T&, float&) { q = q_2d; }, ErrorKind::shape, {"'q'", "3 dimensions"});
  expect([&](T& q, T&, KV&, T& out, T&, float&) { q = q_hd; out = q_hd; }, ErrorKind::shape,
         {"'kv.k_pages'", "size 32 in dimension 3", "[6, 4, 2, 64]"});
  expect([&](T& q, T&, KV&, T& out, T& lse, float&) { q = out = q_heads; lse = Tensor{}; },
         ErrorKind::shape, {"'kv.k_pages'", "divides q's 5 heads"});
  expect([&](T& q, T&, KV&, T&, T&, float&) { q.strides[2] = 2; q.shape[2] = 32; },
         ErrorKind::shape, {"'q'", "stride"});
  expect([&](T&, T&, KV& kv, T&, T&, float&) { kv.k_pages = pages_f32; }, ErrorKind::dtype,
         {"'kv.k_pages'", "bf16", "f32"});
  expect([&](T&, T&, KV& kv, T&, T&, float&) { kv.k_pages = pages_3d; }, ErrorKind::shape,
         {"'kv.k_pages'", "4 dimensions"});
  expect([&](T&, T&, KV& kv, T&, T&, float&) { kv.v_pages = pages_other; }, ErrorKind::shape,
         {"'kv.v_pages'", "[6, 4, 1, 64]"});
  expect([&](T&, T&, KV& kv, T&, T&, float&) { kv.v_pages = pages_f32; }, ErrorKind::dtype,
         {"'kv.v_pages'", "f32"});
  expect([&](T&, T&, KV& kv, T&, T&, float&) { kv.k_pages.strides[0] *= 2; }, ErrorKind::shape,
         {"'kv.k_pages'", "contiguous"});
  expect([&](T&, T&, KV& kv, T&, T&, float&) { kv.page_table = table_i64; }, ErrorKind::dtype,
         {"'kv.page_table'", "i32", "i64"});
  expect([&](T&, T&, KV& kv, T&, T&, float&) { kv.page_table = table_1d; }, ErrorKind::shape,
         {"'kv.page_table'", "2 dimensions"});
  expect([&](T&, T&, KV& kv, T&, T&, float&) { kv.page_table = table_b3; }, ErrorKind::shape,
         {"'kv.kv_lens'", "[3]", "[2]"});
  expect([&](T&, T&, KV& kv, T&, T&, float&) { kv.kv_lens = lens_3; }, ErrorKind::shape,
         {"'kv.kv_lens'", "[2]", "[3]"});
  expect([&](T&, T&, KV& kv, T&, T&, float&) { kv.kv_lens = lens_i64; }, ErrorKind::dtype,
         {"'kv.kv_lens'", "i64"});
  expect([&](T&, T& cu, KV&, T&, T&, float&) { cu = cu_2; }, ErrorKind::shape,
         {"'cu_seqlens_q'", "[3]", "[2]"});
  expect([&](T&, T& cu, KV&, T&, T&, float&) { cu = cu_f32; }, ErrorKind::dtype,
         {"'cu_seqlens_q'", "i32", "f32"});
  expect([&](T&, T&, KV&, T& out, T&, float&) { out = out_f32; }, ErrorKind::dtype, {"'out'", "f32"});
  expect([&](T&, T&, KV&, T& out, T&, float&) { out = out_4; }, ErrorKind::shape,
         {"'out'", "[5, 8, 64]", "[4, 8, 64]"});
  expect([&](T&, T&, KV&, T&, T& lse, float&) { lse = lse_f16; }, ErrorKind::dtype, {"'lse'", "f16"});
  expect([&](T&, T&, KV&, T&, T& lse, float&) { lse = lse_bad; }, ErrorKind::shape,
         {"'lse'", "[5, 8]", "[5, 4]"});
  expect([&](T&, T&, KV&, T&, T&, float& s) { s = NAN; }, ErrorKind::invalid_argument,
         {"'softmax_scale'", "finite"});
}

TEST_F(AttentionErrors, IndexValues) {
  // cu_seqlens_q is {0, 2, 5}, kv_lens {5, 3}, pages of 4, page_table [2, 3].
  auto set = [](const Tensor& t, int64_t i, int32_t v) { t.ptr<int32_t>()[i] = v; };
  expect([&](T&, T& cu, KV&, T&, T&, float&) { set(cu, 0, 1); }, ErrorKind::invalid_argument,
         {"'cu_seqlens_q'", "cu_seqlens_q[0] = 0", "1"});
  reset();
  expect([&](T&, T& cu, KV&, T&, T&, float&) { set(cu, 1, 6); }, ErrorKind::invalid_argument,
         {"'cu_seqlens_q'", "non-decreasing", "cu_seqlens_q[2] = 5 < cu_seqlens_q[1] = 6"});
  reset();
  expect([&](T&, T& cu, KV&, T&, T&, float&) { set(cu, 2, 4); }, ErrorKind::invalid_argument,
         {"'cu_seqlens_q'", "q's 5 tokens", "cu_seqlens_q[2] = 4"});
  reset();
  expect([&](T&, T&, KV& kv, T&, T&, float&) { set(kv.kv_lens, 1, 2); }, ErrorKind::invalid_argument,
         {"'kv.kv_lens'", "kv_lens[1]", "query count 3", "2"});
  reset();
  const int64_t capacity = b.page_table.view().shape[1] * 4;
  expect([&](T&, T&, KV& kv, T&, T&, float&) { set(kv.kv_lens, 0, static_cast<int32_t>(capacity + 1)); },
         ErrorKind::invalid_argument, {"'kv.kv_lens'", "capacity " + std::to_string(capacity)});
  reset();
  expect([&](T&, T&, KV& kv, T&, T&, float&) { set(kv.page_table, 1, -1); }, ErrorKind::invalid_argument,
         {"'kv.page_table'", "[0, ", "page_table[0, 1] = -1"});
  reset();
  const int32_t num_pages = static_cast<int32_t>(b.k_pages.view().shape[0]);
  const int64_t second_row = b.page_table.view().shape[1];
  expect([&](T&, T&, KV& kv, T&, T&, float&) { set(kv.page_table, second_row, num_pages); },
         ErrorKind::invalid_argument,
         {"'kv.page_table'", "page_table[1, 0] = " + std::to_string(num_pages)});
  // Entries past a sequence's last page are padding, and are not read.
  reset();
  EXPECT_EQ(b.page_table.view().ptr<int32_t>()[second_row + 1], -1);
  EXPECT_NO_THROW(run(b.q, b.cu_seqlens_q, b.paged(), out_, lse_));
}

TEST_F(AttentionErrors, Devices) {
  Tensor lens_cuda = fake_cuda(DType::i32, {2});
  expect([&](T&, T&, KV& kv, T&, T&, float&) { kv.kv_lens = lens_cuda; }, ErrorKind::device,
         {"'kv.kv_lens'", "cpu", "cuda:0"});
  // Everything on the GPU: the shapes are still checked there (a valid call would launch the
  // kernel on these bogus pointers, so none is made; see test_attention_cuda.cpp).
  Tensor q = fake_cuda(DType::bf16, {5, 8, 64});
  ops::PagedKV kv{fake_cuda(DType::bf16, {6, 4, 2, 64}), fake_cuda(DType::bf16, {6, 4, 2, 64}),
                  fake_cuda(DType::i32, {2, 3}), fake_cuda(DType::i32, {2})};
  Tensor cu = fake_cuda(DType::i32, {3});
  Tensor out_bad = fake_cuda(DType::bf16, {5, 8, 32});
  expect_error([&] { ops::attention(q, cu, kv, true, 0.125f, out_bad, Tensor{}); }, ErrorKind::shape,
               {"'out'"});
}

}  // namespace
}  // namespace braid::test
