// Expert parallelism at the op level: moe_local_expert_ids (a hand-worked case, in place, CUDA
// against the reference, argument errors), and one rank's MoE layer through each path (the GEMV
// path moe_experts; the grouped path moe_permute -> moe_gather -> moe_grouped_gemm x 2 ->
// moe_combine): another rank's pairs (kMoeNotLocal) add exactly nothing (bit for bit what a
// weight of zero on a local expert gives, with the skipped rows left as NaN), and the ranks' sum
// is the whole layer. CUDA against the CPU skips without a GPU.
#include <string>
#include <utility>
#include <vector>

#include "braid/ops.h"
#include "ops/moe/moe_test_util.h"
#include "test_util.h"

namespace braid::test {
namespace {

OwnedTensor ids_tensor(const std::vector<int32_t>& values, int64_t tokens, int64_t k) {
  OwnedTensor t(DType::i32, {tokens, k}, Device::cpu());
  std::copy(values.begin(), values.end(), t.view().ptr<int32_t>());
  return t;
}

std::vector<int> ints(const Tensor& t) {
  const std::vector<float> f = to_floats(t);
  return std::vector<int>(f.begin(), f.end());
}

TEST(MoeLocalExpertIds, HandWorkedCase) {
  // Experts 2..4 are this rank's: 2 -> 0, 3 -> 1, 4 -> 2; the others -> -1.
  OwnedTensor ids = ids_tensor({0, 2, 4, 5, 3, 1, 7, 4}, 4, 2);
  OwnedTensor out = poisoned(DType::i32, {4, 2}, Device::cpu());
  ops::moe_local_expert_ids(ids, 2, 3, out);
  EXPECT_EQ(ints(out), (std::vector<int>{-1, 0, 2, -1, 1, -1, -1, 2}));
  ops::moe_local_expert_ids(ids, 2, 3, ids);  // in place
  EXPECT_EQ(ints(ids), ints(out));
  EXPECT_EQ(ops::kMoeNotLocal, -1);
}

TEST(MoeLocalExpertIdsCuda, MatchesReference) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const int64_t tokens : {int64_t{1}, int64_t{7}, int64_t{1000}}) {
    // Ids past either end too (an earlier rank's -1 stays -1).
    OwnedTensor ids = random_host(DType::i32, {tokens, 8}, seed + static_cast<uint64_t>(tokens), -1, 130);
    for (const auto [first, count] : {std::pair{0, 32}, std::pair{96, 32}, std::pair{40, 1}}) {
      OwnedTensor ref = poisoned(DType::i32, {tokens, 8}, Device::cpu());
      ops::moe_local_expert_ids(ids, first, count, ref);
      OwnedTensor dids = to_device(ids, Device::cuda());
      OwnedTensor got = poisoned(DType::i32, {tokens, 8}, Device::cuda());
      ops::moe_local_expert_ids(dids, first, count, got);
      EXPECT_EQ(ints(got), ints(ref)) << tokens << " tokens, first " << first;
      ops::moe_local_expert_ids(dids, first, count, dids);  // in place
      EXPECT_EQ(ints(dids), ints(ref)) << tokens << " tokens, first " << first << ", in place";
    }
  }
}

TEST(MoeLocalExpertIds, BadArguments) {
  const Device cpu = Device::cpu();
  OwnedTensor ids = ids_tensor({0, 1, 2, 3}, 2, 2), out(DType::i32, {2, 2}, cpu);
  OwnedTensor wide(DType::i32, {2, 3}, cpu), f32(DType::f32, {2, 2}, cpu);
  expect_error([&] { ops::moe_local_expert_ids(ids, -1, 2, out); }, ErrorKind::invalid_argument,
               {"moe_local_expert_ids", "'first'"});
  expect_error([&] { ops::moe_local_expert_ids(ids, 0, 0, out); }, ErrorKind::invalid_argument,
               {"moe_local_expert_ids", "'count'"});
  expect_error([&] { ops::moe_local_expert_ids(ids, 0, 2, wide); }, ErrorKind::shape,
               {"moe_local_expert_ids", "'local_ids'"});
  expect_error([&] { ops::moe_local_expert_ids(f32, 0, 2, out); }, ErrorKind::dtype,
               {"moe_local_expert_ids", "'topk_ids'", "i32"});
}

// A MoE layer's inputs on the CPU: x, router-like weights and distinct ids, E experts.
struct Layer {
  OwnedTensor x, weights, ids, gate_up, down;
  int64_t tokens, experts, k, hidden, inter;
};

Layer make_layer(DType dt, int64_t tokens, int64_t experts, int64_t k, int64_t hidden,
                 int64_t inter, uint64_t seed) {
  Layer l{random_host(dt, {tokens, hidden}, seed),
          random_host(DType::f32, {tokens, k}, seed + 1, 0.1f, 1.0f),
          OwnedTensor(DType::i32, {tokens, k}, Device::cpu()),
          random_host(dt, {experts, 2 * inter, hidden}, seed + 2, -0.5f, 0.5f),
          random_host(dt, {experts, hidden, inter}, seed + 3, -0.5f, 0.5f),
          tokens, experts, k, hidden, inter};
  moe::distinct_routing(l.ids.view(), experts, seed + 4);
  return l;
}

