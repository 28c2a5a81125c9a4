// attention_mla, the CPU reference: against the contract's formula computed here in double over
// contiguous rows, against the expanded (un-absorbed) multi-head latent attention it stands for,
// and against attention() over the same cache seen as MQA; strided views, lse, the workspace
// bound, and every argument and index-value error (those run without a GPU).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "braid/ops.h"
#include "ops/attention/mla_test_util.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct Naive {
  std::vector<float> out;  // [total_q, heads, r]
  std::vector<float> lse;  // [total_q, heads]
};

// The contract, term by term, in double over each sequence's contiguous rows: masking written as
// "key position <= query position", positions counted from the start of the sequence.
Naive naive_mla(const MlaBatch& b, bool causal, double scale) {
  const auto ql = to_floats(b.q_latent), qr = to_floats(b.q_rope);
  const int64_t H = b.heads, r = b.r, dr = b.dr, width = r + dr;
  Naive n{std::vector<float>(static_cast<size_t>(b.total_q() * H * r)),
          std::vector<float>(static_cast<size_t>(b.total_q() * H))};
  int64_t t = 0;
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    const auto c = to_floats(b.rows[s]);
    const MlaSeq seq = b.seqs[s];
    for (int64_t i = 0; i < seq.q_len; ++i, ++t) {
      const int64_t q_pos = seq.kv_len - seq.q_len + i;
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> score;
        for (int64_t j = 0; j < seq.kv_len; ++j) {
          if (causal && j > q_pos) break;
          double nope = 0, pe = 0;
          for (int64_t d = 0; d < r; ++d)
            nope += double(ql[(t * H + h) * r + d]) * c[j * width + d];
          for (int64_t d = 0; d < dr; ++d)
            pe += double(qr[(t * H + h) * dr + d]) * c[j * width + r + d];
          score.push_back((nope + pe) * scale);
        }
        const double m = *std::max_element(score.begin(), score.end());
        double total = 0;
        for (double x : score) total += std::exp(x - m);
        for (int64_t d = 0; d < r; ++d) {
          double o = 0;
          for (size_t j = 0; j < score.size(); ++j)
            o += std::exp(score[j] - m) / total * c[j * width + d];
          n.out[(t * H + h) * r + d] = static_cast<float>(o);
        }
        n.lse[t * H + h] = static_cast<float>(m + std::log(total));
      }
    }
  }
  return n;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

// Chunked prefill after a cached prefix (q_len < kv_len), a whole prompt, decode steps, a
// sequence with no queries this step, and a one-token sequence.
const std::vector<MlaSeq> kRagged = {{6, 37}, {13, 13}, {1, 20}, {0, 5}, {1, 1}};

// ---------------------------------------------------------------------------------------------

struct RefCase {
  DType dtype;
  int64_t heads, r, dr, page_size;
  bool causal;
};

std::string case_name(const RefCase& c) {
  return std::string(dtype_name(c.dtype)) + "_h" + std::to_string(c.heads) + "_r" +
         std::to_string(c.r) + "_dr" + std::to_string(c.dr) + "_page" +
         std::to_string(c.page_size) + (c.causal ? "_causal" : "_full");
}
void PrintTo(const RefCase& c, std::ostream* os) { *os << case_name(c); }

class AttentionMlaReference : public ::testing::TestWithParam<RefCase> {};

