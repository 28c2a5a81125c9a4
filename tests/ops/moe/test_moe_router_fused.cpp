// moe_router_topk_softmax (ops.h): a MoE layer's norm, router GEMV and top-k softmax routing as
// one op. On the CPU it is rms_norm_gemm_keep_normed then moe_route_topk_softmax (the same bits);
// on CUDA, for up to 4 tokens, one kernel (moe_router_fused.cu), checked against the two ops on
// the GPU:
//   - normed: the same bits (the same norm code);
//   - logits: within the rounding of the last bit (the fp32 sum is taken in another order), and
//     within the dtype's tolerance of the CPU;
//   - ids and weights: exactly moe_route_topk_softmax's (on the GPU) of the logits the op wrote,
//     so that a logit one ulp away from the GEMV's can change a near-tie, never the rule;
//   - the counter is zero after every call, eagerly, inside ops::ConstantWeights (programmatic
//     launch) and in CUDA-graph replays whose input changes between replays.
// Past 4 tokens, 4096 columns or 256 experts the op is the two ops on CUDA too.
#include <cmath>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid::test {
namespace {

struct RouterShape {
  int64_t tokens, hidden, experts;
  int k;
  DType dtype;
  bool f32_logits, renormalize;
};

std::string shape_name(const RouterShape& s) {
  return "t" + std::to_string(s.tokens) + "_h" + std::to_string(s.hidden) + "_e" +
         std::to_string(s.experts) + "_k" + std::to_string(s.k) + "_" + std::string(dtype_name(s.dtype)) +
         (s.f32_logits ? "_f32logits" : "") + (s.renormalize ? "_renorm" : "");
}

// The op's operands on one device: the inputs drawn once on the CPU and copied.
struct Router {
  OwnedTensor x, norm_weight, w;                                // inputs
  OwnedTensor logits, normed, topk_weights, topk_ids, counter;  // outputs, scratch

  Router(const RouterShape& s, uint64_t seed, Device d) {
    const float a = 2.0f / std::sqrt(static_cast<float>(s.hidden));
    x = to_device(random_host(s.dtype, {s.tokens, s.hidden}, seed, -2.0f, 2.0f), d);
    norm_weight = to_device(random_host(s.dtype, {s.hidden}, seed + 1, 0.5f, 1.5f), d);
    w = to_device(random_host(s.dtype, {s.experts, s.hidden}, seed + 2, -a, a), d);
    logits = poisoned(s.f32_logits ? DType::f32 : s.dtype, {s.tokens, s.experts}, d);
    normed = poisoned(s.dtype, {s.tokens, s.hidden}, d);
    topk_weights = poisoned(DType::f32, {s.tokens, int64_t{s.k}}, d);
    topk_ids = poisoned(DType::i32, {s.tokens, int64_t{s.k}}, d);
    counter = zero_counter(d);
  }

  void run(const RouterShape& s, Stream stream = {}) {
    ops::moe_router_topk_softmax(x, norm_weight, 1e-6f, w, s.k, s.renormalize, logits, normed,
                                 topk_weights, topk_ids, counter, stream);
  }
  // The two ops the op stands for.
  void run_two_ops(const RouterShape& s) {
    ops::rms_norm_gemm_keep_normed(x, norm_weight, 1e-6f, w, Tensor{}, logits, normed);
    ops::moe_route_topk_softmax(logits, s.k, s.renormalize, topk_weights, topk_ids);
  }
};

std::vector<int32_t> ids_of(const Tensor& t) {
  const OwnedTensor host = to_device(t, Device::cpu());
  const int32_t* p = host.view().ptr<int32_t>();
  return std::vector<int32_t>(p, p + host.view().numel());
}

const RouterShape kCpuShape{3, 96, 20, 4, DType::bf16, false, true};

TEST(MoeRouterTopkSoftmax, CpuIsTheTwoOps) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const RouterShape& s :
       {kCpuShape, RouterShape{1, 64, 8, 2, DType::f32, true, false},
        RouterShape{2, 40, 5, 5, DType::f16, false, false}}) {
    SCOPED_TRACE(shape_name(s));
    Router op(s, seed, Device::cpu()), two(s, seed, Device::cpu());
    op.run(s);
    two.run_two_ops(s);
    EXPECT_EQ(bit_mismatches(to_floats(op.logits), to_floats(two.logits)), 0);
    EXPECT_EQ(bit_mismatches(to_floats(op.normed), to_floats(two.normed)), 0);
    EXPECT_EQ(bit_mismatches(to_floats(op.topk_weights), to_floats(two.topk_weights)), 0);
    EXPECT_EQ(ids_of(op.topk_ids), ids_of(two.topk_ids));
    EXPECT_EQ(ids_of(op.counter)[0], 0);
  }
}

