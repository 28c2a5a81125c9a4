// moe_route_grouped: the reference against hand-worked cases (group selection, ties, NaN), CUDA
// against the reference on random inputs, and argument errors.
#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct Routed {
  std::vector<float> weights;
  std::vector<int32_t> ids;
};

// Runs the router on `device` with copies of the host logits and bias.
Routed route(const Tensor& logits, const Tensor& bias, int n_group, int topk_group, int k,
             float scale, Device device) {
  const int64_t tokens = logits.shape[0];
  auto l = to_device(logits, device), b = to_device(bias, device);
  auto w = poisoned(DType::f32, {tokens, k}, device);
  auto ids = poisoned(DType::i32, {tokens, k}, device);
  ops::moe_route_grouped(l, b, n_group, topk_group, k, scale, w, ids);
  Routed r{to_floats(w), {}};
  for (float v : to_floats(ids)) r.ids.push_back(static_cast<int32_t>(v));
  return r;
}

OwnedTensor host_tensor(DType dtype, std::vector<int64_t> shape, const std::vector<float>& values) {
  OwnedTensor t(dtype, shape, Device::cpu());
  for (size_t i = 0; i < values.size(); ++i) store_from_float(t.data(), dtype, static_cast<int64_t>(i), values[i]);
  return t;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::vector<int32_t> row(const std::vector<int32_t>& ids, int t, int k) {
  return std::vector<int32_t>(ids.begin() + t * k, ids.begin() + (t + 1) * k);
}

// ---------------------------------------------------------------------------------------------
// The reference, by hand.

// E = 8 in 4 groups of 2, keep 2 groups, k = 3. Sigmoid scores (bias 0 except expert 5):
//   group 0: s = .953 (x=3), .047 (x=-3)   score 1.000   dropped, yet holds the best expert
//   group 1: s = .622, .622 (x=0.5 twice)  score 1.245   kept
//   group 2: s = .731 (x=1), .269 (x=-1)   score 1.300   kept thanks to bias[5] = 0.3
//   group 3: s = .881 (x=2), .018 (x=-4)   score 0.899   dropped
// A global top-3 of b would be {0, 6, 4}; the grouped router takes 4, then 2 and 3 (a tie: the
// lower index first), and weighs them by their UNBIASED s.
TEST(MoeRouteGroupedReference, KeepsTheBestGroupsOnly) {
  const std::vector<float> x = {3, -3, 0.5f, 0.5f, 1, -1, 2, -4};
  auto logits = host_tensor(DType::f32, {1, 8}, x);
  for (float shift : {0.0f, -2.0f}) {
    // shift -2 makes every b negative: transformers' 0.0-filled dropped experts would then beat
    // the kept ones; here they stay excluded and the answer does not change.
    SCOPED_TRACE("bias shift " + std::to_string(shift));
    auto bias = host_tensor(DType::f32, {8}, {shift, shift, shift, shift, shift, 0.3f + shift, shift, shift});
    const Routed r = route(logits, bias, 4, 2, 3, 2.5f, Device::cpu());
    EXPECT_EQ(r.ids, (std::vector<int32_t>{4, 2, 3}));
    const double s4 = sigmoid(1), s2 = sigmoid(0.5), sum = s4 + 2 * s2;
    EXPECT_NEAR(r.weights[0], s4 / sum * 2.5, 1e-6);
    EXPECT_NEAR(r.weights[1], s2 / sum * 2.5, 1e-6);
    EXPECT_NEAR(r.weights[2], s2 / sum * 2.5, 1e-6);
  }
}

// Bias in bf16 (as DeepSeek-V3's checkpoints store it) and f16 logits give the same choice.
TEST(MoeRouteGroupedReference, Bf16BiasAndF16Logits) {
  auto logits = host_tensor(DType::f16, {1, 8}, {3, -3, 0.5f, 0.5f, 1, -1, 2, -4});
  auto bias = host_tensor(DType::bf16, {8}, {0, 0, 0, 0, 0, 0.3f, 0, 0});
  EXPECT_EQ(route(logits, bias, 4, 2, 3, 1.0f, Device::cpu()).ids, (std::vector<int32_t>{4, 2, 3}));
}

// Groups of one: the grouped router is a plain top-k of b (topk_group >= k).
TEST(MoeRouteGroupedReference, GroupsOfOneAreAGlobalTopK) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t tokens = 5, experts = 40;
  const int k = 6;
  auto logits = random_host(DType::f32, {tokens, experts}, seed, -4, 4);
  auto bias = random_host(DType::f32, {experts}, seed + 1, -0.5f, 0.5f);
  const Routed r = route(logits, bias, static_cast<int>(experts), 9, k, 1.0f, Device::cpu());
  for (int t = 0; t < tokens; ++t) {
    std::vector<double> b(experts);
    for (int e = 0; e < experts; ++e)
      b[e] = static_cast<float>(sigmoid(logits.view().ptr<float>()[t * experts + e])) +
             bias.view().ptr<float>()[e];
    std::vector<int32_t> order(experts);
    for (int e = 0; e < experts; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int p, int q) { return b[p] > b[q]; });
    order.resize(k);
    EXPECT_EQ(row(r.ids, t, k), order) << "token " << t;
  }
}

