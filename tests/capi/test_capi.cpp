// The C API (include/braid/braid.h), used exactly as a C caller would: only braid.h, plain
// descriptors, statuses and braid_last_error_message(). No braid C++ headers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "braid/braid.h"

namespace {

uint64_t fresh_seed() {
  static std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

braid_tensor cpu_f32(void* data, std::vector<int64_t>& shape, int64_t* strides = nullptr) {
  braid_tensor t{};
  t.data = data;
  t.device = {BRAID_DEVICE_CPU, 0};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = {BRAID_DTYPE_FLOAT, 32, 1};
  t.shape = shape.data();
  t.strides = strides;
  t.byte_offset = 0;
  return t;
}

// Hugging Face's RMSNorm in double: weight * x / sqrt(mean(x²) + eps). f32 rounding of the
// intermediate is below the 1e-5 tolerance.
float rms_ref(const float* row, int64_t row_step, const float* w, int64_t d, int64_t i,
              float eps) {
  double ss = 0;
  for (int64_t j = 0; j < d; ++j) ss += double(row[j * row_step]) * row[j * row_step];
  return static_cast<float>(w[i] * (row[i * row_step] / std::sqrt(ss / d + eps)));
}

std::string last_error() { return braid_last_error_message(); }

void expect_message_has(const std::vector<std::string>& fragments) {
  const std::string msg = last_error();
  for (const auto& f : fragments)
    EXPECT_NE(msg.find(f), std::string::npos) << "message \"" << msg << "\" lacks \"" << f << "\"";
}

// ---- rms_norm through descriptors ----

TEST(CApi, RmsNormContiguousMatchesFormula) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t rows = 7, d = 33;
  auto x = random_floats(rows * d, seed, -2, 2);
  auto w = random_floats(d, seed + 1, 0.5f, 1.5f);
  std::vector<float> out(rows * d, NAN);
  std::vector<int64_t> xs{rows, d}, ws{d};
  braid_tensor tx = cpu_f32(x.data(), xs), tw = cpu_f32(w.data(), ws), to = cpu_f32(out.data(), xs);

  ASSERT_EQ(braid_rms_norm(&tx, &tw, 1e-6f, &to, nullptr), BRAID_OK) << last_error();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < d; ++i)
      EXPECT_NEAR(out[r * d + i], rms_ref(&x[r * d], 1, w.data(), d, i, 1e-6f), 1e-5)
          << "row " << r << " col " << i;
}

TEST(CApi, RmsNormExplicitStridesAndByteOffset) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // x: 3 rows of 5 inside a buffer with row pitch 8, starting 2 floats in (via byte_offset).
  const int64_t rows = 3, d = 5, pitch = 8, skip = 2;
  auto buf = random_floats(skip + rows * pitch, seed, -2, 2);
  auto w = random_floats(d, seed + 1, 0.5f, 1.5f);
  std::vector<float> out(rows * pitch, NAN);
  std::vector<int64_t> xs{rows, d}, ws{d};
  int64_t strides[2] = {pitch, 1};
  braid_tensor tx = cpu_f32(buf.data(), xs, strides);
  tx.byte_offset = skip * sizeof(float);
  braid_tensor tw = cpu_f32(w.data(), ws);
  braid_tensor to = cpu_f32(out.data(), xs, strides);

  ASSERT_EQ(braid_rms_norm(&tx, &tw, 1e-5f, &to, nullptr), BRAID_OK) << last_error();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < d; ++i)
      EXPECT_NEAR(out[r * pitch + i], rms_ref(&buf[skip + r * pitch], 1, w.data(), d, i, 1e-5f),
                  1e-5)
          << "row " << r << " col " << i;
    for (int64_t i = d; i < pitch; ++i)
      EXPECT_TRUE(std::isnan(out[r * pitch + i])) << "padding written at row " << r;
  }
}

