// moe_experts' CUDA decode kernels (src/ops/cuda/moe/moe_experts.cu) against the CPU reference,
// element by element: 1 to 40 tokens, top-1/2/8/16, 8, 128 and 129 experts (129: an expert in a
// fifth bitmap word), the Qwen3-30B-A3B and Mixtral-like shapes, H and I that are not multiples
// of the 16-byte vector (the scalar paths), routings where every token shares the same experts
// (8 and 16 tokens per expert tile, and more than a tile holds), the same expert twice in one
// token, out-of-range ids, out aliasing x, strided x and out rows, repeatability, and a CUDA graph
// replayed over new routings. The GPU tests skip without a device; the file always compiles.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "braid/stream.h"
#include "ops/moe/moe_test_util.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid::test {
namespace {

enum class Routing {
  distinct,   // k distinct random experts per token (what the router gives)
  shared,     // every token picks the same k experts, in its own order
  duplicate,  // an expert may appear several times in one token, and across tokens
};

const char* routing_name(Routing r) {
  switch (r) {
    case Routing::distinct: return "distinct";
    case Routing::shared: return "shared";
    case Routing::duplicate: return "dup";
  }
  return "?";
}

struct Problem {
  OwnedTensor x, weights, ids, gate_up, down;
};

// Activations and weights scaled like a trained model's (unit-variance dot products), positive
// routing weights, and ids as `routing` says. With E > 128 an id >= 128 is always among them.
Problem make_problem(DType dtype, int64_t tokens, int64_t experts, int64_t k, int64_t hidden,
                     int64_t inter, Routing routing, uint64_t seed) {
  const float gate_scale = 2.0f / std::sqrt(static_cast<float>(hidden));
  const float down_scale = 2.0f / std::sqrt(static_cast<float>(inter));
  Problem p{random_host(dtype, {tokens, hidden}, seed),
            random_host(DType::f32, {tokens, k}, seed + 1, 0.05f, 1.0f),
            OwnedTensor(DType::i32, {tokens, k}, Device::cpu()),
            moe::expert_weights(dtype, {experts, 2 * inter, hidden}, seed + 2, gate_scale),
            moe::expert_weights(dtype, {experts, hidden, inter}, seed + 3, down_scale)};
  std::mt19937_64 rng(seed + 4);
  int32_t* ids = p.ids.view().ptr<int32_t>();
  std::vector<int32_t> all(static_cast<size_t>(experts));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  const std::vector<int32_t> pool(all.begin(), all.begin() + std::min<int64_t>(k, experts));
  for (int64_t t = 0; t < tokens; ++t) {
    int32_t* row = ids + t * k;
    if (routing == Routing::distinct) {
      std::shuffle(all.begin(), all.end(), rng);
      std::copy_n(all.begin(), k, row);
    } else if (routing == Routing::shared) {
      std::vector<int32_t> mine = pool;
      std::shuffle(mine.begin(), mine.end(), rng);
      std::copy_n(mine.begin(), k, row);
    } else {
      // At most 3 different experts per token, repeats included.
      std::uniform_int_distribution<int64_t> pick(0, std::min<int64_t>(experts, 3) - 1);
      for (int64_t j = 0; j < k; ++j) row[j] = pool[static_cast<size_t>(pick(rng)) % pool.size()];
    }
  }
  if (experts > 128) {  // the last expert (in the bitmap's last word), unless already chosen
    const int32_t last = static_cast<int32_t>(experts - 1);
    if (std::find(ids, ids + k, last) == ids + k) ids[0] = last;
  }
  return p;
}

// Runs moe_experts on `device` with copies of the problem (ids as given); out as floats.
std::vector<float> run(const Problem& p, const Tensor& ids, const Tensor& weights, Device device) {
  const Tensor& xt = p.x.view();
  const int64_t tokens = xt.shape[0], hidden = xt.shape[1];
  const int64_t k = ids.shape[1], inter = p.down.view().shape[2];
  auto x = to_device(xt, device), w = to_device(weights, device), i = to_device(ids, device);
  auto gu = to_device(p.gate_up, device), dn = to_device(p.down, device);
  auto ws = poisoned(DType::f32, {tokens * k, inter}, device);  // NaN: h must be written first
  auto out = poisoned(xt.dtype, {tokens, hidden}, device);
  ops::moe_experts(x, w, i, gu, dn, ws, out);
  return to_floats(out);
}
std::vector<float> run(const Problem& p, Device device) { return run(p, p.ids, p.weights, device); }

// Element by element within the dtype's tolerance (moe_test_util.h).
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, DType dtype) {
  moe::expect_elementwise_close(got, ref, tolerance(dtype));
}