TEST_P(AttentionMlaReference, MatchesTheFormulaInDouble) {
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const MlaBatch b = make_mla_batch(c.dtype, c.heads, c.r, c.dr, c.page_size, kRagged, 1, seed);
  const double scale = 1.5 / std::sqrt(static_cast<double>(c.r + c.dr));
  auto out = poisoned(c.dtype, {b.total_q(), c.heads, c.r}, Device::cpu());
  auto lse = poisoned(DType::f32, {b.total_q(), c.heads}, Device::cpu());
  ops::attention_mla(b.q_latent, b.q_rope, b.cu_seqlens_q, b.cache, b.page_table, b.kv_lens,
                     c.causal, static_cast<float>(scale), out, lse,
                     mla_workspace(b, Device::cpu()));
  const Naive ref = naive_mla(b, c.causal, static_cast<float>(scale));
  EXPECT_LE(rel_error(to_floats(out), ref.out), tolerance(c.dtype));
  EXPECT_LE(max_abs_diff(to_floats(lse), ref.lse), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionMlaReference,
    ::testing::Values(RefCase{DType::f32, 4, 16, 8, 4, true},
                      RefCase{DType::f32, 3, 64, 32, 16, false},
                      RefCase{DType::bf16, 16, 64, 32, 16, true},  // the CUDA test shape
                      RefCase{DType::f16, 2, 32, 0, 7, true},      // no rope part
                      RefCase{DType::bf16, 1, 48, 16, 1, false},   // one token per page
                      RefCase{DType::f32, 2, 512, 64, 16, true}),  // DeepSeek-V2/V3's r, dr
    [](const auto& info) { return case_name(info.param); });

// The absorbed form against the expanded multi-head latent attention it computes: with
// k_nope[h] = W_UK[h] c_latent and v[h] = W_UV[h] c_latent for each cached latent c_latent,
//   out_expanded[h] = sum_s softmax_s((q_nope[h] . k_nope[h]_s + q_pe[h] . k_pe_s) * scale) v[h]_s
// equals W_UV[h] attention_mla(q_latent = W_UK[h]^T q_nope[h], q_rope = q_pe)[h].
TEST(AttentionMlaReference, EqualsTheExpandedAttention) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t H = 3, dn = 8, dv = 6, r = 16, dr = 8, width = r + dr;
  const MlaBatch b = make_mla_batch(DType::f32, H, r, dr, 4, kRagged, 0, seed);
  const int64_t T = b.total_q();
  const auto w_uk = to_floats(random_host(DType::f32, {H, dn, r}, seed + 100));
  const auto w_uv = to_floats(random_host(DType::f32, {H, dv, r}, seed + 101));
  const auto q_nope = to_floats(random_host(DType::f32, {T, H, dn}, seed + 102));
  const auto q_pe = to_floats(b.q_rope);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dn + dr));

  // Absorbed: q_latent = W_UK^T q_nope per head, then W_UV applied to the op's output.
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t k = 0; k < r; ++k) {
        double v = 0;
        for (int64_t n = 0; n < dn; ++n)
          v += double(w_uk[(h * dn + n) * r + k]) * q_nope[(t * H + h) * dn + n];
        b.q_latent.view().ptr<float>()[(t * H + h) * r + k] = static_cast<float>(v);
      }
  auto latent_out = poisoned(DType::f32, {T, H, r}, Device::cpu());
  auto lse = poisoned(DType::f32, {T, H}, Device::cpu());
  ops::attention_mla(b.q_latent, b.q_rope, b.cu_seqlens_q, b.cache, b.page_table, b.kv_lens, true,
                     static_cast<float>(scale), latent_out, lse, Tensor{});
  const auto lo = to_floats(latent_out);

  std::vector<float> absorbed(static_cast<size_t>(T * H * dv)), expanded(absorbed.size());
  std::vector<float> expanded_lse(static_cast<size_t>(T * H));
  int64_t t = 0;
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    const auto c = to_floats(b.rows[s]);
    const MlaSeq seq = b.seqs[s];
    for (int64_t i = 0; i < seq.q_len; ++i, ++t) {
      const int64_t visible = seq.kv_len - seq.q_len + i + 1;
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t e = 0; e < dv; ++e) {
          double v = 0;
          for (int64_t k = 0; k < r; ++k)
            v += double(w_uv[(h * dv + e) * r + k]) * lo[(t * H + h) * r + k];
          absorbed[(t * H + h) * dv + e] = static_cast<float>(v);
        }
        // Expanded: per-head keys and values decompressed from each latent row.
        std::vector<double> score(static_cast<size_t>(visible));
        std::vector<std::vector<double>> value(static_cast<size_t>(visible),
                                               std::vector<double>(dv));
        for (int64_t j = 0; j < visible; ++j) {
          const float* row = c.data() + j * width;
          double x = 0;
          for (int64_t n = 0; n < dn; ++n) {
            double k_nope = 0;
            for (int64_t k = 0; k < r; ++k) k_nope += double(w_uk[(h * dn + n) * r + k]) * row[k];
            x += double(q_nope[(t * H + h) * dn + n]) * k_nope;
          }
          for (int64_t d = 0; d < dr; ++d) x += double(q_pe[(t * H + h) * dr + d]) * row[r + d];
          score[j] = x * scale;
          for (int64_t e = 0; e < dv; ++e)
            for (int64_t k = 0; k < r; ++k)
              value[j][e] += double(w_uv[(h * dv + e) * r + k]) * row[k];
        }
        const double m = *std::max_element(score.begin(), score.end());
        double total = 0;
        for (double x : score) total += std::exp(x - m);
        for (int64_t e = 0; e < dv; ++e) {
          double o = 0;
          for (int64_t j = 0; j < visible; ++j) o += std::exp(score[j] - m) / total * value[j][e];
          expanded[(t * H + h) * dv + e] = static_cast<float>(o);
        }
        expanded_lse[t * H + h] = static_cast<float>(m + std::log(total));
      }
    }
  }
  EXPECT_LE(rel_error(absorbed, expanded), 1e-5);
  EXPECT_LE(max_abs_diff(to_floats(lse), expanded_lse), 1e-5);
}