TEST(CApi, AddRmsNormUpdatesResidual) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t rows = 2, d = 16;
  auto x = random_floats(rows * d, seed, -1, 1);
  auto res = random_floats(rows * d, seed + 2, -1, 1);
  auto w = random_floats(d, seed + 1, 0.5f, 1.5f);
  std::vector<float> sum(rows * d), out(rows * d, NAN);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = x[i] + res[i];
  std::vector<int64_t> xs{rows, d}, ws{d};
  braid_tensor tx = cpu_f32(x.data(), xs), tr = cpu_f32(res.data(), xs);
  braid_tensor tw = cpu_f32(w.data(), ws), to = cpu_f32(out.data(), xs);

  ASSERT_EQ(braid_add_rms_norm(&tx, &tr, &tw, 1e-6f, &to, nullptr), BRAID_OK) << last_error();
  for (int64_t k = 0; k < rows * d; ++k) {
    EXPECT_EQ(res[k], sum[k]);
    EXPECT_NEAR(out[k], rms_ref(&sum[k / d * d], 1, w.data(), d, k % d, 1e-6f), 1e-5);
  }
}

// ---- moe_route_topk_softmax: int and bool arguments, an i32 output ----

TEST(CApi, MoeRouteTopkSoftmaxMatchesFormula) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t tokens = 5, experts = 9;
  const int k = 3;
  auto logits = random_floats(tokens * experts, seed, -3, 3);  // continuous: no ties
  std::vector<int64_t> ls{tokens, experts}, ks{tokens, k};
  braid_tensor tl = cpu_f32(logits.data(), ls);
  for (int renormalize : {0, 1}) {
    SCOPED_TRACE("renormalize " + std::to_string(renormalize));
    std::vector<float> weights(tokens * k, NAN);
    std::vector<int32_t> ids(tokens * k, -1);
    braid_tensor tw = cpu_f32(weights.data(), ks);
    braid_tensor ti = cpu_f32(ids.data(), ks);
    ti.dtype = {BRAID_DTYPE_INT, 32, 1};
    ASSERT_EQ(braid_moe_route_topk_softmax(&tl, k, renormalize, &tw, &ti, nullptr), BRAID_OK)
        << last_error();
    for (int64_t t = 0; t < tokens; ++t) {
      const float* row = &logits[t * experts];
      // Reference: softmax in double, experts sorted by descending logit.
      std::vector<int32_t> order(experts);
      for (int32_t e = 0; e < experts; ++e) order[e] = e;
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
      const float m = *std::max_element(row, row + experts);
      double total = 0, chosen = 0;
      for (int64_t e = 0; e < experts; ++e) total += std::exp(double(row[e]) - m);
      for (int j = 0; j < k; ++j) chosen += std::exp(double(row[order[j]]) - m) / total;
      for (int j = 0; j < k; ++j) {
        const double p = std::exp(double(row[order[j]]) - m) / total;
        EXPECT_EQ(ids[t * k + j], order[j]) << "token " << t << " rank " << j;
        EXPECT_NEAR(weights[t * k + j], renormalize ? p / chosen : p, 1e-6)
            << "token " << t << " rank " << j;
      }
    }
  }
}

TEST(CApi, MoeRouteTopkSoftmaxBadK) {
  std::vector<float> logits(2 * 4, 0.0f), weights(2 * 5);
  std::vector<int32_t> ids(2 * 5);
  std::vector<int64_t> ls{2, 4}, ks{2, 5};
  braid_tensor tl = cpu_f32(logits.data(), ls), tw = cpu_f32(weights.data(), ks);
  braid_tensor ti = cpu_f32(ids.data(), ks);
  ti.dtype = {BRAID_DTYPE_INT, 32, 1};
  EXPECT_EQ(braid_moe_route_topk_softmax(&tl, 5, 1, &tw, &ti, nullptr),
            BRAID_ERR_INVALID_ARGUMENT);  // k > experts
  expect_message_has({"moe_route_topk_softmax", "argument 'k'", "5"});
  ti.dtype = {BRAID_DTYPE_INT, 64, 1};
  ks[1] = 4;
  EXPECT_EQ(braid_moe_route_topk_softmax(&tl, 4, 1, &tw, &ti, nullptr), BRAID_ERR_DTYPE);
  expect_message_has({"moe_route_topk_softmax", "argument 'topk_ids'", "i32", "i64"});
}

// ---- errors ----

struct BadNormArgs {
  std::vector<float> x = std::vector<float>(12, 1.0f), w = std::vector<float>(4, 1.0f),
                     out = std::vector<float>(12);
  std::vector<int64_t> xs{3, 4}, ws{4};
  braid_tensor tx = cpu_f32(x.data(), xs), tw = cpu_f32(w.data(), ws), to = cpu_f32(out.data(), xs);
  braid_status run() { return braid_rms_norm(&tx, &tw, 1e-6f, &to, nullptr); }
};