// E = 16 in 4 groups of 4, keep 2, k = 5, bias 0: ties between groups and between experts.
std::vector<float> tie_logits() {
  std::vector<float> x(3 * 16, 0.0f);                                // row 0: all equal
  for (int e = 8; e < 16; ++e) x[16 + e] = 1;                        // row 1: groups 2, 3 tie
  for (int e = 3; e < 16; e += 4) x[32 + e] = 2;                     // row 2: every group ties
  return x;
}
const std::vector<std::vector<int32_t>> kTieIds = {
    {0, 1, 2, 3, 4},     // groups 0, 1 kept; experts in index order
    {8, 9, 10, 11, 12},  // groups 2, 3 kept
    {3, 7, 0, 1, 2},     // groups 0, 1 kept; their two 2s, then the 0s in index order
};

TEST(MoeRouteGroupedReference, TiesGoToTheLowerIndex) {
  auto logits = host_tensor(DType::f32, {3, 16}, tie_logits());
  auto bias = host_tensor(DType::f32, {16}, std::vector<float>(16, 0.0f));
  const Routed r = route(logits, bias, 4, 2, 5, 1.0f, Device::cpu());
  for (int t = 0; t < 3; ++t) EXPECT_EQ(row(r.ids, t, 5), kTieIds[t]) << "token " << t;
  EXPECT_NEAR(r.weights[0], 0.2, 1e-6);  // five equal s
}