// The same numbers as attention() over the cache seen as MQA with one KV head of width r + dr:
// K = the cached rows, V = the rows with the rope part zeroed, q = [q_latent | q_rope].
TEST(AttentionMlaReference, AgreesWithAttentionAsMqa) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t H = 5, r = 32, dr = 16, width = r + dr;
  for (bool causal : {true, false}) {
    const MlaBatch b = make_mla_batch(DType::f32, H, r, dr, 8, kRagged, 2, seed);
    const int64_t T = b.total_q();
    const auto cache = b.cache.view();
    OwnedTensor v_pages(DType::f32, {cache.shape[0], cache.shape[1], 1, width}, Device::cpu());
    const int64_t slots = cache.shape[0] * cache.shape[1];
    for (int64_t e = 0; e < slots * width; ++e)
      v_pages.view().ptr<float>()[e] = e % width < r ? cache.ptr<float>()[e] : 0.0f;
    OwnedTensor q(DType::f32, {T, H, width}, Device::cpu());
    for (int64_t i = 0; i < T * H; ++i)
      for (int64_t d = 0; d < width; ++d)
        q.view().ptr<float>()[i * width + d] = d < r ? b.q_latent.view().ptr<float>()[i * r + d]
                                                     : b.q_rope.view().ptr<float>()[i * dr + d - r];
    auto want = poisoned(DType::f32, {T, H, width}, Device::cpu());
    auto want_lse = poisoned(DType::f32, {T, H}, Device::cpu());
    ops::attention(q, b.cu_seqlens_q, ops::PagedKV{b.cache, v_pages, b.page_table, b.kv_lens},
                   causal, 0.2f, want, want_lse);
    auto got = poisoned(DType::f32, {T, H, r}, Device::cpu());
    auto got_lse = poisoned(DType::f32, {T, H}, Device::cpu());
    ops::attention_mla(b.q_latent, b.q_rope, b.cu_seqlens_q, b.cache, b.page_table, b.kv_lens,
                       causal, 0.2f, got, got_lse, mla_workspace(b, Device::cpu()));
    const auto w = to_floats(want.view().slice(2, 0, r));
    EXPECT_LE(rel_error(to_floats(got), w), 1e-6) << (causal ? "causal" : "full");
    EXPECT_LE(rel_error(to_floats(got_lse), to_floats(want_lse)), 1e-6);
  }
}