TEST(CApi, WrongShapeNamesOpAndArgument) {
  BadNormArgs a;
  std::vector<int64_t> wrong{5};
  a.tw.shape = wrong.data();
  EXPECT_EQ(a.run(), BRAID_ERR_SHAPE);
  expect_message_has({"rms_norm", "argument 'weight'", "[4]", "[5]"});
}

TEST(CApi, UnknownDtypeCode) {
  BadNormArgs a;
  a.tx.dtype = {7, 8, 1};  // DLPack float8_e3m4: not a braid dtype
  EXPECT_EQ(a.run(), BRAID_ERR_DTYPE);
  expect_message_has({"rms_norm", "argument 'x'", "code 7"});
}

TEST(CApi, DtypeBitsMismatch) {
  BadNormArgs a;
  a.tw.dtype = {BRAID_DTYPE_FLOAT, 64, 1};  // f64
  EXPECT_EQ(a.run(), BRAID_ERR_DTYPE);
  expect_message_has({"rms_norm", "argument 'weight'", "bits 64"});
  a.tw.dtype = {BRAID_DTYPE_FLOAT, 32, 4};  // vector lanes
  EXPECT_EQ(a.run(), BRAID_ERR_DTYPE);
  expect_message_has({"argument 'weight'", "lanes 4"});
}

TEST(CApi, DtypeMappedThroughToOpChecks) {
  BadNormArgs a;
  a.tw.dtype = {BRAID_DTYPE_BFLOAT, 16, 1};  // valid braid dtype, but not x's
  EXPECT_EQ(a.run(), BRAID_ERR_DTYPE);
  expect_message_has({"argument 'weight'", "f32", "bf16"});
}

TEST(CApi, UnknownDeviceType) {
  BadNormArgs a;
  a.to.device = {3, 0};  // kDLCUDAHost
  EXPECT_EQ(a.run(), BRAID_ERR_DEVICE);
  expect_message_has({"rms_norm", "argument 'out'", "device_type 3"});
}

TEST(CApi, MixedDevices) {
  BadNormArgs a;
  a.tw.device = {BRAID_DEVICE_CUDA, 0};  // never dereferenced: the check fails first
  const braid_status st = a.run();
  // A CPU-only build refuses CUDA tensors as unsupported only after the devices agree.
  EXPECT_EQ(st, BRAID_ERR_DEVICE) << last_error();
  expect_message_has({"rms_norm", "argument 'weight'", "cuda:0", "cpu"});
}

TEST(CApi, NullDescriptorAndBadNdim) {
  BadNormArgs a;
  EXPECT_EQ(braid_rms_norm(&a.tx, &a.tw, 1e-6f, nullptr, nullptr), BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"rms_norm", "argument 'out'", "NULL"});
  a.tx.ndim = BRAID_MAX_DIMS + 1;
  EXPECT_EQ(a.run(), BRAID_ERR_SHAPE);
  expect_message_has({"argument 'x'", "ndim 7"});
  a.tx.ndim = 2;
  a.tx.shape = nullptr;
  EXPECT_EQ(a.run(), BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"argument 'x'", "shape NULL"});
}

TEST(CApi, BadEpsIsInvalidArgument) {
  BadNormArgs a;
  EXPECT_EQ(braid_rms_norm(&a.tx, &a.tw, -1.0f, &a.to, nullptr), BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"rms_norm", "argument 'eps'"});
}

TEST(CApi, LastErrorIsPerThreadAndKeptOnSuccess) {
  BadNormArgs a;
  std::vector<int64_t> wrong{5};
  braid_tensor good_w = a.tw;
  a.tw.shape = wrong.data();
  ASSERT_EQ(a.run(), BRAID_ERR_SHAPE);
  const std::string mine = last_error();

  std::string other;
  std::thread t([&] {
    BadNormArgs b;
    b.tx.dtype = {7, 8, 1};
    EXPECT_EQ(b.run(), BRAID_ERR_DTYPE);
    other = last_error();
  });
  t.join();
  EXPECT_NE(other.find("code 7"), std::string::npos) << other;
  EXPECT_EQ(last_error(), mine);  // the other thread's failure did not overwrite ours

  a.tw = good_w;
  ASSERT_EQ(a.run(), BRAID_OK);
  EXPECT_EQ(last_error(), mine);
}