// NaN logits count as -inf: group 0 (two NaNs) ties with groups 2, 3 at -inf and wins them by
// index; its NaN experts come after every number. The ids stay k distinct experts of kept
// groups; weights that involve a NaN s are NaN.
const std::vector<float> kNanLogits = {NAN, NAN, 1, 0, NAN, 2, 0.5f, NAN,  // row 0
                                       NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
const std::vector<std::vector<int32_t>> kNanIds = {{2, 3, 0}, {0, 1, 2}};

TEST(MoeRouteGroupedReference, NaNRanksBelowEveryNumber) {
  auto logits = host_tensor(DType::f32, {2, 8}, kNanLogits);
  auto bias = host_tensor(DType::f32, {8}, std::vector<float>(8, 0.0f));
  const Routed r = route(logits, bias, 4, 2, 3, 1.0f, Device::cpu());
  for (int t = 0; t < 2; ++t) EXPECT_EQ(row(r.ids, t, 3), kNanIds[t]) << "token " << t;
  for (float w : r.weights) EXPECT_TRUE(std::isnan(w));
}

// ---------------------------------------------------------------------------------------------
// CUDA against the reference.

struct GroupedCase {
  DType logits_dtype, bias_dtype;
  int64_t tokens, experts;
  int n_group, topk_group, k;
  float scale;
};

std::string case_name(const GroupedCase& c) {
  return std::string(dtype_name(c.logits_dtype)) + "_bias" +
         std::string(dtype_name(c.bias_dtype)) + "_T" + std::to_string(c.tokens) + "_E" +
         std::to_string(c.experts) + "_g" + std::to_string(c.n_group) + "_top" +
         std::to_string(c.topk_group) + "_k" + std::to_string(c.k);
}
void PrintTo(const GroupedCase& c, std::ostream* os) { *os << case_name(c); }

// Every row: k distinct ids in [0, experts).
void expect_valid_ids(const std::vector<int32_t>& ids, int64_t tokens, int k, int64_t experts) {
  for (int64_t t = 0; t < tokens; ++t) {
    std::set<int32_t> seen;
    for (int j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      EXPECT_TRUE(e >= 0 && e < experts) << "token " << t << " j " << j << ": " << e;
      EXPECT_TRUE(seen.insert(e).second) << "token " << t << ": expert " << e << " twice";
    }
  }
}

class MoeRouteGroupedDiff : public ::testing::TestWithParam<GroupedCase> {};

TEST_P(MoeRouteGroupedDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Both sides compute s and b to the same bits (fp64 sigmoid, rounded once), so the ids agree
  // exactly, bf16's frequent exact ties included.
  auto logits = random_host(c.logits_dtype, {c.tokens, c.experts}, seed, -4, 4);
  auto bias = random_host(c.bias_dtype, {c.experts}, seed + 1, -0.5f, 0.5f);
  const Routed ref = route(logits, bias, c.n_group, c.topk_group, c.k, c.scale, Device::cpu());
  const Routed got = route(logits, bias, c.n_group, c.topk_group, c.k, c.scale, Device::cuda());
  expect_valid_ids(ref.ids, c.tokens, c.k, c.experts);
  EXPECT_EQ(got.ids, ref.ids);
  EXPECT_LE(rel_error(got.weights, ref.weights), tolerance(DType::f32));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeRouteGroupedDiff,
    ::testing::Values(
        // DeepSeek-V3: 256 experts, 8 groups, top-4 groups, k = 8, scale 2.5.
        GroupedCase{DType::bf16, DType::bf16, 1, 256, 8, 4, 8, 2.5f},
        GroupedCase{DType::bf16, DType::f32, 7, 256, 8, 4, 8, 2.5f},
        GroupedCase{DType::f32, DType::bf16, 1024, 256, 8, 4, 8, 2.5f},
        GroupedCase{DType::bf16, DType::bf16, 1024, 256, 8, 4, 8, 2.5f},
        GroupedCase{DType::f32, DType::bf16, 1027, 256, 8, 4, 8, 2.5f},  // 4 tokens a block, + 3
        GroupedCase{DType::f32, DType::f32, 513, 512, 8, 4, 16, 1.5f},   // the same at the limits
        GroupedCase{DType::f32, DType::f32, 7, 96, 6, 3, 8, 1.0f},     // not powers of two
        GroupedCase{DType::bf16, DType::f32, 7, 24, 3, 2, 5, 1.0f},
        GroupedCase{DType::f16, DType::f32, 7, 24, 3, 1, 8, 1.0f},     // k = the kept experts
        GroupedCase{DType::f32, DType::f32, 7, 512, 8, 4, 16, 1.5f},   // the limits
        GroupedCase{DType::bf16, DType::bf16, 1024, 160, 8, 3, 16, 1.0f},
        GroupedCase{DType::f32, DType::bf16, 7, 384, 1, 1, 8, 2.827f}, // one group (Kimi-K2)
        GroupedCase{DType::f32, DType::f32, 7, 32, 32, 4, 4, 1.0f},    // groups of one
        GroupedCase{DType::bf16, DType::f32, 7, 128, 64, 20, 16, 1.0f},// > 32 groups
        GroupedCase{DType::f32, DType::f32, 1, 8, 4, 2, 3, 1.0f}),
    [](const auto& info) { return case_name(info.param); });

TEST(MoeRouteGroupedCuda, Ties) {
  BRAID_REQUIRE_CUDA();
  auto logits = host_tensor(DType::f32, {3, 16}, tie_logits());
  auto bias = host_tensor(DType::f32, {16}, std::vector<float>(16, 0.0f));
  const Routed r = route(logits, bias, 4, 2, 5, 1.0f, Device::cuda());
  for (int t = 0; t < 3; ++t) EXPECT_EQ(row(r.ids, t, 5), kTieIds[t]) << "token " << t;

  // DeepSeek's shape with three logit values and no bias: ties everywhere, same ids as the CPU.
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto coarse = random_host(DType::i32, {64, 256}, seed, -1, 2);
  std::vector<float> values = to_floats(coarse);
  auto few_values = host_tensor(DType::bf16, {64, 256}, values);
  auto zero_bias = host_tensor(DType::bf16, {256}, std::vector<float>(256, 0.0f));
  const Routed ref = route(few_values, zero_bias, 8, 4, 8, 2.5f, Device::cpu());
  const Routed got = route(few_values, zero_bias, 8, 4, 8, 2.5f, Device::cuda());
  EXPECT_EQ(got.ids, ref.ids);
  EXPECT_LE(rel_error(got.weights, ref.weights), tolerance(DType::f32));
}

TEST(MoeRouteGroupedCuda, NaN) {
  BRAID_REQUIRE_CUDA();
  auto logits = host_tensor(DType::f32, {2, 8}, kNanLogits);
  auto bias = host_tensor(DType::f32, {8}, std::vector<float>(8, 0.0f));
  const Routed r = route(logits, bias, 4, 2, 3, 1.0f, Device::cuda());
  for (int t = 0; t < 2; ++t) EXPECT_EQ(row(r.ids, t, 3), kNanIds[t]) << "token " << t;
  for (float w : r.weights) EXPECT_TRUE(std::isnan(w));
}

TEST(MoeRouteGroupedCuda, StridedLogitRows) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto wide = random_host(DType::bf16, {9, 264}, seed, -4, 4);
  auto bias = random_host(DType::f32, {256}, seed + 1, -0.5f, 0.5f);
  auto dwide = to_device(wide, Device::cuda());
  Tensor logits = dwide.view();
  logits.shape[1] = 256;  // rows of 256 at a row stride of 264
  auto dbias = to_device(bias, Device::cuda());
  auto w = poisoned(DType::f32, {9, 8}, Device::cuda());
  auto ids = poisoned(DType::i32, {9, 8}, Device::cuda());
  ops::moe_route_grouped(logits, dbias, 8, 4, 8, 2.5f, w, ids);

  Tensor host_rows = wide.view();
  host_rows.shape[1] = 256;
  auto ref_w = poisoned(DType::f32, {9, 8}, Device::cpu());
  OwnedTensor ref_ids(DType::i32, {9, 8}, Device::cpu());
  ops::moe_route_grouped(host_rows, bias, 8, 4, 8, 2.5f, ref_w, ref_ids);
  EXPECT_EQ(to_floats(ids), to_floats(ref_ids));
  EXPECT_LE(rel_error(to_floats(w), to_floats(ref_w)), tolerance(DType::f32));
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST(MoeRouteGroupedErrors, NameTheArgument) {
  const char* op = "moe_route_grouped";
  auto cpu = Device::cpu();
  OwnedTensor logits(DType::bf16, {3, 8}, cpu), bias(DType::f32, {8}, cpu),
      w(DType::f32, {3, 3}, cpu), ids(DType::i32, {3, 3}, cpu);
  fill_bytes(logits.view(), 0);
  fill_bytes(bias.view(), 0);
  auto run = [&](const Tensor& l, const Tensor& b, int n_group, int topk_group, int k,
                 const Tensor& ww, const Tensor& ii, float scale = 1.0f) {
    ops::moe_route_grouped(l, b, n_group, topk_group, k, scale, ww, ii);
  };
  EXPECT_NO_THROW(run(logits, bias, 4, 2, 3, w, ids));

  OwnedTensor logits_i32(DType::i32, {3, 8}, cpu), logits_1d(DType::bf16, {8}, cpu);
  expect_error([&] { run(logits_i32, bias, 4, 2, 3, w, ids); }, ErrorKind::dtype, {op, "'logits'", "i32"});
  expect_error([&] { run(logits_1d, bias, 4, 2, 3, w, ids); }, ErrorKind::shape, {op, "'logits'", "2 dimensions"});
  OwnedTensor logits_big(DType::f32, {3, 520}, cpu), bias_big(DType::f32, {520}, cpu);
  expect_error([&] { run(logits_big, bias_big, 4, 2, 3, w, ids); }, ErrorKind::shape,
               {op, "'logits'", "between 1 and 512 experts", "[3, 520]"});

  OwnedTensor bias_f16(DType::f16, {8}, cpu), bias_short(DType::f32, {7}, cpu),
      bias_2d(DType::f32, {1, 8}, cpu);
  expect_error([&] { run(logits, bias_f16, 4, 2, 3, w, ids); }, ErrorKind::dtype,
               {op, "'bias'", "f32 or bf16", "f16"});
  expect_error([&] { run(logits, bias_short, 4, 2, 3, w, ids); }, ErrorKind::shape, {op, "'bias'", "[8]", "[7]"});
  expect_error([&] { run(logits, bias_2d, 4, 2, 3, w, ids); }, ErrorKind::shape, {op, "'bias'"});
  OwnedTensor bias_wide(DType::f32, {8, 2}, cpu);
  Tensor bias_strided = bias_wide.view();
  bias_strided.ndim = 1;
  bias_strided.strides[0] = 2;  // every other float
  expect_error([&] { run(logits, bias_strided, 4, 2, 3, w, ids); }, ErrorKind::shape,
               {op, "'bias'", "contiguous"});

  expect_error([&] { run(logits, bias, 3, 2, 3, w, ids); }, ErrorKind::invalid_argument,
               {op, "'n_group'", "divisor of the number of experts (8)", "got 3"});
  expect_error([&] { run(logits, bias, 0, 1, 3, w, ids); }, ErrorKind::invalid_argument, {op, "'n_group'", "got 0"});
  expect_error([&] { run(logits, bias, 4, 0, 3, w, ids); }, ErrorKind::invalid_argument,
               {op, "'topk_group'", "n_group = 4", "got 0"});
  expect_error([&] { run(logits, bias, 4, 5, 3, w, ids); }, ErrorKind::invalid_argument,
               {op, "'topk_group'", "n_group = 4", "got 5"});
  expect_error([&] { run(logits, bias, 4, 2, 0, w, ids); }, ErrorKind::invalid_argument, {op, "'k'", "= 4", "got 0"});
  OwnedTensor w5(DType::f32, {3, 5}, cpu), ids5(DType::i32, {3, 5}, cpu);
  expect_error([&] { run(logits, bias, 4, 2, 5, w5, ids5); }, ErrorKind::invalid_argument,
               {op, "'k'", "topk_group * experts / n_group) = 4", "got 5"});
  OwnedTensor logits64(DType::f32, {3, 64}, cpu), bias64(DType::f32, {64}, cpu);
  OwnedTensor w17(DType::f32, {3, 17}, cpu), ids17(DType::i32, {3, 17}, cpu);
  expect_error([&] { run(logits64, bias64, 2, 2, 17, w17, ids17); }, ErrorKind::invalid_argument,
               {op, "'k'", "min(16, topk_group * experts / n_group) = 16", "got 17"});
  expect_error([&] { run(logits, bias, 4, 2, 3, w, ids, NAN); }, ErrorKind::invalid_argument,
               {op, "'routed_scaling_factor'", "finite"});
  expect_error([&] { run(logits, bias, 4, 2, 3, w, ids, INFINITY); }, ErrorKind::invalid_argument,
               {op, "'routed_scaling_factor'", "finite"});

  OwnedTensor w_bf16(DType::bf16, {3, 3}, cpu), w_bad(DType::f32, {3, 2}, cpu);
  OwnedTensor ids_i64(DType::i64, {3, 3}, cpu), ids_bad(DType::i32, {2, 3}, cpu);
  expect_error([&] { run(logits, bias, 4, 2, 3, w_bf16, ids); }, ErrorKind::dtype, {op, "'topk_weights'", "f32", "bf16"});
  expect_error([&] { run(logits, bias, 4, 2, 3, w_bad, ids); }, ErrorKind::shape, {op, "'topk_weights'", "[3, 3]", "[3, 2]"});
  expect_error([&] { run(logits, bias, 4, 2, 3, w, ids_i64); }, ErrorKind::dtype, {op, "'topk_ids'", "i32", "i64"});
  expect_error([&] { run(logits, bias, 4, 2, 3, w, ids_bad); }, ErrorKind::shape, {op, "'topk_ids'", "[3, 3]", "[2, 3]"});
  Tensor bias_cuda = fake_cuda(DType::f32, {8});
  expect_error([&] { run(logits, bias_cuda, 4, 2, 3, w, ids); }, ErrorKind::device, {op, "'bias'", "cpu", "cuda:0"});
  Tensor ids_cuda = fake_cuda(DType::i32, {3, 3});
  expect_error([&] { run(logits, bias, 4, 2, 3, w, ids_cuda); }, ErrorKind::device, {op, "'topk_ids'", "cpu", "cuda:0"});
}

}  // namespace
}  // namespace braid::test