struct Case {
  DType dtype;
  int64_t tokens, experts, k, hidden, inter;
  Routing routing;
};

std::string case_name(const Case& c) {
  return std::string(dtype_name(c.dtype)) + "_T" + std::to_string(c.tokens) + "_E" +
         std::to_string(c.experts) + "_k" + std::to_string(c.k) + "_H" + std::to_string(c.hidden) +
         "_I" + std::to_string(c.inter) + "_" + routing_name(c.routing);
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

class MoeExpertsDecodeDiff : public ::testing::TestWithParam<Case> {};

TEST_P(MoeExpertsDecodeDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const Case c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Problem p = make_problem(c.dtype, c.tokens, c.experts, c.k, c.hidden, c.inter, c.routing, seed);
  expect_close(run(p, Device::cuda()), run(p, Device::cpu()), c.dtype);
}

constexpr DType bf16 = DType::bf16, f16 = DType::f16, f32 = DType::f32;
constexpr Routing distinct = Routing::distinct, shared = Routing::shared, dup = Routing::duplicate;

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeExpertsDecodeDiff,
    ::testing::Values(
        // Qwen3-30B-A3B (H 2048, I 768, 128 experts, top-8) at decode batch sizes.
        Case{bf16, 1, 128, 8, 2048, 768, distinct}, Case{bf16, 2, 128, 8, 2048, 768, distinct},
        Case{bf16, 5, 128, 8, 2048, 768, shared},   // 5 tokens on each of 8 experts
        Case{bf16, 16, 128, 8, 2048, 768, distinct},
        Case{f16, 1, 128, 8, 2048, 768, distinct},
        // Mixtral-like top-2 of 8 (I split 8 ways in the down kernel).
        Case{f16, 1, 8, 2, 1024, 3584, distinct}, Case{bf16, 5, 8, 2, 1024, 3584, distinct},
        // Two token tiles: 16 tokens on each expert; more than a tile (40 and 16 x 2 repeats).
        Case{bf16, 16, 128, 8, 512, 256, shared}, Case{bf16, 40, 8, 8, 256, 192, shared},
        Case{bf16, 40, 128, 8, 256, 192, distinct},  // two down batches
        Case{bf16, 300, 8, 2, 64, 64, shared},       // 300 pairs per expert: listed in parts
        Case{f16, 16, 129, 8, 256, 128, distinct}, Case{bf16, 2, 129, 1, 256, 128, distinct},
        Case{bf16, 1, 8, 1, 256, 96, distinct}, Case{bf16, 16, 128, 1, 256, 96, distinct},
        Case{bf16, 40, 128, 1, 128, 768, distinct},  // down batches of fewer than 40 tokens
        Case{bf16, 2, 128, 16, 256, 64, distinct},   // k at its limit
        Case{bf16, 3, 8, 4, 128, 64, dup}, Case{bf16, 16, 8, 8, 128, 64, dup},
        Case{bf16, 1, 8, 4, 128, 64, dup}, Case{bf16, 1, 8, 8, 256, 128, dup},  // one token's slots
        Case{f32, 5, 8, 8, 128, 64, dup},
        // f32 (the CUDA-core path).
        Case{f32, 1, 8, 1, 64, 96, distinct}, Case{f32, 2, 129, 8, 128, 64, distinct},
        Case{f32, 16, 8, 2, 128, 96, shared}, Case{f32, 40, 129, 8, 64, 32, distinct},
        Case{f32, 1, 128, 8, 2048, 768, distinct},
        // H or I not a multiple of the 16-byte vector: scalar loads on that side.
        Case{bf16, 5, 8, 2, 100, 37, distinct}, Case{bf16, 16, 128, 8, 2048, 100, distinct},
        Case{bf16, 1, 128, 8, 100, 768, distinct}, Case{f16, 16, 129, 8, 36, 60, distinct},
        Case{f32, 5, 8, 8, 102, 37, distinct}, Case{f32, 16, 129, 8, 36, 60, shared},
        Case{f16, 16, 8, 8, 44, 20, shared},
        // Multiples of the vector but not of a 32-column step (partial steps at slice ends).
        Case{bf16, 2, 8, 2, 40, 24, distinct}, Case{f32, 2, 8, 2, 20, 12, distinct}),
    [](const auto& info) { return case_name(info.param); });

