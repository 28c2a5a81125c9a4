// rope_apply and rope_table: CUDA against the CPU reference on q/k views of a packed QKV buffer,
// the frequency tables against an independent computation, the rotation against hand-worked
// values, and argument errors.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <valarray>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

using ops::RopeConfig;
using ops::RopeScaling;

RopeConfig llama3_config() {
  RopeConfig c;
  c.theta = 500000.0f;
  c.scaling = RopeScaling::llama3;
  c.factor = 8.0f;
  c.low_freq_factor = 1.0f;
  c.high_freq_factor = 4.0f;
  c.original_max_position = 8192;
  return c;
}

RopeConfig yarn_config() {
  RopeConfig c;
  c.theta = 1000000.0f;
  c.scaling = RopeScaling::yarn;
  c.factor = 4.0f;
  c.original_max_position = 32768;
  return c;
}

RopeConfig config_for(RopeScaling s, int rotary_dim) {
  RopeConfig c = s == RopeScaling::llama3 ? llama3_config()
                 : s == RopeScaling::yarn ? yarn_config()
                                          : RopeConfig{};
  c.rotary_dim = rotary_dim;
  return c;
}

const char* scaling_name(RopeScaling s) {
  return s == RopeScaling::llama3 ? "llama3" : s == RopeScaling::yarn ? "yarn" : "default";
}

// q, k and v as head views of one packed [n, (q_heads + 2 kv_heads) * head_dim] buffer, the
// layout a fused QKV projection writes.
struct QkvViews {
  Tensor q, k, v;
};

QkvViews split_qkv(const Tensor& packed, int64_t q_heads, int64_t kv_heads, int64_t head_dim) {
  const int64_t n = packed.size(0), heads = q_heads + 2 * kv_heads;
  Tensor h = packed.reshape({n, heads, head_dim});
  return {h.slice(1, 0, q_heads), h.slice(1, q_heads, q_heads + kv_heads),
          h.slice(1, q_heads + kv_heads, heads)};
}

// Positions in [0, 131072), in no particular order.
OwnedTensor random_positions(DType dtype, int64_t n, uint64_t seed) {
  return random_host(dtype, {n}, seed, 0, 131072);
}

// ---------------------------------------------------------------------------------------------
// CUDA against the CPU reference.

struct RopeCase {
  DType dtype;
  int64_t n, q_heads, kv_heads, head_dim;  // kv_heads 0: k undefined (q only)
  int rotary_dim;                          // 0: head_dim
  RopeScaling scaling;
  DType pos_dtype;
};

std::string case_name(const RopeCase& p) {
  std::string name = std::string(dtype_name(p.dtype)) + "_n" + std::to_string(p.n) + "_q" +
                     std::to_string(p.q_heads) + "k" + std::to_string(p.kv_heads) + "_d" +
                     std::to_string(p.head_dim);
  if (p.rotary_dim) name += "_rot" + std::to_string(p.rotary_dim);
  return name + "_" + scaling_name(p.scaling) + "_pos" + std::string(dtype_name(p.pos_dtype));
}
void PrintTo(const RopeCase& p, std::ostream* os) { *os << case_name(p); }

class RopeDiff : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t width = (c.q_heads + 2 * c.kv_heads) * c.head_dim;
  auto packed = random_host(c.dtype, {c.n, width}, seed, -2, 2);
  auto original = to_device(packed, Device::cpu());  // untouched copy (to_device copies)
  auto pos = random_positions(c.pos_dtype, c.n, seed + 1);
  const RopeConfig config = config_for(c.scaling, c.rotary_dim);

  auto d_packed = to_device(packed, Device::cuda());
  auto d_pos = to_device(pos, Device::cuda());

  auto host = split_qkv(packed, c.q_heads, c.kv_heads, c.head_dim);
  auto dev = split_qkv(d_packed, c.q_heads, c.kv_heads, c.head_dim);
  ops::rope_apply(host.q, c.kv_heads ? host.k : Tensor{}, pos, config);
  ops::rope_apply(dev.q, c.kv_heads ? dev.k : Tensor{}, d_pos, config);

  const auto got = to_floats(d_packed), ref = to_floats(packed), before = to_floats(original);
  EXPECT_LE(rel_error(got, ref), tolerance(c.dtype));
  EXPECT_NE(ref, before) << "the reference rotated nothing";
  // V (the last kv_heads heads of each token) must come out bit-identical.
  const int64_t v_begin = (c.q_heads + c.kv_heads) * c.head_dim;
  for (int64_t t = 0; t < c.n; ++t)
    for (int64_t j = v_begin; j < width; ++j) {
      const size_t i = static_cast<size_t>(t * width + j);
      ASSERT_EQ(float_bits(got[i]), float_bits(before[i])) << "V changed at token " << t;
    }
}