// ---- library functions ----

TEST(CApi, StatusStrings) {
  const std::vector<std::pair<braid_status, std::string>> names = {
      {BRAID_OK, "BRAID_OK"},
      {BRAID_ERR_INVALID_ARGUMENT, "BRAID_ERR_INVALID_ARGUMENT"},
      {BRAID_ERR_SHAPE, "BRAID_ERR_SHAPE"},
      {BRAID_ERR_DTYPE, "BRAID_ERR_DTYPE"},
      {BRAID_ERR_DEVICE, "BRAID_ERR_DEVICE"},
      {BRAID_ERR_CUDA, "BRAID_ERR_CUDA"},
      {BRAID_ERR_CUBLAS, "BRAID_ERR_CUBLAS"},
      {BRAID_ERR_OUT_OF_MEMORY, "BRAID_ERR_OUT_OF_MEMORY"},
      {BRAID_ERR_UNSUPPORTED, "BRAID_ERR_UNSUPPORTED"},
      {BRAID_ERR_IO, "BRAID_ERR_IO"},
      {BRAID_ERR_INTERNAL, "BRAID_ERR_INTERNAL"}};
  for (const auto& [status, name] : names) EXPECT_EQ(braid_status_string(status), name);
  EXPECT_STREQ(braid_status_string(static_cast<braid_status>(42)), "unknown status");
}

// ---- attention_prefill through descriptors ----

// One sequence of 2 queries (its last 2 tokens) over 3 keys, 2 query heads sharing 1 KV head,
// causal: query i sees keys 0 .. 1 + i. Checked against the softmax written out in double.
TEST(CApi, AttentionPrefillMatchesFormula) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t q_len = 2, kv_len = 3, q_heads = 2, d = 8;
  std::vector<float> q = random_floats(q_len * q_heads * d, seed, -1, 1);
  std::vector<float> k = random_floats(kv_len * d, seed + 1, -1, 1);
  std::vector<float> v = random_floats(kv_len * d, seed + 2, -1, 1);
  std::vector<float> out(q.size(), NAN), lse(q_len * q_heads, NAN);
  std::vector<int32_t> cu_q{0, int32_t(q_len)}, cu_kv{0, int32_t(kv_len)};
  std::vector<int64_t> qs{q_len, q_heads, d}, ks{kv_len, 1, d}, cs{2}, ls{q_len, q_heads};
  braid_tensor tq = cpu_f32(q.data(), qs), tk = cpu_f32(k.data(), ks), tv = cpu_f32(v.data(), ks);
  braid_tensor to = cpu_f32(out.data(), qs), tl = cpu_f32(lse.data(), ls);
  braid_tensor tcq = cpu_f32(cu_q.data(), cs), tckv = cpu_f32(cu_kv.data(), cs);
  tcq.dtype = tckv.dtype = {BRAID_DTYPE_INT, 32, 1};
  const float scale = 0.35f;
  ASSERT_EQ(braid_attention_prefill(&tq, &tk, &tv, &tcq, &tckv, int(q_len), 1, scale, &to, &tl,
                                    nullptr),
            BRAID_OK)
      << last_error();
  for (int64_t i = 0; i < q_len; ++i)
    for (int64_t h = 0; h < q_heads; ++h) {
      const int64_t visible = kv_len - q_len + i + 1;
      std::vector<double> p(visible);
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < visible; ++j) {
        double s = 0;
        for (int64_t e = 0; e < d; ++e) s += double(q[(i * q_heads + h) * d + e]) * k[j * d + e];
        p[j] = s * scale;
        m = std::max(m, p[j]);
      }
      for (double& x : p) sum += (x = std::exp(x - m));
      EXPECT_NEAR(lse[i * q_heads + h], m + std::log(sum), 1e-5);
      for (int64_t e = 0; e < d; ++e) {
        double o = 0;
        for (int64_t j = 0; j < visible; ++j) o += p[j] / sum * v[j * d + e];
        EXPECT_NEAR(out[(i * q_heads + h) * d + e], o, 1e-5);
      }
    }
  // lse is optional (NULL); offsets of the wrong dtype are named
  EXPECT_EQ(braid_attention_prefill(&tq, &tk, &tv, &tcq, &tckv, int(q_len), 0, scale, &to,
                                    nullptr, nullptr),
            BRAID_OK)
      << last_error();
  tckv.dtype = {BRAID_DTYPE_INT, 64, 1};
  std::vector<int64_t> cu_kv64{0, kv_len};
  tckv.data = cu_kv64.data();
  EXPECT_EQ(braid_attention_prefill(&tq, &tk, &tv, &tcq, &tckv, int(q_len), 1, scale, &to, &tl,
                                    nullptr),
            BRAID_ERR_DTYPE);
  expect_message_has({"attention_prefill", "argument 'cu_seqlens_kv'", "i32", "i64"});
}

