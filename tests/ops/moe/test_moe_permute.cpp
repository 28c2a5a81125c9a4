// moe_permute, moe_gather, moe_combine: the reference against a hand-worked case (and with
// kMoeNotLocal ids), CUDA against the reference (exact, several chunks, skewed and
// non-power-of-two expert counts, invalid ids on CUDA), a permute -> gather -> combine round
// trip, and argument errors.
#include <algorithm>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct Permuted {
  OwnedTensor offsets, sorted_pairs, pair_rows;
};

Permuted permute(const Tensor& ids, int experts, Device device) {
  const int64_t pairs = ids.numel();
  Permuted p{poisoned(DType::i32, {experts + 1}, device), poisoned(DType::i32, {pairs}, device),
             poisoned(DType::i32, {pairs}, device)};
  OwnedTensor workspace(DType::i32, {ops::moe_permute_workspace_size(pairs, experts)}, device);
  ops::moe_permute(ids, experts, p.offsets, p.sorted_pairs, p.pair_rows, workspace);
  return p;
}

std::vector<int> ints(const Tensor& t) {
  const std::vector<float> f = to_floats(t);
  return std::vector<int>(f.begin(), f.end());
}

OwnedTensor ids_tensor(const std::vector<int32_t>& values, int64_t tokens, int64_t k) {
  OwnedTensor t(DType::i32, {tokens, k}, Device::cpu());
  std::copy(values.begin(), values.end(), t.view().ptr<int32_t>());
  return t;
}

OwnedTensor int_vector(const std::vector<int32_t>& values) {
  OwnedTensor t(DType::i32, {static_cast<int64_t>(values.size())}, Device::cpu());
  std::copy(values.begin(), values.end(), t.view().ptr<int32_t>());
  return t;
}

TEST(MoePermuteReference, HandWorkedCase) {
  // Tokens 0..2, top-2, 3 experts: pairs 0..5 go to experts 2, 0, 2, 1, 0, 2.
  OwnedTensor ids = ids_tensor({2, 0, 2, 1, 0, 2}, 3, 2);
  Permuted p = permute(ids, 3, Device::cpu());
  EXPECT_EQ(ints(p.offsets), (std::vector<int>{0, 2, 3, 6}));
  EXPECT_EQ(ints(p.sorted_pairs), (std::vector<int>{1, 4, 3, 0, 2, 5}));
  EXPECT_EQ(ints(p.pair_rows), (std::vector<int>{3, 0, 4, 2, 1, 5}));
}

struct PermuteCase {
  int64_t tokens;
  int k, experts;
  bool skewed;  // every pair to expert experts / 2
};

class MoePermuteDiff : public ::testing::TestWithParam<PermuteCase> {};

TEST_P(MoePermuteDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const PermuteCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  OwnedTensor ids = random_host(DType::i32, {c.tokens, c.k}, seed, 0, static_cast<float>(c.experts));
  if (c.skewed) std::fill_n(ids.view().ptr<int32_t>(), ids.view().numel(), c.experts / 2);
  Permuted ref = permute(ids, c.experts, Device::cpu());
  OwnedTensor dids = to_device(ids, Device::cuda());
  Permuted got = permute(dids, c.experts, Device::cuda());
  EXPECT_EQ(ints(got.offsets), ints(ref.offsets));
  EXPECT_EQ(ints(got.sorted_pairs), ints(ref.sorted_pairs));
  EXPECT_EQ(ints(got.pair_rows), ints(ref.pair_rows));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoePermuteDiff,
                         ::testing::Values(PermuteCase{1, 8, 128, false},     // decode, Qwen3-30B-A3B
                                           PermuteCase{5, 2, 8, false},       // Mixtral
                                           PermuteCase{0, 8, 128, false},     // no tokens
                                           PermuteCase{128, 8, 128, false},   // exactly one chunk
                                           PermuteCase{700, 8, 128, false},   // several chunks
                                           PermuteCase{4096, 2, 32, false},   // seed 001's layer
                                           PermuteCase{333, 16, 512, false},  // the limits
                                           PermuteCase{517, 3, 60, false},    // not a power of two
                                           PermuteCase{3000, 2, 7, true}),    // one expert takes all
                         [](const auto& info) {
                           const PermuteCase& c = info.param;
                           return "T" + std::to_string(c.tokens) + "_k" + std::to_string(c.k) + "_E" +
                                  std::to_string(c.experts) + (c.skewed ? "_skewed" : "");
                         });