TEST(AttentionMlaReference, StridedViewsAndNoLse) {
  // q_latent and q_rope as the two parts of one [T, H, r + dr] projection output (any row and
  // head stride), out as a head slice of a wider buffer whose other heads stay untouched.
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t H = 4, r = 64, dr = 32;
  const MlaBatch b = make_mla_batch(DType::bf16, H, r, dr, 16, kRagged, 1, seed);
  const int64_t T = b.total_q();
  auto packed = random_host(DType::bf16, {T, H, r + dr + 8}, seed + 5);
  const Tensor ql = packed.view().slice(2, 0, r), qr = packed.view().slice(2, r, r + dr);
  for (int64_t i = 0; i < T * H; ++i) {
    const int64_t t = i / H, h = i % H;
    for (int64_t d = 0; d < r; ++d)
      store_from_float(ql.data, DType::bf16, t * ql.strides[0] + h * ql.strides[1] + d,
                       load_as_float(b.q_latent.data(), DType::bf16, i * r + d));
    for (int64_t d = 0; d < dr; ++d)
      store_from_float(qr.data, DType::bf16, t * qr.strides[0] + h * qr.strides[1] + d,
                       load_as_float(b.q_rope.data(), DType::bf16, i * dr + d));
  }
  auto wide = poisoned(DType::bf16, {T, H + 2, r}, Device::cpu());
  const Tensor out_view = wide.view().slice(1, 1, H + 1);
  ops::attention_mla(ql, qr, b.cu_seqlens_q, b.cache, b.page_table, b.kv_lens, true, 0.1f, out_view,
                     Tensor{}, mla_workspace(b, Device::cpu()));
  auto ref = poisoned(DType::bf16, {T, H, r}, Device::cpu());
  ops::attention_mla(b.q_latent, b.q_rope, b.cu_seqlens_q, b.cache, b.page_table, b.kv_lens, true,
                     0.1f, ref, Tensor{}, mla_workspace(b, Device::cpu()));
  EXPECT_EQ(to_floats(out_view), to_floats(ref));
  const auto all = to_floats(wide);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h : {int64_t{0}, H + 1})
      for (int64_t d = 0; d < r; ++d)
        ASSERT_TRUE(std::isnan(all[(t * (H + 2) + h) * r + d])) << "token " << t << " head " << h;
}

TEST(AttentionMlaReference, WorkspaceBound) {
  // Decode: room for several chunks per (token, head), growing with the context up to a bound
  // set by the tokens and heads. Prefill-sized calls and short tables need none.
  const int64_t one = ops::attention_mla_workspace_floats(1, 128, 512, 1024);
  EXPECT_GE(one, 2 * 128 * 513);
  EXPECT_GT(ops::attention_mla_workspace_floats(1, 128, 512, 8192), one);
  EXPECT_EQ(ops::attention_mla_workspace_floats(1, 128, 512, 1 << 20),
            ops::attention_mla_workspace_floats(1, 128, 512, 1 << 21));
  EXPECT_GT(ops::attention_mla_workspace_floats(4, 16, 512, 163840), 0);
  EXPECT_EQ(ops::attention_mla_workspace_floats(512, 16, 512, 163840), 0);
  EXPECT_EQ(ops::attention_mla_workspace_floats(64, 128, 512, 163840), 0);
  EXPECT_EQ(ops::attention_mla_workspace_floats(4, 16, 512, 64), 0);
  // Small batches split short caches too (chunks down to 64 keys).
  EXPECT_GT(ops::attention_mla_workspace_floats(4, 16, 512, 256), 0);
  EXPECT_EQ(ops::attention_mla_workspace_floats(0, 16, 512, 4096), 0);
  // Never more than about kMaxSplitBlocks (512) chunks of 16 heads, whatever the call.
  for (int64_t tokens : {1, 3, 17, 100, 511})
    EXPECT_LE(ops::attention_mla_workspace_floats(tokens, 128, 512, 1 << 20),
              (512 + tokens * 8) * 16 * 513);
}