TEST_P(RopeDiff, Int32AndInt64PositionsAgreeOnCuda) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto q = random_host(c.dtype, {c.n, c.q_heads, c.head_dim}, seed);
  auto pos64 = random_positions(DType::i64, c.n, seed + 1);
  OwnedTensor pos32(DType::i32, {c.n}, Device::cpu());
  for (int64_t i = 0; i < c.n; ++i)
    pos32.view().ptr<int32_t>()[i] = static_cast<int32_t>(pos64.view().ptr<int64_t>()[i]);
  auto qa = to_device(q, Device::cuda()), qb = to_device(q, Device::cuda());
  const RopeConfig config = config_for(c.scaling, c.rotary_dim);
  ops::rope_apply(qa, Tensor{}, to_device(pos64, Device::cuda()), config);
  ops::rope_apply(qb, Tensor{}, to_device(pos32, Device::cuda()), config);
  EXPECT_EQ(to_floats(qa), to_floats(qb));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RopeDiff,
    ::testing::Values(
        RopeCase{DType::bf16, 1, 32, 8, 128, 0, RopeScaling::none, DType::i64},      // decode
        RopeCase{DType::bf16, 37, 7, 1, 64, 0, RopeScaling::llama3, DType::i32},     // GQA 7:1
        RopeCase{DType::f32, 5, 4, 2, 256, 0, RopeScaling::yarn, DType::i64},
        RopeCase{DType::f16, 19, 14, 2, 128, 64, RopeScaling::none, DType::i32},     // partial
        RopeCase{DType::bf16, 129, 28, 4, 128, 0, RopeScaling::yarn, DType::i32},    // GQA 7:1
        RopeCase{DType::f32, 3, 7, 1, 96, 24, RopeScaling::llama3, DType::i64},      // scalar path
        RopeCase{DType::bf16, 11, 8, 0, 64, 0, RopeScaling::none, DType::i32},       // q only
        RopeCase{DType::bf16, 1, 16, 2, 256, 0, RopeScaling::llama3, DType::i64},
        RopeCase{DType::f32, 33, 7, 1, 128, 0, RopeScaling::none, DType::i32},
        RopeCase{DType::bf16, 7, 12, 2, 128, 64, RopeScaling::yarn, DType::i64}),    // partial
    [](const auto& info) { return case_name(info.param); });

// ---------------------------------------------------------------------------------------------
// Frequency tables against a straightforward computation over all indices at once.

std::valarray<double> pair_indices(int half) {
  std::valarray<double> i(static_cast<size_t>(half));
  for (int j = 0; j < half; ++j) i[static_cast<size_t>(j)] = j;
  return i;
}