// qk_norm_rope_kv_append without norms against braid_rope_apply + braid_kv_append (CPU, bits).
TEST(CApi, QkRopeKvAppendIsRopeThenAppend) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t n = 3, q_heads = 2, d = 8;
  const std::vector<float> qkv0 = random_floats(n * (q_heads + 2) * d, seed, -1, 1);
  const std::vector<float> pages0 = random_floats(2 * 4 * d, seed + 1, -1, 1);
  std::vector<int64_t> positions{5, 0, 900};
  std::vector<int32_t> slots{6, 1, 3};
  std::vector<int64_t> qs{n, q_heads, d}, hs{n, 1, d}, cs{2, 4, 1, d}, ns{n};
  std::vector<int64_t> hstr{(q_heads + 2) * d, d, 1};
  std::vector<float> got_qkv, got_k, got_v;
  for (bool fused : {true, false}) {
    std::vector<float> qkv = qkv0, k_pages = pages0, v_pages = pages0;
    braid_tensor tq = cpu_f32(qkv.data(), qs, hstr.data());
    braid_tensor tk = cpu_f32(qkv.data() + q_heads * d, hs, hstr.data());
    braid_tensor tv = cpu_f32(qkv.data() + (q_heads + 1) * d, hs, hstr.data());
    braid_tensor tkc = cpu_f32(k_pages.data(), cs), tvc = cpu_f32(v_pages.data(), cs);
    braid_tensor tpos = cpu_f32(positions.data(), ns), tslot = cpu_f32(slots.data(), ns);
    tpos.dtype = {BRAID_DTYPE_INT, 64, 1};
    tslot.dtype = {BRAID_DTYPE_INT, 32, 1};
    if (fused) {
      ASSERT_EQ(braid_qk_norm_rope_kv_append(&tq, &tk, &tv, nullptr, nullptr, 1e-6f, &tpos,
                                             nullptr, &tslot, &tkc, &tvc, nullptr),
                BRAID_OK)
          << last_error();
      got_qkv = qkv;
      got_k = k_pages;
      got_v = v_pages;
    } else {
      ASSERT_EQ(braid_rope_apply(&tq, &tk, &tpos, nullptr, nullptr), BRAID_OK) << last_error();
      ASSERT_EQ(braid_kv_append(&tk, &tv, &tslot, &tkc, &tvc, nullptr), BRAID_OK) << last_error();
      EXPECT_EQ(got_qkv, qkv);
      EXPECT_EQ(got_k, k_pages);
      EXPECT_EQ(got_v, v_pages);
      EXPECT_NE(qkv, qkv0);
    }
  }
}