// ---------------------------------------------------------------------------------------------
// Errors. They all run without a GPU: the shape checks come before anything touches the data.

struct Args {
  Tensor q_latent, q_rope, cu_seqlens_q, cache, page_table, kv_lens, out, lse, workspace;
  float scale = 0.1f;
  void call() const {
    ops::attention_mla(q_latent, q_rope, cu_seqlens_q, cache, page_table, kv_lens, true, scale, out,
                       lse, workspace);
  }
};

// Shapes of a decode step of 2 sequences, 8 heads, r 64, dr 32, pages of 16 (table of 3).
Args good_cuda_args() {
  Args a;
  a.q_latent = fake_cuda(DType::bf16, {2, 8, 64});
  a.q_rope = fake_cuda(DType::bf16, {2, 8, 32});
  a.cu_seqlens_q = fake_cuda(DType::i32, {3});
  a.cache = fake_cuda(DType::bf16, {6, 16, 1, 96});
  a.page_table = fake_cuda(DType::i32, {2, 3});
  a.kv_lens = fake_cuda(DType::i32, {2});
  a.out = fake_cuda(DType::bf16, {2, 8, 64});
  a.lse = fake_cuda(DType::f32, {2, 8});
  a.workspace = fake_cuda(
      DType::f32, {std::max<int64_t>(1, ops::attention_mla_workspace_floats(2, 8, 64, 48))});
  return a;
}