void expect_table(const ops::RopeTable& t, const std::valarray<double>& expected) {
  ASSERT_EQ(static_cast<size_t>(t.half), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(t.inv_freq[i], expected[i], 2e-7 * expected[i]) << "pair " << i;
  for (int i = t.half; i < ops::kMaxRotaryHalf; ++i) EXPECT_EQ(t.inv_freq[i], 0.0f);
}

TEST(RopeTable, DefaultUsesRotaryDimInTheExponent) {
  RopeConfig c;
  c.theta = 10000.0f;
  c.rotary_dim = 64;  // of a 128-wide head: exponents are 2i/64
  auto t = ops::rope_table(c, 128);
  std::valarray<double> i = pair_indices(32);
  expect_table(t, std::pow(10000.0, -i / 32.0));
  EXPECT_EQ(t.attention_scaling, 1.0f);
}

TEST(RopeTable, Llama3MatchesClampedSmoothing) {
  auto t = ops::rope_table(llama3_config(), 128);
  const double factor = 8, low = 1, high = 4, orig = 8192;
  std::valarray<double> base = std::pow(500000.0, -pair_indices(64) / 64.0);
  // The three bands are one formula with the smoothing weight clamped to [0, 1]: weight 0 below
  // the low-frequency wavelength (divide by factor), 1 above the high one (keep).
  std::valarray<double> weight = (orig * base / (2 * std::numbers::pi) - low) / (high - low);
  weight = weight.apply([](double w) { return std::clamp(w, 0.0, 1.0); });
  expect_table(t, base * ((1.0 - weight) / factor + weight));
  EXPECT_EQ(t.attention_scaling, 1.0f);
  EXPECT_EQ(t.inv_freq[0], 1.0f);                                        // fastest: kept
  EXPECT_FLOAT_EQ(t.inv_freq[63], static_cast<float>(base[63] / factor));  // slowest: divided
  // This config has pairs in every band; make sure the test exercised the smoothing.
  int smoothed = 0;
  for (double w : weight) smoothed += w > 0.0 && w < 1.0;
  EXPECT_GT(smoothed, 0);
}

std::valarray<double> yarn_expected(double theta, double factor, double orig, double beta_fast,
                                    double beta_slow, int dim, bool truncate) {
  const double two_pi = 2 * std::numbers::pi;
  // Pair index whose wavelength fits `turns` times into the original context.
  auto pair_for_turns = [&](double turns) {
    return dim / 2.0 * std::log(orig / two_pi / turns) / std::log(theta);
  };
  double lo = pair_for_turns(beta_fast), hi = pair_for_turns(beta_slow);
  if (truncate) lo = std::floor(lo), hi = std::ceil(hi);
  lo = std::max(0.0, lo);
  hi = std::min(dim - 1.0, hi);
  std::valarray<double> i = pair_indices(dim / 2);
  std::valarray<double> ramp = ((i - lo) / (hi - lo)).apply([](double r) {
    return std::clamp(r, 0.0, 1.0);
  });
  std::valarray<double> extrapolated = std::pow(theta, -2.0 * i / static_cast<double>(dim));
  return extrapolated * (1.0 - ramp) + extrapolated / factor * ramp;
}

TEST(RopeTable, YarnMatchesRampBlend) {
  RopeConfig c;
  c.theta = 10000.0f;
  c.scaling = RopeScaling::yarn;
  c.factor = 4.0f;
  c.original_max_position = 4096;
  c.beta_fast = 32.0f;
  c.beta_slow = 1.0f;
  auto t = ops::rope_table(c, 64);
  expect_table(t, yarn_expected(10000, 4, 4096, 32, 1, 64, true));
  // By hand: the ramp runs from pair 10 (floor 10.47) to pair 23 (ceil 22.51).
  EXPECT_FLOAT_EQ(t.inv_freq[10], static_cast<float>(std::pow(10000.0, -20.0 / 64)));
  EXPECT_FLOAT_EQ(t.inv_freq[23], static_cast<float>(std::pow(10000.0, -46.0 / 64) / 4));
  EXPECT_NE(t.inv_freq[11], static_cast<float>(std::pow(10000.0, -22.0 / 64)));
  EXPECT_NEAR(t.attention_scaling, 0.1 * std::log(4.0) + 1.0, 1e-7);

  c.truncate = false;
  expect_table(ops::rope_table(c, 64), yarn_expected(10000, 4, 4096, 32, 1, 64, false));
}

TEST(RopeTable, YarnAttentionFactor) {
  RopeConfig c = yarn_config();
  c.mscale = 1.0f;
  c.mscale_all_dim = 1.0f;  // both set: their ratio, here 1
  EXPECT_FLOAT_EQ(ops::rope_table(c, 128).attention_scaling, 1.0f);
  c.mscale = 0.707f;  // only one set: get_mscale(factor)
  c.mscale_all_dim = 0.0f;
  EXPECT_NEAR(ops::rope_table(c, 128).attention_scaling, 0.1 * std::log(4.0) + 1.0, 1e-7);
  c.mscale = 2.0f;
  c.mscale_all_dim = 1.0f;
  EXPECT_NEAR(ops::rope_table(c, 128).attention_scaling,
              (0.2 * std::log(4.0) + 1.0) / (0.1 * std::log(4.0) + 1.0), 1e-7);
  c.attention_factor = 0.5f;  // given explicitly: used as is
  EXPECT_EQ(ops::rope_table(c, 128).attention_scaling, 0.5f);
  c.attention_factor = 0.0f;
  c.mscale = c.mscale_all_dim = 0.0f;
  c.factor = 1.0f;  // no stretch: no scaling
  EXPECT_EQ(ops::rope_table(c, 128).attention_scaling, 1.0f);
}

// ---------------------------------------------------------------------------------------------
// The rotation on the CPU, against hand-worked values.

TEST(RopeReference, HandWorkedRotation) {
  // head_dim 4, theta 10000: inv_freq = {1, 10000^-0.5 = 0.01}; pairs are (0, 2) and (1, 3).
  float q_data[2][4] = {{1, 0, 0, 0}, {0, 1, 0, 0}};
  Tensor q(q_data, DType::f32, Device::cpu(), {2, 1, 4});
  int64_t pos_data[2] = {1, 1};
  Tensor pos(pos_data, DType::i64, Device::cpu(), {2});
  ops::rope_apply(q, Tensor{}, pos, RopeConfig{});
  // (1, 0) in pair 0 turns by 1 radian: (cos 1, sin 1).
  EXPECT_NEAR(q_data[0][0], 0.5403023058681398, 1e-7);
  EXPECT_EQ(q_data[0][1], 0.0f);
  EXPECT_NEAR(q_data[0][2], 0.8414709848078965, 1e-7);
  EXPECT_EQ(q_data[0][3], 0.0f);
  // (1, 0) in pair 1 turns by 0.01 radian.
  EXPECT_EQ(q_data[1][0], 0.0f);
  EXPECT_NEAR(q_data[1][1], 0.9999500004166653, 1e-7);
  EXPECT_EQ(q_data[1][2], 0.0f);
  EXPECT_NEAR(q_data[1][3], 0.009999833334166664, 1e-8);
}

TEST(RopeReference, HeadDimTwoTurnsByPosition) {
  // head_dim 2 has one pair with inv_freq 1: position p turns (x, y) by p radians.
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto q = random_host(DType::f32, {5, 3, 2}, seed);
  auto before = to_floats(q);
  int32_t pos_data[5] = {7, 0, 3, 100, 2};
  Tensor pos(pos_data, DType::i32, Device::cpu(), {5});
  ops::rope_apply(q, Tensor{}, pos, RopeConfig{});
  auto after = to_floats(q);
  for (int t = 0; t < 5; ++t)
    for (int h = 0; h < 3; ++h) {
      const size_t i = static_cast<size_t>((t * 3 + h) * 2);
      const double x = before[i], y = before[i + 1], f = pos_data[t];
      EXPECT_NEAR(after[i], x * std::cos(f) - y * std::sin(f), 1e-6);
      EXPECT_NEAR(after[i + 1], y * std::cos(f) + x * std::sin(f), 1e-6);
    }
}

TEST(RopeReference, PositionZeroIsIdentityAndScalingMultiplies) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType dt : {DType::f32, DType::bf16}) {
    auto q = random_host(dt, {3, 4, 128}, seed);
    auto before = to_floats(q);
    OwnedTensor pos(DType::i64, {3}, Device::cpu());
    std::fill_n(pos.view().ptr<int64_t>(), 3, 0);
    ops::rope_apply(q, Tensor{}, pos, llama3_config());
    EXPECT_EQ(to_floats(q), before) << dtype_name(dt);
  }
  // YaRN's attention factor multiplies cos and sin: at position 0 the rotated dims double.
  auto q = random_host(DType::f32, {2, 1, 16}, seed);
  auto before = to_floats(q);
  OwnedTensor pos(DType::i32, {2}, Device::cpu());
  std::fill_n(pos.view().ptr<int32_t>(), 2, 0);
  RopeConfig c = yarn_config();
  c.attention_factor = 2.0f;
  c.rotary_dim = 8;
  ops::rope_apply(q, Tensor{}, pos, c);
  auto after = to_floats(q);
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_EQ(after[i], i % 16 < 8 ? 2 * before[i] : before[i]) << "element " << i;
}