// kMoeNotLocal (-1: another rank's expert under expert parallelism) on the CPU: those pairs take
// the rows past offsets[E], in pair order, with pair_rows = -1, as on CUDA (below).
TEST(MoePermuteReference, NotLocalIdsGoLast) {
  const std::vector<int32_t> values = {3, -1, 0, -1, 3, 1, -1, 0};
  Permuted got = permute(ids_tensor(values, 4, 2), 4, Device::cpu());
  EXPECT_EQ(ints(got.offsets), (std::vector<int>{0, 2, 3, 3, 5}));
  EXPECT_EQ(ints(got.sorted_pairs), (std::vector<int>{2, 7, 5, 0, 4, 1, 3, 6}));
  EXPECT_EQ(ints(got.pair_rows), (std::vector<int>{3, -1, 0, -1, 4, 2, -1, 1}));
}

// On CUDA ids outside [0, E) are not errors: those pairs take the rows past offsets[E], in pair
// order, with pair_rows = -1.
TEST(MoePermuteCuda, InvalidIdsGoLast) {
  BRAID_REQUIRE_CUDA();
  const int experts = 4;
  const std::vector<int32_t> values = {3, -1, 0, 4, 3, 1, 7, 0};
  Permuted got = permute(to_device(ids_tensor(values, 4, 2), Device::cuda()), experts, Device::cuda());
  EXPECT_EQ(ints(got.offsets), (std::vector<int>{0, 2, 3, 3, 5}));
  EXPECT_EQ(ints(got.sorted_pairs), (std::vector<int>{2, 7, 5, 0, 4, 1, 3, 6}));
  EXPECT_EQ(ints(got.pair_rows), (std::vector<int>{3, -1, 0, -1, 4, 2, -1, 1}));
}

// Permute, gather, an "expert" that returns its input, combine with weights summing to 1: x back.
void round_trip(DType dtype, Device device) {
  const int64_t tokens = 300, hidden = 72, experts = 16;
  const int k = 4;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  OwnedTensor x = random_host(dtype, {tokens, hidden}, seed);
  OwnedTensor ids = random_host(DType::i32, {tokens, k}, seed + 1, 0, experts);
  OwnedTensor w(DType::f32, {tokens, k}, Device::cpu());
  std::fill_n(w.view().ptr<float>(), tokens * k, 0.25f);
  OwnedTensor dx = to_device(x, device), dids = to_device(ids, device), dw = to_device(w, device);
  Permuted p = permute(dids, experts, device);
  OwnedTensor xs = poisoned(dtype, {tokens * k, hidden}, device);
  ops::moe_gather(dx, p.sorted_pairs, k, xs);
  OwnedTensor out = poisoned(dtype, {tokens, hidden}, device);
  ops::moe_combine(xs, p.pair_rows, dw, out);
  EXPECT_LE(rel_error(to_floats(out), to_floats(x)), tolerance(dtype));
}

TEST(MoePermuteReference, RoundTrip) { round_trip(DType::f32, Device::cpu()); }
TEST(MoePermuteCuda, RoundTrip) {
  BRAID_REQUIRE_CUDA();
  round_trip(DType::bf16, Device::cuda());
  round_trip(DType::f32, Device::cuda());
}

// Combine against the formula, rows skipped where pair_rows is -1, ys and out of different dtypes.
TEST(MoeCombineReference, Formula) {
  const int64_t tokens = 2, hidden = 3;
  const int k = 2;
  OwnedTensor ys(DType::f32, {4, hidden}, Device::cpu());
  for (int i = 0; i < 12; ++i) ys.view().ptr<float>()[i] = static_cast<float>(i);
  OwnedTensor rows = int_vector({2, -1, 0, 3});
  OwnedTensor w(DType::f32, {tokens, k}, Device::cpu());
  const float wv[] = {0.5f, 9.0f, 0.25f, 2.0f};
  std::copy(wv, wv + 4, w.view().ptr<float>());
  OwnedTensor out(DType::f32, {tokens, hidden}, Device::cpu());
  ops::moe_combine(ys, rows, w, out);
  const std::vector<float> want = {0.5f * 6, 0.5f * 7, 0.5f * 8,  // token 0: row 2 only
                                   0.25f * 0 + 2.0f * 9, 0.25f * 1 + 2.0f * 10, 0.25f * 2 + 2.0f * 11};
  EXPECT_EQ(to_floats(out), want);
}

class MoeCombineDiff : public ::testing::TestWithParam<std::pair<DType, DType>> {};