// The decode step's joined op against the three C calls it stands for, on the CPU (bit for bit).
TEST(CApi, DecodeStepAttentionIsRopeAppendAndDecodeAttention) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t q_heads = 2, d = 8, page_size = 2, pages = 2, kv_len = 3;
  std::vector<float> qkv0 = random_floats((q_heads + 2) * d, seed, -1, 1);
  std::vector<float> cache0 = random_floats(pages * page_size * d, seed + 1, -1, 1);
  std::vector<int32_t> table{1, 0}, lens{int32_t(kv_len)};
  std::vector<int64_t> positions{kv_len - 1};
  std::vector<int32_t> slots{0 * page_size + 0};  // key 2 is slot 0 of page table[0][1] = 0
  braid_rope_config rope;
  braid_rope_config_init(&rope);
  std::vector<int64_t> qs{1, q_heads, d}, hs{1, 1, d}, cs{pages, page_size, 1, d}, ts{1, 2}, ns{1};
  std::vector<int64_t> hstr{(q_heads + 2) * d, d, 1}, ws{braid_attention_decode_workspace_floats(
                                                          1, q_heads, d, pages * page_size)};
  auto run = [&](bool joined, std::vector<float>& out, std::vector<float>& k_cache,
                 std::vector<float>& v_cache) {
    std::vector<float> qkv = qkv0, workspace(static_cast<size_t>(ws[0]));
    std::vector<int32_t> counters(4, 0);
    std::vector<int64_t> counter_shape{braid_attention_decode_counters(1, q_heads, 1)};
    k_cache = cache0;
    v_cache = cache0;
    out.assign(q_heads * d, NAN);
    braid_tensor tq = cpu_f32(qkv.data(), qs, hstr.data());
    braid_tensor tk = cpu_f32(qkv.data() + q_heads * d, hs, hstr.data());
    braid_tensor tv = cpu_f32(qkv.data() + (q_heads + 1) * d, hs, hstr.data());
    braid_tensor tkc = cpu_f32(k_cache.data(), cs), tvc = cpu_f32(v_cache.data(), cs);
    braid_tensor ttab = cpu_f32(table.data(), ts), tlen = cpu_f32(lens.data(), ns);
    braid_tensor tpos = cpu_f32(positions.data(), ns), tslot = cpu_f32(slots.data(), ns);
    braid_tensor tout = cpu_f32(out.data(), qs), tws = cpu_f32(workspace.data(), ws);
    braid_tensor tctr = cpu_f32(counters.data(), counter_shape);
    ttab.dtype = tlen.dtype = tslot.dtype = tctr.dtype = {BRAID_DTYPE_INT, 32, 1};
    tpos.dtype = {BRAID_DTYPE_INT, 64, 1};
    if (joined) {
      ASSERT_EQ(braid_qk_norm_rope_kv_append_attention_decode(
                    &tq, &tk, &tv, nullptr, nullptr, 1e-6f, &tpos, &rope, &tslot, &tkc, &tvc, &ttab,
                    &tlen, 0.4f, &tout, nullptr, &tws, &tctr, nullptr),
                BRAID_OK)
          << last_error();
      // Counters past the bound: named, and nothing runs.
      std::vector<int64_t> none{0};
      braid_tensor few = cpu_f32(counters.data(), none);
      few.dtype = {BRAID_DTYPE_INT, 32, 1};
      EXPECT_EQ(braid_qk_norm_rope_kv_append_attention_decode(
                    &tq, &tk, &tv, nullptr, nullptr, 1e-6f, &tpos, &rope, &tslot, &tkc, &tvc, &ttab,
                    &tlen, 0.4f, &tout, nullptr, &tws, &few, nullptr),
                BRAID_ERR_SHAPE);
      expect_message_has({"qk_norm_rope_kv_append_attention_decode", "argument 'counters'"});
    } else {
      ASSERT_EQ(braid_rope_apply(&tq, &tk, &tpos, &rope, nullptr), BRAID_OK) << last_error();
      ASSERT_EQ(braid_kv_append(&tk, &tv, &tslot, &tkc, &tvc, nullptr), BRAID_OK) << last_error();
      ASSERT_EQ(braid_attention_decode(&tq, &tkc, &tvc, &ttab, &tlen, 0.4f, &tout, nullptr, &tws,
                                       nullptr),
                BRAID_OK)
          << last_error();
    }
  };
  std::vector<float> out_joined, k_joined, v_joined, out_ops, k_ops, v_ops;
  run(true, out_joined, k_joined, v_joined);
  run(false, out_ops, k_ops, v_ops);
  EXPECT_EQ(out_joined, out_ops);
  EXPECT_EQ(k_joined, k_ops);
  EXPECT_EQ(v_joined, v_ops);
  EXPECT_NE(k_joined, cache0);  // the new key went in
}

TEST(CApi, VersionAndDeviceCount) {
  const std::string v = braid_version();
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
  EXPECT_GE(braid_cuda_device_count(), 0);
}

TEST(CApi, RopeConfigDefaults) {
  braid_rope_config c;
  braid_rope_config_init(&c);
  EXPECT_EQ(c.theta, 10000.0f);
  EXPECT_EQ(c.rotary_dim, 0);
  EXPECT_EQ(c.scaling, BRAID_ROPE_NONE);
  EXPECT_EQ(c.original_max_position, 8192);
  EXPECT_EQ(c.truncate, 1);
}

}  // namespace