TEST(RopeReference, PartialRotaryLeavesTailUnchanged) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto q = random_host(DType::bf16, {4, 2, 128}, seed);
  auto before = to_floats(q);
  auto pos = random_positions(DType::i32, 4, seed + 1);
  RopeConfig c;
  c.rotary_dim = 64;
  ops::rope_apply(q, Tensor{}, pos, c);
  auto after = to_floats(q);
  int changed = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    if (i % 128 >= 64) EXPECT_EQ(after[i], before[i]) << "element " << i;
    else changed += after[i] != before[i];
  }
  EXPECT_GT(changed, 400);
}

TEST(RopeReference, PackedViewsMatchContiguousCopies) {
  // Rotating q and k as strided views of a packed QKV buffer must equal rotating contiguous
  // copies, and leave V alone.
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t n = 9, qh = 7, kvh = 1, hd = 64;
  auto packed = random_host(DType::bf16, {n, (qh + 2 * kvh) * hd}, seed);
  auto q = random_host(DType::bf16, {n, qh, hd}, 0), k = random_host(DType::bf16, {n, kvh, hd}, 0);
  auto views = split_qkv(packed, qh, kvh, hd);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < qh; ++h)
      for (int64_t j = 0; j < hd; ++j)
        store_from_float(q.data(), DType::bf16, (t * qh + h) * hd + j,
                         load_as_float(views.q.data, DType::bf16, t * views.q.strides[0] + h * hd + j));
    for (int64_t j = 0; j < hd; ++j)
      store_from_float(k.data(), DType::bf16, t * hd + j,
                       load_as_float(views.k.data, DType::bf16, t * views.k.strides[0] + j));
  }
  const auto v_before = to_floats(views.v);
  auto pos = random_positions(DType::i64, n, seed + 1);
  ops::rope_apply(views.q, views.k, pos, yarn_config());
  ops::rope_apply(q, k, pos, yarn_config());
  EXPECT_EQ(to_floats(views.q), to_floats(q));
  EXPECT_EQ(to_floats(views.k), to_floats(k));
  EXPECT_EQ(to_floats(views.v), v_before);
}

