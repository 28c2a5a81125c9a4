// gemv_chain (ops.h): a decode layer's o_proj -> gate_up -> down -> the next layer's qkv as one
// op. On the CPU it is the ops in order (the same bits); on CUDA one persistent kernel, against
// the CPU chain and against the same ops run one by one on the GPU, on the shapes of Qwen2.5-0.5B
// and Llama-3.2-1B and on awkward ones (stages with fewer rows than blocks, k not a multiple of
// the kernel's 1024-column pieces, a 10240-wide down stage), eagerly, twice on one counter,
// programmatically inside ops::ConstantWeights and as CUDA-graph replays whose input changes
// from one replay to the next, and with a stage that reads an earlier stage's output than the
// one just before it; the counter must be zero after every call.
// A stage that read its input before the stage before had written it would be off by a whole
// stage's update: the test shows that error is far past the bound.
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

struct ChainShape {
  const char* label;
  int64_t hidden, inter, qkv;
  bool bias;  // on o_proj and qkv
};

// A layer's weights and the step's activations, on one device.
struct LayerChain {
  OwnedTensor o, o_bias, mlp_norm, gate_up, down, attn_norm, qkv_w, qkv_bias;  // weights
  OwnedTensor attn, residual, mlp, qkv, normed, act, proj, counter;            // activations

  LayerChain(const ChainShape& s, DType t, uint64_t seed, Device d) {
    auto weights = [&](int64_t n, int64_t k) {
      const float a = 2.0f / std::sqrt(static_cast<float>(k));
      return to_device(random_host(t, {n, k}, ++seed, -a, a), d);
    };
    o = weights(s.hidden, s.hidden);
    gate_up = weights(2 * s.inter, s.hidden);
    down = weights(s.hidden, s.inter);
    qkv_w = weights(s.qkv, s.hidden);
    mlp_norm = to_device(random_host(t, {s.hidden}, ++seed, 0.5f, 1.5f), d);
    attn_norm = to_device(random_host(t, {s.hidden}, ++seed, 0.5f, 1.5f), d);
    if (s.bias) {
      o_bias = to_device(random_host(t, {s.hidden}, ++seed, -0.5f, 0.5f), d);
      qkv_bias = to_device(random_host(t, {s.qkv}, ++seed, -0.5f, 0.5f), d);
    }
    attn = to_device(random_host(t, {1, s.hidden}, ++seed, -1.0f, 1.0f), d);
    residual = to_device(random_host(t, {1, s.hidden}, ++seed, -2.0f, 2.0f), d);
    mlp = poisoned(t, {1, 2 * s.inter}, d);
    qkv = poisoned(t, {1, s.qkv}, d);
    normed = poisoned(t, {1, s.hidden}, d);
    act = poisoned(t, {1, s.inter}, d);
    proj = poisoned(t, {1, s.hidden}, d);
    counter = zero_counter(d);
  }

  // A copy of `from` (weights and activations) on `d`: the random values are drawn once per
  // shape, which is most of a CPU test's time at the 1B shapes.
  LayerChain(const LayerChain& from, Device d) {
    auto on = [&](const OwnedTensor& t) { return t.data() ? to_device(t, d) : OwnedTensor{}; };
    o = on(from.o), o_bias = on(from.o_bias), mlp_norm = on(from.mlp_norm);
    gate_up = on(from.gate_up), down = on(from.down), attn_norm = on(from.attn_norm);
    qkv_w = on(from.qkv_w), qkv_bias = on(from.qkv_bias);
    attn = on(from.attn), residual = on(from.residual), mlp = on(from.mlp), qkv = on(from.qkv);
    normed = on(from.normed), act = on(from.act), proj = on(from.proj);
    counter = zero_counter(d);
  }

