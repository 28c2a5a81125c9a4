// Programmatic dependent launch (src/ops/cuda/pdl.cuh): the decode step's kernels may start
// before the kernel before them has finished, and must not read its results before
// griddepcontrol.wait. Here a chain of those kernels, each reading what the one before it wrote
// (the fused GEMVs with their norm / SwiGLU prologues and residual epilogues, rms_norm, the plain
// GEMV, add_inplace, silu_mul), runs eagerly and as replays of one CUDA graph, against the same
// chain on the CPU. A kernel that read its input early would see the previous replay's values or
// a half-written row: an error the size of a whole layer's update (O(1) relative), where the
// bf16 chain itself stays within a few 1e-3. The chain runs inside ops::ConstantWeights, as the
// model's forward() does, so that the GEMVs read their first weights ahead of their input.
#include <cmath>
#include <thread>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid::test {
namespace {

#if BRAID_WITH_CUDA
struct Layer {
  OwnedTensor norm1, gate_up, down, norm2, o;  // host
  OwnedTensor d_norm1, d_gate_up, d_down, d_norm2, d_o;
};

// The chain's scratch on one device.
struct Scratch {
  OwnedTensor gu, act, normed, proj;
  Scratch(DType t, int64_t m, int64_t hidden, int64_t inter, Device d)
      : gu(poisoned(t, {m, 2 * inter}, d)),
        act(poisoned(t, {m, inter}, d)),
        normed(poisoned(t, {m, hidden}, d)),
        proj(poisoned(t, {m, hidden}, d)) {}
};

// residual += down(swiglu(gate_up(norm1(residual)))); then residual += o(norm2(residual)) through
// rms_norm, gemm and add_inplace (three more kernels); the last layer's SwiGLU through silu_mul
// and gemm_add instead of the fused op. skip_last_add leaves out the last add_inplace: what a
// kernel that ran ahead of its input would lose.
void run_chain(const std::vector<Layer>& layers, bool device, const Tensor& residual,
               Scratch& s, Stream stream, bool skip_last_add = false) {
  constexpr float kEps = 1e-5f;
  const ops::ConstantWeights constant_weights;  // the GEMVs launched as the engine launches them
  for (size_t l = 0; l < layers.size(); ++l) {
    const Layer& L = layers[l];
    auto pick = [&](const OwnedTensor& h, const OwnedTensor& d) { return device ? d.view() : h.view(); };
    ops::rms_norm_gemm(residual, pick(L.norm1, L.d_norm1), kEps, pick(L.gate_up, L.d_gate_up),
                       Tensor{}, s.gu, s.normed, stream);
    if (l + 1 < layers.size()) {
      ops::swiglu_gemm_add(s.gu, pick(L.down, L.d_down), residual, s.act, s.proj, stream);
    } else {
      ops::silu_mul(s.gu, s.act, stream);
      ops::gemm_add(s.act, pick(L.down, L.d_down), Tensor{}, residual, s.proj, stream);
    }
    ops::rms_norm(residual, pick(L.norm2, L.d_norm2), kEps, s.normed, stream);
    ops::gemm(s.normed, pick(L.o, L.d_o), Tensor{}, s.proj, stream);
    if (!(skip_last_add && l + 1 == layers.size())) ops::add_inplace(s.proj, residual, stream);
  }
}

TEST(ProgrammaticLaunch, DependentDecodeChainMatchesTheCpuEagerAndInGraphReplays) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const DType t = DType::bf16;
  const int64_t hidden = 1024, inter = 2816;  // inter / 16 blocks: not a multiple of the SMs
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  std::vector<Layer> layers(6);
  uint64_t k = seed;
  auto weights = [&](int64_t n, int64_t cols) {
    const float a = 2.0f / std::sqrt(static_cast<float>(cols));
    return random_host(t, {n, cols}, ++k, -a, a);
  };
  for (Layer& L : layers) {
    L.norm1 = random_host(t, {hidden}, ++k, 0.5f, 1.5f);
    L.gate_up = weights(2 * inter, hidden);
    L.down = weights(hidden, inter);
    L.norm2 = random_host(t, {hidden}, ++k, 0.5f, 1.5f);
    L.o = weights(hidden, hidden);
    L.d_norm1 = to_device(L.norm1, gpu);
    L.d_gate_up = to_device(L.gate_up, gpu);
    L.d_down = to_device(L.down, gpu);
    L.d_norm2 = to_device(L.norm2, gpu);
    L.d_o = to_device(L.o, gpu);
  }

  for (int64_t m : {1, 4}) {
    SCOPED_TRACE("rows " + std::to_string(m));
    const OwnedTensor start = random_host(t, {m, hidden}, ++k, -2.0f, 2.0f);
    OwnedTensor ref = to_device(start, cpu);
    Scratch cpu_scratch(t, m, hidden, inter, cpu);
    run_chain(layers, /*device=*/false, ref, cpu_scratch, {});
    const std::vector<float> want = to_floats(ref);
    // The bound tells a race from rounding: one update missed is far past it.
    OwnedTensor skipped = to_device(start, cpu);
    run_chain(layers, /*device=*/false, skipped, cpu_scratch, {}, /*skip_last_add=*/true);
    ASSERT_GT(rel_error(to_floats(skipped), want), 0.1);

    const OwnedTensor d_start = to_device(start, gpu);
    OwnedTensor residual = poisoned(t, {m, hidden}, gpu);
    Scratch s(t, m, hidden, inter, gpu);
    StreamOwner stream;
    auto cs = static_cast<cudaStream_t>(stream.get().handle);
    auto step = [&] {
      ASSERT_EQ(cudaMemcpyAsync(residual.data(), d_start.data(), d_start.view().nbytes(),
                                cudaMemcpyDeviceToDevice, cs),
                cudaSuccess);
      run_chain(layers, /*device=*/true, residual, s, stream.get());
    };

    step();  // eager
    stream.synchronize();
    EXPECT_LE(rel_error(to_floats(residual), want), 2e-2) << "eager";

    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    step();
    ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int replay = 0; replay < 8; ++replay) {
      fill_bytes(residual, 0xFF, stream.get());  // read before the copy: NaN
      ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
      stream.synchronize();
      EXPECT_LE(rel_error(to_floats(residual), want), 2e-2) << "graph replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}
#endif  // BRAID_WITH_CUDA

// The promise is the caller's and its thread's: nested scopes stay open until the outermost
// closes, and another thread (another tensor-parallel rank, a server worker) is not covered.
TEST(ProgrammaticLaunch, ConstantWeightsIsPerThreadAndNests) {
  EXPECT_FALSE(ops::ConstantWeights::active());
  {
    const ops::ConstantWeights outer;
    EXPECT_TRUE(ops::ConstantWeights::active());
    {
      const ops::ConstantWeights inner;
      EXPECT_TRUE(ops::ConstantWeights::active());
    }
    EXPECT_TRUE(ops::ConstantWeights::active());
    bool other_thread = true;
    std::thread([&] { other_thread = ops::ConstantWeights::active(); }).join();
    EXPECT_FALSE(other_thread);
  }
  EXPECT_FALSE(ops::ConstantWeights::active());
}

}  // namespace
}  // namespace braid::test