// ---------------------------------------------------------------------------------------------
// Argument errors.

TEST(RopeErrors, NameTheArgument) {
  OwnedTensor q(DType::bf16, {4, 8, 64}, Device::cpu()), k(DType::bf16, {4, 2, 64}, Device::cpu());
  OwnedTensor pos(DType::i32, {4}, Device::cpu());
  const RopeConfig c;
  auto call = [&](const Tensor& q_, const Tensor& k_, const Tensor& p_, const RopeConfig& c_) {
    return [=] { ops::rope_apply(q_, k_, p_, c_); };
  };
  OwnedTensor q_i32(DType::i32, {4, 8, 64}, Device::cpu()), q_2d(DType::bf16, {4, 512}, Device::cpu());
  OwnedTensor q_odd(DType::bf16, {4, 8, 63}, Device::cpu());
  OwnedTensor k_f32(DType::f32, {4, 2, 64}, Device::cpu()), k_hd(DType::bf16, {4, 2, 32}, Device::cpu());
  OwnedTensor k_n(DType::bf16, {5, 2, 64}, Device::cpu());
  OwnedTensor pos_f32(DType::f32, {4}, Device::cpu()), pos_n(DType::i64, {3}, Device::cpu());
  OwnedTensor wide(DType::bf16, {4, 8, 128}, Device::cpu());
  Tensor q_strided = wide.view();
  q_strided.shape[2] = 64;
  q_strided.strides[2] = 2;
  expect_error(call(q_i32, k, pos, c), ErrorKind::dtype, {"rope_apply", "'q'", "i32"});
  expect_error(call(q_2d, k, pos, c), ErrorKind::shape, {"'q'", "3 dimensions"});
  expect_error(call(q_odd, Tensor{}, pos, c), ErrorKind::shape, {"'q'", "even", "[4, 8, 63]"});
  expect_error(call(q_strided, k, pos, c), ErrorKind::shape, {"'q'", "stride"});
  expect_error(call(q, k_f32, pos, c), ErrorKind::dtype, {"'k'", "bf16", "f32"});
  expect_error(call(q, k_hd, pos, c), ErrorKind::shape, {"'k'", "[4, *, 64]", "[4, 2, 32]"});
  expect_error(call(q, k_n, pos, c), ErrorKind::shape, {"'k'", "[5, 2, 64]"});
  expect_error(call(q, k, pos_f32, c), ErrorKind::dtype, {"'positions'", "i32 or i64", "f32"});
  expect_error(call(q, k, pos_n, c), ErrorKind::shape, {"'positions'", "[4]", "[3]"});
  Tensor pos_cuda = fake_cuda(DType::i32, {4});
  expect_error(call(q, k, pos_cuda, c), ErrorKind::device, {"'positions'", "cpu", "cuda:0"});
  Tensor k_cuda = fake_cuda(DType::bf16, {4, 2, 64});
  expect_error(call(q, k_cuda, pos, c), ErrorKind::device, {"'k'", "cuda:0"});
}