TEST(AttentionMlaErrors, ShapesDtypesDevices) {
  const char* op = "attention_mla";
  auto expect = [&](auto edit, ErrorKind kind, std::vector<std::string> fragments) {
    Args a = good_cuda_args();
    edit(a);
    fragments.insert(fragments.begin(), op);
    expect_error([&] { a.call(); }, kind, fragments);
  };
  expect([](Args& a) { a.q_latent = Tensor{}; }, ErrorKind::invalid_argument,
         {"'q_latent'", "a tensor"});
  expect([](Args& a) { a.q_rope = Tensor{}; }, ErrorKind::invalid_argument, {"'q_rope'"});
  expect([](Args& a) { a.cu_seqlens_q = Tensor{}; }, ErrorKind::invalid_argument,
         {"'cu_seqlens_q'"});
  expect([](Args& a) { a.cache = Tensor{}; }, ErrorKind::invalid_argument, {"'cache'"});
  expect([](Args& a) { a.page_table = Tensor{}; }, ErrorKind::invalid_argument, {"'page_table'"});
  expect([](Args& a) { a.kv_lens = Tensor{}; }, ErrorKind::invalid_argument, {"'kv_lens'"});
  expect([](Args& a) { a.out = Tensor{}; }, ErrorKind::invalid_argument, {"'out'"});

  expect(
      [](Args& a) {
        a.q_latent = fake_cuda(DType::i32, {2, 8, 64});
      },
      ErrorKind::dtype, {"'q_latent'", "f32 or f16 or bf16", "i32"});
  expect(
      [](Args& a) {
        a.q_latent = fake_cuda(DType::bf16, {2, 8 * 64});
      },
      ErrorKind::shape, {"'q_latent'", "3 dimensions"});
  expect(
      [](Args& a) {
        a.q_latent = fake_cuda(DType::bf16, {2, 8, 0});
      },
      ErrorKind::shape, {"'q_latent'", "r (dimension 2) >= 1"});
  expect(
      [](Args& a) {
        a.q_latent = fake_cuda(DType::bf16, {2, 8, 64});
        a.q_latent.strides[2] = 2;
      },
      ErrorKind::shape, {"'q_latent'", "dense last dimension"});

  expect(
      [](Args& a) {
        a.q_rope = fake_cuda(DType::f16, {2, 8, 32});
      },
      ErrorKind::dtype, {"'q_rope'", "bf16", "f16"});
  expect(
      [](Args& a) {
        a.q_rope = fake_cuda(DType::bf16, {2, 32});
      },
      ErrorKind::shape, {"'q_rope'", "3 dimensions"});
  expect(
      [](Args& a) {
        a.q_rope = fake_cuda(DType::bf16, {3, 8, 32});
      },
      ErrorKind::shape, {"'q_rope'", "total_q"});
  expect(
      [](Args& a) {
        a.q_rope = fake_cuda(DType::bf16, {2, 4, 32});
      },
      ErrorKind::shape, {"'q_rope'", "heads"});
  expect(
      [](Args& a) {
        a.q_rope = fake_cuda(DType::bf16, {2, 8, 32});
        a.q_rope.strides[2] = 2;
      },
      ErrorKind::shape, {"'q_rope'", "dense last dimension"});

  expect(
      [](Args& a) {
        a.cache = fake_cuda(DType::f16, {6, 16, 1, 96});
      },
      ErrorKind::dtype, {"'cache'", "bf16", "f16"});
  expect(
      [](Args& a) {
        a.cache = fake_cuda(DType::bf16, {6, 16, 96});
      },
      ErrorKind::shape, {"'cache'", "4 dimensions"});
  expect(
      [](Args& a) {
        a.cache = fake_cuda(DType::bf16, {6, 16, 2, 96});
      },
      ErrorKind::shape, {"'cache'", "kv_heads 1"});
  expect(
      [](Args& a) {
        a.cache = fake_cuda(DType::bf16, {6, 16, 1, 64});
      },
      ErrorKind::shape, {"'cache'", "r + dr = 64 + 32", "[6, 16, 1, 64]"});
  expect(
      [](Args& a) {
        a.cache = fake_cuda(DType::bf16, {6, 16, 1, 96});
        a.cache.strides[0] = 2000;
      },
      ErrorKind::shape, {"'cache'", "contiguous"});
  expect(
      [](Args& a) {
        a.cache = fake_cuda(DType::bf16, {6, 0, 1, 96});
      },
      ErrorKind::shape, {"'cache'", "page_size"});

  expect(
      [](Args& a) {
        a.page_table = fake_cuda(DType::i64, {2, 3});
      },
      ErrorKind::dtype, {"'page_table'", "i32", "i64"});
  expect([](Args& a) { a.page_table = fake_cuda(DType::i32, {6}); }, ErrorKind::shape,
         {"'page_table'", "2 dimensions"});
  expect(
      [](Args& a) {
        a.page_table = fake_cuda(DType::i32, {2, 3});
        a.page_table.strides[0] = 4;
      },
      ErrorKind::shape, {"'page_table'", "contiguous"});
  expect([](Args& a) { a.kv_lens = fake_cuda(DType::i32, {3}); }, ErrorKind::shape,
         {"'kv_lens'", "[2]"});
  expect([](Args& a) { a.kv_lens = fake_cuda(DType::i64, {2}); }, ErrorKind::dtype,
         {"'kv_lens'", "i32", "i64"});
  expect([](Args& a) { a.cu_seqlens_q = fake_cuda(DType::i32, {2}); }, ErrorKind::shape,
         {"'cu_seqlens_q'", "[3]"});
  expect([](Args& a) { a.cu_seqlens_q = fake_cuda(DType::i64, {3}); }, ErrorKind::dtype,
         {"'cu_seqlens_q'", "i32"});

  expect(
      [](Args& a) {
        a.out = fake_cuda(DType::f16, {2, 8, 64});
      },
      ErrorKind::dtype, {"'out'", "bf16", "f16"});
  expect(
      [](Args& a) {
        a.out = fake_cuda(DType::bf16, {2, 8, 96});
      },
      ErrorKind::shape, {"'out'", "[2, 8, 64]"});
  expect(
      [](Args& a) {
        a.out = fake_cuda(DType::bf16, {2, 8, 64});
        a.out.strides[2] = 2;
      },
      ErrorKind::shape, {"'out'", "dense last dimension"});
  expect(
      [](Args& a) {
        a.lse = fake_cuda(DType::f32, {2, 4});
      },
      ErrorKind::shape, {"'lse'", "[2, 8]"});
  expect(
      [](Args& a) {
        a.lse = fake_cuda(DType::bf16, {2, 8});
      },
      ErrorKind::dtype, {"'lse'", "f32"});

  // A long page table: decode splits the keys, and the workspace must hold the chunks.
  auto long_table = [](Args& a) {
    a.page_table = fake_cuda(DType::i32, {2, 256});
    a.cache = fake_cuda(DType::bf16, {600, 16, 1, 96});
  };
  const int64_t need = ops::attention_mla_workspace_floats(2, 8, 64, 256 * 16);
  ASSERT_GT(need, 0);
  expect(
      [&](Args& a) {
        long_table(a);
        a.workspace = fake_cuda(DType::f32, {need - 1});
      },
      ErrorKind::shape,
      {"'workspace'", "at least " + std::to_string(need), std::to_string(need - 1) + " elements"});
  expect(
      [&](Args& a) {
        long_table(a);
        a.workspace = Tensor{};
      },
      ErrorKind::invalid_argument, {"'workspace'", "a tensor"});
  expect(
      [&](Args& a) {
        long_table(a);
        a.workspace = fake_cuda(DType::bf16, {need});
      },
      ErrorKind::dtype, {"'workspace'", "f32", "bf16"});
  expect(
      [&](Args& a) {
        long_table(a);
        a.workspace = fake_cuda(DType::f32, {need, 2});
        a.workspace.strides[0] = 3;
      },
      ErrorKind::shape, {"'workspace'", "contiguous"});
  expect([](Args& a) { a.scale = NAN; }, ErrorKind::invalid_argument,
         {"'softmax_scale'", "finite"});
  expect([](Args& a) { a.scale = INFINITY; }, ErrorKind::invalid_argument,
         {"'softmax_scale'", "finite"});

  OwnedTensor out_cpu(DType::bf16, {2, 8, 64}, Device::cpu());
  expect([&](Args& a) { a.out = out_cpu; }, ErrorKind::device, {"'out'", "cuda:0", "cpu"});
  OwnedTensor ws_cpu(DType::f32, {16}, Device::cpu());
  expect([&](Args& a) { a.workspace = ws_cpu; }, ErrorKind::device,
         {"'workspace'", "cuda:0", "cpu"});
}