// Out-of-range ids (negative, E, far past E) add nothing on CUDA: the reference with those pairs'
// weights set to zero (and a valid id in their place).
TEST(MoeExpertsDecodeCuda, OutOfRangeIdsContributeNothing) {
  BRAID_REQUIRE_CUDA();
  for (int64_t tokens : {1, 5, 16}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " tokens " + std::to_string(tokens));
    const int64_t experts = 128, k = 8;
    const Problem p = make_problem(DType::bf16, tokens, experts, k, 256, 128, Routing::distinct, seed);
    OwnedTensor bad_ids = to_device(p.ids, Device::cpu());
    OwnedTensor zeroed = to_device(p.weights, Device::cpu());
    const int32_t bad[] = {-1, static_cast<int32_t>(experts), -100000, static_cast<int32_t>(experts + 7)};
    for (int64_t t = 0; t < tokens; ++t)
      for (int j : {static_cast<int>(t % k), static_cast<int>((t + 3) % k)}) {
        bad_ids.view().ptr<int32_t>()[t * k + j] = bad[(t + j) % 4];
        zeroed.view().ptr<float>()[t * k + j] = 0.0f;
      }
    const auto got = run(p, bad_ids, p.weights, Device::cuda());
    expect_close(got, run(p, p.ids, zeroed, Device::cpu()), DType::bf16);
  }
}

TEST(MoeExpertsDecodeCuda, AllIdsOutOfRangeGiveZeros) {
  BRAID_REQUIRE_CUDA();
  const Problem p = make_problem(DType::bf16, 3, 8, 2, 64, 32, Routing::distinct, fresh_seed());
  OwnedTensor bad_ids = to_device(p.ids, Device::cpu());
  for (int i = 0; i < 6; ++i) bad_ids.view().ptr<int32_t>()[i] = i % 2 ? -1 : 8;
  for (float v : run(p, bad_ids, p.weights, Device::cuda())) ASSERT_EQ(v, 0.0f);
}

TEST(MoeExpertsDecodeCuda, OutMayBeX) {
  BRAID_REQUIRE_CUDA();
  for (const Case& c : {Case{bf16, 1, 128, 8, 2048, 768, distinct}, Case{bf16, 16, 128, 8, 512, 256, distinct},
                        Case{f32, 5, 8, 2, 64, 96, shared}, Case{f16, 2, 8, 8, 100, 37, distinct}}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " " + case_name(c));
    const Problem p = make_problem(c.dtype, c.tokens, c.experts, c.k, c.hidden, c.inter, c.routing, seed);
    const auto ref = run(p, Device::cpu());
    const Device d = Device::cuda();
    auto x = to_device(p.x, d), w = to_device(p.weights, d), ids = to_device(p.ids, d);
    auto gu = to_device(p.gate_up, d), dn = to_device(p.down, d);
    auto ws = poisoned(DType::f32, {c.tokens * c.k, c.inter}, d);
    ops::moe_experts(x, w, ids, gu, dn, ws, x);
    expect_close(to_floats(x), ref, c.dtype);
  }
}