TEST(RopeErrors, NameTheConfigField) {
  auto expect_config_error = [](RopeConfig c, int head_dim, const char* field,
                                std::vector<std::string> more = {}) {
    more.insert(more.begin(), {"rope_apply", std::string("'") + field + "'"});
    expect_error([&] { ops::rope_table(c, head_dim); }, ErrorKind::invalid_argument, more);
  };
  RopeConfig c;
  c.theta = 0.0f;
  expect_config_error(c, 128, "config.theta", {"theta > 0"});
  c = RopeConfig{};
  c.rotary_dim = 63;
  expect_config_error(c, 128, "config.rotary_dim", {"even", "63"});
  c.rotary_dim = 130;
  expect_config_error(c, 128, "config.rotary_dim", {"<= head_dim (128)", "130"});
  c.rotary_dim = -2;
  expect_config_error(c, 128, "config.rotary_dim");
  c.rotary_dim = 0;  // the whole head: 1024 > 2 * kMaxRotaryHalf
  expect_config_error(c, 1024, "config.rotary_dim", {"at most 512", "1024"});
  c = llama3_config();
  c.factor = 0.0f;
  expect_config_error(c, 128, "config.factor", {"factor > 0"});
  c = llama3_config();
  c.high_freq_factor = c.low_freq_factor;
  expect_config_error(c, 128, "config.high_freq_factor", {"low_freq_factor"});
  c = llama3_config();
  c.original_max_position = 0;
  expect_config_error(c, 128, "config.original_max_position");
  c = yarn_config();
  c.factor = -1.0f;
  expect_config_error(c, 128, "config.factor");
  c = yarn_config();
  c.beta_slow = 0.0f;
  expect_config_error(c, 128, "config.beta_slow");
  c = yarn_config();
  c.theta = 1.0f;
  expect_config_error(c, 128, "config.theta");
  c = yarn_config();
  c.attention_factor = -1.0f;
  expect_config_error(c, 128, "config.attention_factor");

  // Through rope_apply too, before anything is touched.
  OwnedTensor q(DType::f32, {2, 2, 64}, Device::cpu()), pos(DType::i32, {2}, Device::cpu());
  RopeConfig bad;
  bad.rotary_dim = 66;
  expect_error([&] { ops::rope_apply(q, Tensor{}, pos, bad); }, ErrorKind::invalid_argument,
               {"rope_apply", "'config.rotary_dim'", "66"});
}

}  // namespace
}  // namespace braid::test