  // forward()'s stages for a dense layer followed by another (`stages` of them, 1 to 4).
  std::vector<ops::ChainStage> stages(float eps, int count = 4) const {
    std::vector<ops::ChainStage> all = {
        ops::ChainStage::gemm_add(attn, o, o_bias, residual, proj),
        ops::ChainStage::rms_norm_gemm(residual, mlp_norm, eps, gate_up, Tensor{}, mlp, normed),
        ops::ChainStage::swiglu_gemm_add(mlp, down, residual, act, proj),
        ops::ChainStage::rms_norm_gemm(residual, attn_norm, eps, qkv_w, qkv_bias, qkv, normed)};
    all.resize(static_cast<size_t>(count));
    return all;
  }
};

constexpr float kEps = 1e-6f;

// The CPU chain, or the same with the last stage's input taken before the stage before ran (what
// a kernel that raced ahead of its counter would compute): residual and qkv.
struct ChainResult {
  std::vector<float> residual, qkv;
};
ChainResult cpu_chain(const LayerChain& host, int count, bool race = false,
                      const Tensor& start = Tensor{}) {  // start: replaces the random residual
  LayerChain L(host, Device::cpu());
  if (start.data) copy(start, L.residual.view());
  std::vector<ops::ChainStage> st = L.stages(kEps, count);
  if (race) {
    // The down stage's residual add lost: the qkv stage reads the residual as gate_up left it.
    ops::gemv_chain(std::span(st).first(2), L.counter);
    OwnedTensor lost = to_device(L.residual, Device::cpu());
    ops::gemv_chain(std::span(st).subspan(2, 1), L.counter);
    copy(lost, L.residual.view());
    ops::gemv_chain(std::span(st).subspan(3), L.counter);
  } else {
    ops::gemv_chain(st, L.counter);
  }
  return {to_floats(L.residual), count == 4 ? to_floats(L.qkv) : std::vector<float>{}};
}
ChainResult cpu_chain(const ChainShape& s, DType t, uint64_t seed, int count, bool race = false,
                      const Tensor& start = Tensor{}) {
  return cpu_chain(LayerChain(s, t, seed, Device::cpu()), count, race, start);
}

TEST(GemvChain, CpuIsTheOpsInOrder) {
  const ChainShape s{"small", 64, 96, 80, true};
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType t : {DType::f32, DType::bf16}) {
    const ChainResult chain = cpu_chain(s, t, seed, 4);
    LayerChain L(s, t, seed, Device::cpu());
    ops::gemm_add(L.attn, L.o, L.o_bias, L.residual, L.proj);
    ops::rms_norm_gemm(L.residual, L.mlp_norm, kEps, L.gate_up, Tensor{}, L.mlp, L.normed);
    ops::swiglu_gemm_add(L.mlp, L.down, L.residual, L.act, L.proj);
    ops::rms_norm_gemm(L.residual, L.attn_norm, kEps, L.qkv_w, L.qkv_bias, L.qkv, L.normed);
    EXPECT_EQ(bit_mismatches(chain.residual, to_floats(L.residual)), 0) << dtype_name(t);
    EXPECT_EQ(bit_mismatches(chain.qkv, to_floats(L.qkv)), 0) << dtype_name(t);
  }
}