TEST(MoeRouterTopkSoftmax, ErrorsNameTheArgument) {
  const RouterShape& s = kCpuShape;
  Router r(s, 7, Device::cpu());
  auto call = [&](const Tensor& counter, int k, const Tensor& logits) {
    ops::moe_router_topk_softmax(r.x, r.norm_weight, 1e-6f, r.w, k, true, logits, r.normed,
                                 r.topk_weights, r.topk_ids, counter);
  };
  const OwnedTensor f32_counter(DType::f32, {1}, Device::cpu());
  expect_error([&] { call(f32_counter, s.k, r.logits); }, ErrorKind::dtype,
               {"moe_router_topk_softmax", "counter"});
  const OwnedTensor two(DType::i32, {2}, Device::cpu());
  expect_error([&] { call(two, s.k, r.logits); }, ErrorKind::shape,
               {"moe_router_topk_softmax", "counter"});
  expect_error([&] { call(Tensor{}, s.k, r.logits); }, ErrorKind::invalid_argument,
               {"moe_router_topk_softmax", "counter"});
  expect_error([&] { call(r.counter, 0, r.logits); }, ErrorKind::invalid_argument,
               {"moe_router_topk_softmax", "k"});
  expect_error([&] { call(r.counter, s.k + 1, r.logits); }, ErrorKind::shape,
               {"moe_router_topk_softmax", "topk_weights"});
  const OwnedTensor narrow(s.dtype, {s.tokens, s.experts - 1}, Device::cpu());
  expect_error([&] { call(r.counter, s.k, narrow); }, ErrorKind::shape,
               {"moe_router_topk_softmax", "logits"});
  // A counter on another device: refused before anything runs.
  expect_error([&] { call(fake_cuda(DType::i32, {1}), s.k, r.logits); }, ErrorKind::device,
               {"moe_router_topk_softmax"});
}

#if BRAID_WITH_CUDA
class MoeRouterTopkSoftmaxCuda : public ::testing::TestWithParam<RouterShape> {};