// The layer with the pairs outside [first, first + count) moved to expert `first` with weight 0:
// what a rank would compute if it could not skip another rank's pairs.
Layer zeroed_outside(const Layer& l, int first, int count) {
  Layer z{to_device(l.x, Device::cpu()), to_device(l.weights, Device::cpu()),
          to_device(l.ids, Device::cpu()), to_device(l.gate_up, Device::cpu()),
          to_device(l.down, Device::cpu()), l.tokens, l.experts, l.k, l.hidden, l.inter};
  for (int64_t p = 0; p < l.tokens * l.k; ++p) {
    int32_t& e = z.ids.view().ptr<int32_t>()[p];
    if (e < first || e >= first + count) {
      e = first;
      z.weights.view().ptr<float>()[p] = 0.0f;
    }
  }
  return z;
}

enum class Path { gemv, grouped };

// One rank's part of the layer on `device`: its experts [first, first + count) (slices of the
// whole layer's), the router's global ids renumbered by moe_local_expert_ids (in place, as the
// forward does), then the path. Every scratch row starts as NaN (poisoned).
std::vector<float> rank_output(const Layer& l, int first, int count, Path path, Device d) {
  const DType dt = l.x.view().dtype;
  const int64_t T = l.tokens, k = l.k, H = l.hidden, I = l.inter, pairs = T * k;
  const OwnedTensor x = to_device(l.x, d), w = to_device(l.weights, d), ids = to_device(l.ids, d);
  const OwnedTensor gate_up = to_device(l.gate_up, d), down = to_device(l.down, d);
  const Tensor gu = gate_up.view().slice(0, first, first + count);
  const Tensor dn = down.view().slice(0, first, first + count);
  ops::moe_local_expert_ids(ids, first, count, ids);
  OwnedTensor out = poisoned(dt, {T, H}, d);
  if (path == Path::gemv) {
    OwnedTensor ws = poisoned(DType::f32, {pairs, I}, d);
    ops::moe_experts(x, w, ids, gu, dn, ws, out);
    return to_floats(out);
  }
  OwnedTensor offsets = poisoned(DType::i32, {count + 1}, d);
  OwnedTensor sorted = poisoned(DType::i32, {pairs}, d), rows = poisoned(DType::i32, {pairs}, d);
  OwnedTensor scratch(DType::i32, {ops::moe_permute_workspace_size(pairs, count)}, d);
  ops::moe_permute(ids, count, offsets, sorted, rows, scratch);
  OwnedTensor xs = poisoned(dt, {pairs, H}, d), hs = poisoned(dt, {pairs, I}, d);
  OwnedTensor ys = poisoned(dt, {pairs, H}, d);
  ops::moe_gather(x, sorted, static_cast<int>(k), xs);
  ops::moe_grouped_gemm(xs, gu, offsets, ops::MoeActivation::swiglu, hs);
  ops::moe_grouped_gemm(hs, dn, offsets, ops::MoeActivation::none, ys);  // rows past offsets[E]: NaN
  ops::moe_combine(ys, rows, w, out);
  return to_floats(out);
}

TEST(MoeExpertParallel, OtherRanksPairsAddExactlyNothingOnTheCpu) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const DType dt : {DType::f32, DType::bf16})
    for (const Path path : {Path::gemv, Path::grouped}) {
      const Layer l = make_layer(dt, 9, 8, 3, 32, 16, seed);
      const std::vector<float> whole = rank_output(l, 0, 8, path, Device::cpu());
      for (const int ranks : {2, 4}) {
        const int per = 8 / ranks;
        std::vector<float> sum(whole.size(), 0.0f);
        for (int r = 0; r < ranks; ++r) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + (path == Path::gemv ? " gemv" : " grouped") +
                       " rank " + std::to_string(r) + " of " + std::to_string(ranks));
          const std::vector<float> got = rank_output(l, r * per, per, path, Device::cpu());
          EXPECT_EQ(got, rank_output(zeroed_outside(l, r * per, per), r * per, per, path, Device::cpu()));
          for (size_t i = 0; i < got.size(); ++i) sum[i] += got[i];
        }
        // The all-reduce of the ranks' parts is the whole layer (f32: only the order of the sums).
        if (dt == DType::f32) EXPECT_LE(rel_error(sum, whole), 1e-6) << ranks << " ranks";
      }
    }
}

TEST(MoeExpertParallelCuda, RanksMatchTheCpu) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Qwen3-30B-A3B-like decode (GEMV) and a prefill-sized step (grouped), bf16, 4 ranks.
  const Layer decode = make_layer(DType::bf16, 2, 128, 8, 256, 128, seed);
  const Layer prefill = make_layer(DType::bf16, 100, 128, 8, 256, 128, seed + 10);
  for (const Path path : {Path::gemv, Path::grouped})
    for (const Layer* l : {&decode, &prefill})
      for (int r = 0; r < 4; ++r) {
        SCOPED_TRACE(std::string(path == Path::gemv ? "gemv" : "grouped") + " tokens " +
                     std::to_string(l->tokens) + " rank " + std::to_string(r));
        moe::expect_elementwise_close(rank_output(*l, r * 32, 32, path, Device::cuda()),
                                      rank_output(*l, r * 32, 32, path, Device::cpu()),
                                      tolerance(DType::bf16));
      }
}

}  // namespace
}  // namespace braid::test