TEST(GemvChain, RejectsBadStagesAndCounters) {
  const ChainShape s{"small", 64, 96, 80, false};
  LayerChain L(s, DType::bf16, 1, Device::cpu());
  const std::vector<ops::ChainStage> st = L.stages(kEps);
  expect_error([&] { ops::gemv_chain({}, L.counter); }, ErrorKind::invalid_argument,
               {"gemv_chain", "1 to 8 stages", "0 stages"});
  std::vector<ops::ChainStage> nine(9, st[0]);
  expect_error([&] { ops::gemv_chain(nine, L.counter); }, ErrorKind::invalid_argument,
               {"gemv_chain", "9 stages"});
  // A stage's own op's check, named by its place in the chain.
  std::vector<ops::ChainStage> bad = st;
  bad[1].w = L.down;  // [hidden, inter] where gate_up's [2 * inter, hidden] belongs
  expect_error([&] { ops::gemv_chain(bad, L.counter); }, ErrorKind::shape,
               {"gemv_chain stage 1 (rms_norm_gemm)"});
  bad = st;
  const OwnedTensor narrow(DType::bf16, {1, 3}, Device::cpu());
  bad[2].act = narrow;
  expect_error([&] { ops::gemv_chain(bad, L.counter); }, ErrorKind::shape,
               {"gemv_chain stage 2 (swiglu_gemm_add)", "act"});
  const OwnedTensor f32_counter(DType::f32, {1}, Device::cpu());
  expect_error([&] { ops::gemv_chain(st, f32_counter); }, ErrorKind::dtype, {"gemv_chain", "counter"});
  const OwnedTensor two(DType::i32, {2}, Device::cpu());
  expect_error([&] { ops::gemv_chain(st, two); }, ErrorKind::shape, {"gemv_chain", "counter"});
  expect_error([&] { ops::gemv_chain(st, Tensor{}); }, ErrorKind::invalid_argument,
               {"gemv_chain", "counter"});
  // Stages on two devices (checked before anything runs: a fake CUDA tensor is never touched).
  bad = st;
  bad[3].out = fake_cuda(DType::bf16, {1, 80});
  expect_error([&] { ops::gemv_chain(bad, L.counter); }, ErrorKind::device, {"gemv_chain"});
}

#if BRAID_WITH_CUDA
std::vector<ChainShape> cuda_shapes() {
  return {{"qwen2_5_0_5b", 896, 4864, 1152, true},
          {"llama_3_2_1b", 2048, 8192, 3072, false},
          // 40 rows of qkv over ~132 blocks (most blocks own none), k = 1368 and 520 (a second,
          // partial 1024-column piece; one short piece), n not a multiple of the 8-row groups.
          {"awkward", 520, 1368, 40, true},
          // k = 10240 for down: five 16-byte pieces of its row a consumer thread.
          {"wide", 1024, 10240, 256, false}};
}

TEST(GemvChain, CudaMatchesTheCpuAndTheOpsOneByOne) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda(0);
  for (const ChainShape& s : cuda_shapes()) {
    for (DType t : {DType::bf16, DType::f16}) {
      const LayerChain host(s, t, seed, Device::cpu());
      for (int count : {4, 3, 1}) {
        SCOPED_TRACE(std::string(s.label) + " " + std::string(dtype_name(t)) + " stages " +
                     std::to_string(count));
        const ChainResult want = cpu_chain(host, count);
        const double tol = 2 * tolerance(t);

        LayerChain one_by_one(host, gpu);
        for (const ops::ChainStage& st : one_by_one.stages(kEps, count))
          ops::gemv_chain(std::span(&st, 1), one_by_one.counter);  // stage by stage
        LayerChain L(host, gpu);
        ops::gemv_chain(L.stages(kEps, count), L.counter);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_LE(rel_error(to_floats(L.residual), want.residual), tol);
        EXPECT_LE(rel_error(to_floats(L.residual), to_floats(one_by_one.residual)), tol);
        if (count == 4) {
          EXPECT_LE(rel_error(to_floats(L.qkv), want.qkv), tol);
          EXPECT_LE(rel_error(to_floats(L.qkv), to_floats(one_by_one.qkv)), tol);
        }
        EXPECT_EQ(to_floats(L.counter)[0], 0.0f) << "the counter is left zero";
      }
    }
  }
}

// A stage that reads an earlier stage's output than the one just before it: o_proj -> gate_up ->
// qkv of the residual that gate_up also read; twice, the second call on the first's residual.
TEST(GemvChain, CudaStageReadingAnEarlierStage) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ChainShape s{"qwen2_5_0_5b", 896, 4864, 1152, true};
  auto mixed = [](const LayerChain& L) {
    const std::vector<ops::ChainStage> all = L.stages(kEps);
    return std::vector<ops::ChainStage>{all[0], all[1], all[3]};
  };
  for (DType t : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    const double tol = 2 * tolerance(t);
    LayerChain C(s, t, seed, Device::cpu()), L(C, Device::cuda(0));
    for (int call = 0; call < 2; ++call) {
      ops::gemv_chain(mixed(C), C.counter);
      ops::gemv_chain(mixed(L), L.counter);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LE(rel_error(to_floats(L.residual), to_floats(C.residual)), tol) << "call " << call;
      EXPECT_LE(rel_error(to_floats(L.mlp), to_floats(C.mlp)), tol) << "call " << call;
      EXPECT_LE(rel_error(to_floats(L.qkv), to_floats(C.qkv)), tol) << "call " << call;
      EXPECT_EQ(to_floats(L.counter)[0], 0.0f) << "call " << call;
    }
  }
}