// x and out as views of wider rows: a stride that keeps 16-byte alignment (vector loads) and one
// that does not (scalar loads). The padding of out must be left as it was.
TEST(MoeExpertsDecodeCuda, StridedRows) {
  BRAID_REQUIRE_CUDA();
  const int64_t tokens = 5, experts = 128, k = 8, hidden = 256, inter = 128;
  for (int64_t pad : {8, 3}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " pad " + std::to_string(pad));
    const Problem p = make_problem(DType::bf16, tokens, experts, k, hidden, inter, Routing::distinct, seed);
    const auto ref = run(p, Device::cpu());
    // x padded with NaN: reading past a row's H elements would show.
    OwnedTensor xh = poisoned(DType::bf16, {tokens, hidden + pad}, Device::cpu());
    for (int64_t t = 0; t < tokens; ++t)
      std::memcpy(static_cast<char*>(xh.view().data) + t * (hidden + pad) * 2,
                  static_cast<const char*>(p.x.view().data) + t * hidden * 2, static_cast<size_t>(hidden) * 2);
    const Device d = Device::cuda();
    auto xd = to_device(xh, d);
    auto outd = poisoned(DType::bf16, {tokens, hidden + pad}, d);
    auto w = to_device(p.weights, d), ids = to_device(p.ids, d);
    auto gu = to_device(p.gate_up, d), dn = to_device(p.down, d);
    auto ws = poisoned(DType::f32, {tokens * k, inter}, d);
    const Tensor x = xd.view().slice(1, 0, hidden), out = outd.view().slice(1, 0, hidden);
    ops::moe_experts(x, w, ids, gu, dn, ws, out);
    OwnedTensor outh(DType::bf16, {tokens, hidden + pad}, Device::cpu());
    copy(outd, outh);
    expect_close(to_floats(outh.view().slice(1, 0, hidden)), ref, DType::bf16);
    for (float v : to_floats(outh.view().slice(1, hidden, hidden + pad))) ASSERT_TRUE(std::isnan(v));
  }
}

// Deterministic: the same inputs give the same bits (no atomics in the sums).
TEST(MoeExpertsDecodeCuda, RepeatsBitForBit) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t tokens : {1, 16}) {
    const Problem p = make_problem(DType::bf16, tokens, 128, 8, 2048, 768, Routing::distinct, seed);
    const auto first = run(p, Device::cuda());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(run(p, Device::cuda()), first) << "tokens " << tokens;
  }
}

#if BRAID_WITH_CUDA
// The launch shapes depend on the tensor shapes only: a call captured once in a CUDA graph gives
// the right answer when replayed over new ids and weights (other experts, other sharing).
TEST(MoeExpertsDecodeCuda, GraphReplayFollowsNewRouting) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t tokens = 4, experts = 128, k = 8, hidden = 512, inter = 256;
  const Problem first = make_problem(DType::bf16, tokens, experts, k, hidden, inter, Routing::distinct, seed);
  // The same weights, new x, ids (shared this time) and routing weights.
  Problem second = make_problem(DType::bf16, tokens, experts, k, hidden, inter, Routing::shared, seed + 100);
  second.gate_up = to_device(first.gate_up, Device::cpu());
  second.down = to_device(first.down, Device::cpu());

  const Device d = Device::cuda();
  auto x = to_device(first.x, d), w = to_device(first.weights, d), ids = to_device(first.ids, d);
  auto gu = to_device(first.gate_up, d), dn = to_device(first.down, d);
  auto ws = poisoned(DType::f32, {tokens * k, inter}, d);
  auto out = poisoned(DType::bf16, {tokens, hidden}, d);
  StreamOwner stream;
  auto s = static_cast<cudaStream_t>(stream.get().handle);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    ops::moe_experts(x, w, ids, gu, dn, ws, out, stream.get());
  } catch (const Error& e) {
    cudaStreamEndCapture(s, &graph);
    FAIL() << "moe_experts failed under capture: " << e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const Problem* host : {&first, static_cast<const Problem*>(&second), &first}) {
    copy(host->x, x);
    copy(host->ids, ids);
    copy(host->weights, w);
    // On the graph's stream: `s` does not wait for the legacy stream, so a memset there could
    // land in the middle of the replay (it did under racecheck and initcheck).
    fill_bytes(out, 0xFF, stream.get());
    fill_bytes(ws, 0xFF, stream.get());
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    stream.synchronize();
    expect_close(to_floats(out), run(*host, Device::cpu()), DType::bf16);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
#endif

}  // namespace
}  // namespace braid::test