TEST(AttentionMlaErrors, UnsupportedOnCuda) {
  // What the CUDA kernels do not take (raised before anything touches the device).
  auto with = [](int64_t r, int64_t dr, DType dtype) {
    Args a = good_cuda_args();
    a.q_latent = fake_cuda(dtype, {2, 8, r});
    a.q_rope = fake_cuda(dtype, {2, 8, dr});
    a.cache = fake_cuda(dtype, {6, 16, 1, r + dr});
    a.out = fake_cuda(dtype, {2, 8, r});
    return a;
  };
#if BRAID_WITH_CUDA
  expect_error([&] { with(64, 32, DType::f32).call(); }, ErrorKind::unsupported,
               {"attention_mla", "'q_latent'", "f16 or bf16 on CUDA", "f32"});
  expect_error([&] { with(96, 32, DType::bf16).call(); }, ErrorKind::unsupported,
               {"attention_mla", "'q_latent'", "multiple of 64 up to 512", "r 96"});
  expect_error([&] { with(576, 32, DType::bf16).call(); }, ErrorKind::unsupported,
               {"attention_mla", "'q_latent'", "r 576"});
  expect_error([&] { with(64, 16, DType::bf16).call(); }, ErrorKind::unsupported,
               {"attention_mla", "'q_rope'", "multiple of 32 up to 64", "dr 16"});
  expect_error([&] { with(64, 96, DType::f16).call(); }, ErrorKind::unsupported,
               {"attention_mla", "'q_rope'", "dr 96"});
  Args misaligned = with(64, 32, DType::bf16);
  misaligned.cache.data = reinterpret_cast<void*>(uintptr_t{0x1002});
  expect_error([&] { misaligned.call(); }, ErrorKind::unsupported,
               {"attention_mla", "'cache'", "16-byte aligned"});
#else
  expect_error([&] { with(64, 32, DType::bf16).call(); }, ErrorKind::unsupported,
               {"attention_mla", "no CUDA support"});
#endif
}