TEST(GemvChain, BoundTellsARaceFromRounding) {
  const ChainShape s{"qwen2_5_0_5b", 896, 4864, 1152, true};
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const LayerChain host(s, DType::bf16, seed, Device::cpu());
  const ChainResult want = cpu_chain(host, 4);
  const ChainResult raced = cpu_chain(host, 4, /*race=*/true);
  EXPECT_GT(rel_error(raced.qkv, want.qkv), 10 * 2 * tolerance(DType::bf16));
}

// Repeated calls on one counter, programmatic launches inside ConstantWeights, graph replays whose
// residual alternates between two starts (a stage that took the replay before's values is off).
TEST(GemvChain, CudaRepeatsOnOneCounterAndInGraphReplays) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ChainShape s{"qwen2_5_0_5b", 896, 4864, 1152, true};
  const DType t = DType::bf16;
  const Device gpu = Device::cuda(0);
  const double tol = 2 * tolerance(t);
  const OwnedTensor start_a = random_host(t, {1, s.hidden}, seed + 1000, -2.0f, 2.0f);
  const OwnedTensor start_b = random_host(t, {1, s.hidden}, seed + 2000, -2.0f, 2.0f);
  const LayerChain host(s, t, seed, Device::cpu());
  const ChainResult want_a = cpu_chain(host, 4, false, start_a);
  const ChainResult want_b = cpu_chain(host, 4, false, start_b);
  // Two chains in a row: the second starts from the first's residual.
  std::vector<float> twice_residual, twice_qkv;
  {
    LayerChain C(host, Device::cpu());
    ops::gemv_chain(C.stages(kEps), C.counter);
    ops::gemv_chain(C.stages(kEps), C.counter);
    twice_residual = to_floats(C.residual);
    twice_qkv = to_floats(C.qkv);
  }

  LayerChain L(host, gpu);
  const OwnedTensor start = to_device(L.residual, gpu);
  StreamOwner stream;
  auto cs = static_cast<cudaStream_t>(stream.get().handle);
  auto step = [&] {
    const ops::ConstantWeights constant_weights;  // programmatic, as forward() launches it
    ASSERT_EQ(cudaMemcpyAsync(L.residual.data(), start.data(), start.view().nbytes(),
                              cudaMemcpyDeviceToDevice, cs),
              cudaSuccess);
    ops::gemv_chain(L.stages(kEps), L.counter, stream.get());
  };
  step();
  {
    const ops::ConstantWeights constant_weights;
    ops::gemv_chain(L.stages(kEps), L.counter, stream.get());
  }
  stream.synchronize();
  EXPECT_LE(rel_error(to_floats(L.residual), twice_residual), tol) << "two calls";
  EXPECT_LE(rel_error(to_floats(L.qkv), twice_qkv), tol) << "two calls";
  EXPECT_EQ(to_floats(L.counter)[0], 0.0f);

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  step();
  ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 6; ++replay) {
    const bool a = replay % 2 == 0;
    copy(a ? start_a : start_b, start.view());
    fill_bytes(L.qkv, 0xFF, stream.get());  // NaN unless the chain writes every element
    ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
    stream.synchronize();
    const ChainResult& want = a ? want_a : want_b;
    EXPECT_LE(rel_error(to_floats(L.residual), want.residual), tol) << "replay " << replay;
    EXPECT_LE(rel_error(to_floats(L.qkv), want.qkv), tol) << "replay " << replay;
    EXPECT_EQ(to_floats(L.counter)[0], 0.0f) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
#endif  // BRAID_WITH_CUDA

}  // namespace
}  // namespace braid::test