TEST_P(MoeCombineDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto [ydtype, odtype] = GetParam();
  const int64_t tokens = 77;
  const int k = 3;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const int64_t hidden : {200, 203}) {  // 16-byte vectors of ys, and single elements
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    OwnedTensor ys = random_host(ydtype, {tokens * k, hidden}, seed);
    OwnedTensor rows = random_host(DType::i32, {tokens * k}, seed + 1, -1, tokens * k);
    OwnedTensor w = random_host(DType::f32, {tokens, k}, seed + 2);
    OwnedTensor ref = poisoned(odtype, {tokens, hidden}, Device::cpu());
    ops::moe_combine(ys, rows, w, ref);
    OwnedTensor got = poisoned(odtype, {tokens, hidden}, Device::cuda());
    ops::moe_combine(to_device(ys, Device::cuda()), to_device(rows, Device::cuda()),
                     to_device(w, Device::cuda()), got);
    EXPECT_LE(rel_error(to_floats(got), to_floats(ref)), tolerance(odtype));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MoeCombineDiff,
                         ::testing::Values(std::pair{DType::f32, DType::bf16},
                                           std::pair{DType::bf16, DType::bf16},
                                           std::pair{DType::f16, DType::f32}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.first)) + "_to_" +
                                  std::string(dtype_name(info.param.second));
                         });

TEST(MoeGatherDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  for (int64_t hidden : {64, 36}) {  // 16-byte rows and not
    SCOPED_TRACE("hidden " + std::to_string(hidden) + ", seed " + std::to_string(seed));
    const int64_t tokens = 50;
    const int k = 2;
    OwnedTensor x = random_host(DType::bf16, {tokens, hidden}, seed);
    OwnedTensor pairs = random_host(DType::i32, {tokens * k}, seed + 1, 0, tokens * k);
    OwnedTensor ref = poisoned(DType::bf16, {tokens * k, hidden}, Device::cpu());
    ops::moe_gather(x, pairs, k, ref);
    OwnedTensor got = poisoned(DType::bf16, {tokens * k, hidden}, Device::cuda());
    ops::moe_gather(to_device(x, Device::cuda()), to_device(pairs, Device::cuda()), k, got);
    EXPECT_EQ(to_floats(got), to_floats(ref));
  }
}

TEST(MoePermuteErrors, BadArguments) {
  const Device cpu = Device::cpu();
  OwnedTensor ids = ids_tensor({0, 1, 2, 3}, 2, 2);
  OwnedTensor offsets(DType::i32, {5}, cpu), pairs(DType::i32, {4}, cpu), rows(DType::i32, {4}, cpu);
  OwnedTensor ws(DType::i32, {ops::moe_permute_workspace_size(4, 4)}, cpu), small_ws(DType::i32, {1}, cpu);
  OwnedTensor ids_f32(DType::f32, {2, 2}, cpu), offsets_short(DType::i32, {4}, cpu);
  expect_error([&] { ops::moe_permute(ids_f32, 4, offsets, pairs, rows, ws); }, ErrorKind::dtype,
               {"moe_permute", "'topk_ids'", "i32"});
  expect_error([&] { ops::moe_permute(ids, 0, offsets, pairs, rows, ws); },
               ErrorKind::invalid_argument, {"moe_permute", "'num_experts'"});
  expect_error([&] { ops::moe_permute(ids, 4, offsets_short, pairs, rows, ws); }, ErrorKind::shape,
               {"moe_permute", "'expert_offsets'"});
  expect_error([&] { ops::moe_permute(ids, 4, offsets, pairs, rows, small_ws); }, ErrorKind::shape,
               {"moe_permute", "'workspace'", "moe_permute_workspace_size"});
  expect_error([&] { ops::moe_permute(ids, 3, offsets_short, pairs, rows, ws); },
               ErrorKind::invalid_argument, {"moe_permute", "'topk_ids'", "[0, 3)", "topk_ids[3] = 3"});

  OwnedTensor x(DType::bf16, {2, 8}, cpu), xs(DType::bf16, {4, 8}, cpu), xs_f32(DType::f32, {4, 8}, cpu);
  expect_error([&] { ops::moe_gather(x, pairs, 0, xs); }, ErrorKind::invalid_argument,
               {"moe_gather", "'k'"});
  expect_error([&] { ops::moe_gather(x, pairs, 2, xs_f32); }, ErrorKind::dtype,
               {"moe_gather", "'xs'"});
  OwnedTensor bad_pairs = int_vector({0, 1, 2, 9});
  expect_error([&] { ops::moe_gather(x, bad_pairs, 2, xs); }, ErrorKind::invalid_argument,
               {"moe_gather", "'sorted_pairs'", "sorted_pairs[3] = 9"});

  OwnedTensor w(DType::f32, {2, 2}, cpu), out(DType::bf16, {2, 8}, cpu), ys_short(DType::bf16, {3, 8}, cpu);
  expect_error([&] { ops::moe_combine(ys_short, rows, w, out); }, ErrorKind::shape,
               {"moe_combine", "'ys'"});
}

}  // namespace
}  // namespace braid::test