TEST_P(MoeRouterTopkSoftmaxCuda, MatchesTheTwoOpsAndTheCpu) {
  BRAID_REQUIRE_CUDA();
  const RouterShape s = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda(0);
  Router op(s, seed, gpu), two(s, seed, gpu), cpu(s, seed, Device::cpu());
  op.run(s);
  two.run_two_ops(s);
  cpu.run(s);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(bit_mismatches(to_floats(op.normed), to_floats(two.normed)), 0);
  const std::vector<float> logits = to_floats(op.logits), two_logits = to_floats(two.logits);
  // One rounding of the logit apart (each may be the other's neighbour), plus what two orders
  // of an fp32 sum of up to 4096 terms of ~0.02 differ by (~1e-6 here; 1e-4 allowed).
  const double ulp = s.f32_logits ? 1e-6 : (s.dtype == DType::bf16 ? 1.0 / 128 : 1.0 / 1024);
  for (size_t i = 0; i < logits.size(); ++i)
    ASSERT_LE(std::fabs(logits[i] - two_logits[i]), ulp * std::fabs(two_logits[i]) + 1e-4)
        << "logit " << i << ": " << logits[i] << " against " << two_logits[i];
  EXPECT_LE(rel_error(logits, to_floats(cpu.logits)), tolerance(s.dtype));

  // The routing is moe_route_topk_softmax's of the logits the op wrote, bit for bit.
  Router again(s, seed, gpu);
  copy(op.logits, again.logits.view());
  ops::moe_route_topk_softmax(again.logits, s.k, s.renormalize, again.topk_weights,
                              again.topk_ids);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(ids_of(op.topk_ids), ids_of(again.topk_ids));
  EXPECT_EQ(bit_mismatches(to_floats(op.topk_weights), to_floats(again.topk_weights)), 0);
  EXPECT_EQ(ids_of(op.counter)[0], 0) << "the counter is left zero";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeRouterTopkSoftmaxCuda,
    ::testing::Values(
        RouterShape{1, 2048, 128, 8, DType::bf16, false, true},   // Qwen3-30B-A3B
        RouterShape{4, 2048, 128, 8, DType::bf16, false, true},   // ... batch 4
        RouterShape{2, 2048, 8, 2, DType::bf16, false, true},     // 8 experts, top 2
        RouterShape{3, 1000, 60, 4, DType::f16, false, false},    // partial pieces, block, slot
        RouterShape{1, 2048, 256, 8, DType::bf16, true, false},   // f32 logits, 8 slots a lane
        RouterShape{2, 4096, 8, 2, DType::bf16, false, true},     // Mixtral: x and norm in turn
        RouterShape{1, 64, 1, 1, DType::f16, false, true},        // one expert
        RouterShape{5, 2048, 128, 8, DType::bf16, false, true},   // past 4 tokens: the two ops
        RouterShape{1, 8192, 512, 8, DType::bf16, false, true}),  // past both: the two ops
    [](const ::testing::TestParamInfo<RouterShape>& info) { return shape_name(info.param); });

// Two layers' routers on one counter, launched programmatically inside ConstantWeights and
// replayed from a CUDA graph whose input changes between replays.
TEST(MoeRouterTopkSoftmaxGraph, ReplaysWithChangingInputs) {
  BRAID_REQUIRE_CUDA();
  const RouterShape s{1, 2048, 128, 8, DType::bf16, false, true};
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda(0);
  Router layer0(s, seed, gpu), layer1(s, seed + 10, gpu);
  const Tensor shared_counter = layer0.counter;
  const OwnedTensor x_a = random_host(s.dtype, {s.tokens, s.hidden}, seed + 100, -2.0f, 2.0f);
  const OwnedTensor x_b = random_host(s.dtype, {s.tokens, s.hidden}, seed + 200, -2.0f, 2.0f);
  // The eager results for each input, from fresh routers.
  auto eager = [&](const OwnedTensor& x_host) {
    Router r0(s, seed, gpu), r1(s, seed + 10, gpu);
    copy(x_host, r0.x.view());
    copy(x_host, r1.x.view());
    r0.run(s);
    r1.run(s);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return std::vector<std::vector<int32_t>>{ids_of(r0.topk_ids), ids_of(r1.topk_ids)};
  };
  const auto want_a = eager(x_a), want_b = eager(x_b);

  StreamOwner stream;
  auto cs = static_cast<cudaStream_t>(stream.get().handle);
  auto step = [&] {
    const ops::ConstantWeights constant_weights;
    for (Router* r : {&layer0, &layer1})
      ops::moe_router_topk_softmax(r->x, r->norm_weight, 1e-6f, r->w, s.k, s.renormalize,
                                   r->logits, r->normed, r->topk_weights, r->topk_ids,
                                   shared_counter, stream.get());
  };
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  step();
  ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 6; ++replay) {
    const bool a = replay % 2 == 0;
    copy(a ? x_a : x_b, layer0.x.view());
    copy(a ? x_a : x_b, layer1.x.view());
    fill_bytes(layer1.topk_ids, 0xFF, stream.get());  // -1 unless the op writes every id
    ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
    stream.synchronize();
    const auto& want = a ? want_a : want_b;
    EXPECT_EQ(ids_of(layer0.topk_ids), want[0]) << "replay " << replay;
    EXPECT_EQ(ids_of(layer1.topk_ids), want[1]) << "replay " << replay;
    EXPECT_EQ(ids_of(shared_counter)[0], 0) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
#endif  // BRAID_WITH_CUDA

}  // namespace
}  // namespace braid::test