TEST(AttentionMlaErrors, IndexValuesOnTheCpu) {
  MlaBatch b = make_mla_batch(DType::f32, 2, 16, 8, 4, {{2, 3}, {1, 9}}, 1, 1);
  auto out = poisoned(DType::f32, {3, 2, 16}, Device::cpu());
  auto call = [&] {
    ops::attention_mla(b.q_latent, b.q_rope, b.cu_seqlens_q, b.cache, b.page_table, b.kv_lens, true,
                       0.1f, out, Tensor{}, Tensor{});
  };
  const char* op = "attention_mla";
  int32_t* cu = b.cu_seqlens_q.view().ptr<int32_t>();
  int32_t* lens = b.kv_lens.view().ptr<int32_t>();
  int32_t* table = b.page_table.view().ptr<int32_t>();
  const int64_t max_pages = b.page_table.view().shape[1];  // 3 + 1 spare: capacity 16

  cu[0] = 1;
  expect_error(call, ErrorKind::invalid_argument,
               {op, "'cu_seqlens_q'", "cu_seqlens_q[0] = 0", "got 1"});
  cu[0] = 0;
  cu[1] = 4;
  expect_error(
      call, ErrorKind::invalid_argument,
      {op, "'cu_seqlens_q'", "non-decreasing", "cu_seqlens_q[2] = 3 < cu_seqlens_q[1] = 4"});
  cu[1] = 2;
  cu[2] = 2;
  expect_error(call, ErrorKind::invalid_argument,
               {op, "'cu_seqlens_q'", "q_latent's 3 tokens", "cu_seqlens_q[2] = 2"});
  cu[2] = 3;

  lens[0] = 1;  // fewer keys than its 2 queries
  expect_error(call, ErrorKind::invalid_argument,
               {op, "'kv_lens'", "kv_lens[0] between its query count 2", "got 1"});
  lens[0] = 17;  // past the table's capacity of 4 pages of 4
  expect_error(call, ErrorKind::invalid_argument, {op, "'kv_lens'", "capacity 16", "got 17"});
  lens[0] = 3;

  const int32_t saved = table[1 * max_pages + 2];
  table[1 * max_pages + 2] = static_cast<int32_t>(b.cache.view().shape[0]);
  expect_error(call, ErrorKind::invalid_argument, {op, "'page_table'", "page_table[1, 2] = "});
  table[1 * max_pages + 2] = -1;
  expect_error(call, ErrorKind::invalid_argument, {op, "'page_table'", "[1, 2] = -1"});
  table[1 * max_pages + 2] = saved;
  call();  // all valid again: the spare entries (-1) past a sequence's pages are never looked at
}

TEST(AttentionMlaReference, EmptyBatchIsANoOp) {
  // No query tokens at all (every sequence idle this step): nothing to compute, nothing written.
  const MlaBatch b = make_mla_batch(DType::f32, 2, 16, 8, 4, {{0, 3}, {0, 0}}, 1, 3);
  auto out = poisoned(DType::f32, {0, 2, 16}, Device::cpu());
  ops::attention_mla(b.q_latent, b.q_rope, b.cu_seqlens_q, b.cache, b.page_table, b.kv_lens, true,
                     0.1f, out, Tensor{}, Tensor{});
}

}  // namespace
}  // namespace braid::test
