// moe_experts' one launch at one token (MoeExpertsExtras::barrier): its output is the two
// kernels' bit for bit (same h, same sums in the same order), with fp8 and 16-bit experts, f16
// and bf16 activations, the down rows in a stage of their own or through the ring, shared
// experts, the residual, out aliasing x, blocks with many gate_up items (ring refills) and with
// none, an id that contributes nothing and repeated ids; the counter is left zero, so the next
// call (and a graph replay with new routing) runs again; and the barrier argument is checked on
// every device. The CUDA tests skip without a GPU.
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "braid/stream.h"
#include "ops/fp8_test_util.h"
#include "ops/moe/moe_test_util.h"
#include "test_util.h"

#if BRAID_WITH_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::test {
namespace {

// Where the one launch puts its down rows: a stage of their own, the ring because they do not
// fit beside it, or the ring because BRAID_MOE_ONE_TOKEN_DOWN=ring asks for it.
enum class Down { staged, ring, forced_ring };

struct Case {
  DType dtype;  // of the activations, and of the experts unless fp8
  bool fp8;
  int64_t experts, k, hidden, inter, shared;
  bool residual;
  bool out_is_x;
  Down down;
};

std::string case_name(const Case& c) {
  const char* down[] = {"staged", "ring", "forcedring"};
  return std::string(dtype_name(c.dtype)) + (c.fp8 ? "_fp8" : "") + "_E" +
         std::to_string(c.experts) + "_k" + std::to_string(c.k) + "_H" + std::to_string(c.hidden) +
         "_I" + std::to_string(c.inter) + "_S" + std::to_string(c.shared) +
         (c.residual ? "_res" : "") + (c.out_is_x ? "_outx" : "") + "_" +
         down[static_cast<int>(c.down)];
}

// One token's problem on the GPU: the weights (fp8 with their block scales, or x's dtype), the
// routing, x and the residual.
struct Problem {
  OwnedTensor x, weights, ids, gate_up, down, gate_up_scale, down_scale;
  OwnedTensor shared_gate_up, shared_down, shared_gate_up_scale, shared_down_scale, residual;
};

Problem make_problem(const Case& c, uint64_t seed) {
  const Device gpu = Device::cuda();
  const int64_t width = c.shared * c.inter;
  Problem p;
  p.x = to_device(random_host(c.dtype, {1, c.hidden}, seed), gpu);
  p.weights = to_device(random_host(DType::f32, {1, c.k}, seed + 1, 0.05f, 1.0f), gpu);
  OwnedTensor ids(DType::i32, {1, c.k}, Device::cpu());
  moe::distinct_routing(ids.view(), c.experts, seed + 2);
  p.ids = to_device(ids, gpu);
  p.residual = to_device(random_host(c.dtype, {1, c.hidden}, seed + 7, -2.0f, 2.0f), gpu);
  if (!c.fp8) {
    // Small weights, so that h and the sums stay in range for f16.
    auto w = [&](std::vector<int64_t> shape, uint64_t s) {
      return to_device(random_host(c.dtype, shape, s, -0.05f, 0.05f), gpu);
    };
    p.gate_up = w({c.experts, 2 * c.inter, c.hidden}, seed + 3);
    p.down = w({c.experts, c.hidden, c.inter}, seed + 4);
    if (c.shared > 0) {
      p.shared_gate_up = w({2 * width, c.hidden}, seed + 5);
      p.shared_down = w({c.hidden, width}, seed + 6);
    }
    return p;
  }
  const fp8::Fp8Tensor gu = fp8::weights(c.experts, 2 * c.inter, c.hidden, seed + 3);
  const fp8::Fp8Tensor dn = fp8::weights(c.experts, c.hidden, c.inter, seed + 4);
  p.gate_up = to_device(gu.q, gpu);
  p.gate_up_scale = to_device(gu.scale, gpu);
  p.down = to_device(dn.q, gpu);
  p.down_scale = to_device(dn.scale, gpu);
  if (c.shared > 0) {
    const fp8::Fp8Tensor sgu = fp8::weights(1, 2 * width, c.hidden, seed + 5);
    const fp8::Fp8Tensor sdn = fp8::weights(1, c.hidden, width, seed + 6);
    p.shared_gate_up = to_device(sgu.q.view().reshape({2 * width, c.hidden}), gpu);
    p.shared_gate_up_scale = to_device(sgu.scale.view().reshape({2 * width / 128, c.hidden / 128}), gpu);
    p.shared_down = to_device(sdn.q.view().reshape({c.hidden, width}), gpu);
    p.shared_down_scale = to_device(sdn.scale.view().reshape({c.hidden / 128, width / 128}), gpu);
  }
  return p;
}

// BRAID_MOE_ONE_TOKEN_DOWN=ring for the lifetime of this object, where `on`.
class ForcedRingDown {
 public:
  explicit ForcedRingDown(bool on) : on_(on) {
    if (on_) ::setenv("BRAID_MOE_ONE_TOKEN_DOWN", "ring", 1);
  }
  ~ForcedRingDown() {
    if (on_) ::unsetenv("BRAID_MOE_ONE_TOKEN_DOWN");
  }
  ForcedRingDown(const ForcedRingDown&) = delete;
  ForcedRingDown& operator=(const ForcedRingDown&) = delete;

 private:
  bool on_;
};

// The layer's output with or without the counter (barrier undefined: the two kernels), written
// over x (out_is_x), else over the residual where there is one (as forward() runs it). Each call
// gets fresh copies of x and the residual.
std::vector<uint8_t> run(const Case& c, const Problem& p, const Tensor& barrier) {
  const Device gpu = Device::cuda();
  auto x = to_device(p.x, gpu), res = to_device(p.residual, gpu);
  auto ws = poisoned(DType::f32, {c.k + c.shared, c.inter}, gpu);
  auto out = poisoned(c.dtype, {1, c.hidden}, gpu);
  ops::MoeExpertsExtras extras;
  if (c.shared > 0) {
    extras.shared_gate_up = {p.shared_gate_up, p.shared_gate_up_scale};
    extras.shared_down = {p.shared_down, p.shared_down_scale};
  }
  if (c.residual) extras.residual = res;
  extras.barrier = barrier;
  const Tensor target = c.out_is_x ? x.view() : c.residual ? res.view() : out.view();
  const ForcedRingDown forced(c.down == Down::forced_ring);
#if BRAID_WITH_CUDA
  using Form = cuda::MoeExpertsForm;
  const Form expected = barrier.data == nullptr ? Form::two_kernels
                        : c.down == Down::staged ? Form::one_launch_staged_down
                                                 : Form::one_launch_ring_down;
  EXPECT_EQ(cuda::moe_experts_form(x, p.weights, p.ids, p.gate_up, p.down, p.gate_up_scale,
                                   p.down_scale, extras, ws, target),
            expected)
      << "the form this call was meant to take";
#endif
  ops::moe_experts(x, p.weights, p.ids, p.gate_up, p.down, ws, target, p.gate_up_scale,
                   p.down_scale, extras);
  const OwnedTensor host = to_device(target, Device::cpu());
  const auto* bytes = static_cast<const uint8_t*>(host.view().data);
  return std::vector<uint8_t>(bytes, bytes + host.view().numel() * dtype_size(c.dtype));
}

OwnedTensor zero_counter() {
  OwnedTensor counter(DType::i32, {1}, Device::cpu());
  counter.view().ptr<int32_t>()[0] = 0;
  return to_device(counter, Device::cuda());
}

int32_t counter_value(const Tensor& counter) {
  return to_device(counter, Device::cpu()).view().ptr<int32_t>()[0];
}

class MoeExpertsOneToken : public ::testing::TestWithParam<Case> {};

TEST_P(MoeExpertsOneToken, CudaEqualsTheTwoKernelsBitForBit) {
  BRAID_REQUIRE_CUDA();
  const Case c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Problem p = make_problem(c, seed);
  const OwnedTensor counter = zero_counter();
  const std::vector<uint8_t> two = run(c, p, Tensor{});
  EXPECT_EQ(run(c, p, counter), two);
  EXPECT_EQ(counter_value(counter), 0) << "the kernel leaves its counter zero";
  EXPECT_EQ(run(c, p, counter), two) << "a second call with the same counter";
  EXPECT_EQ(counter_value(counter), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeExpertsOneToken,
    ::testing::Values(
        // Qwen3-30B-A3B-FP8's layer (k 8, H 2048, I 768; 32 of its 128 experts), out in place of
        // the residual as forward() runs it: 6 gate_up items a block through 3 ring entries, the
        // down rows staged; and the same with the down rows through the ring.
        Case{DType::bf16, true, 32, 8, 2048, 768, 0, true, false, Down::staged},
        Case{DType::bf16, true, 32, 8, 2048, 768, 0, true, false, Down::forced_ring},
        // Qwen3-30B-A3B's bf16 layer (its down rows do not fit beside the ring: 2 experts' rows
        // an entry), DeepSeek-V2-Lite's (I 1408, 2 shared experts: one expert's rows an entry)
        // and DeepSeek-OCR's (H 1280: 80 blocks).
        Case{DType::bf16, false, 32, 8, 2048, 768, 0, true, false, Down::ring},
        Case{DType::bf16, false, 16, 6, 2048, 1408, 2, true, false, Down::ring},
        Case{DType::bf16, false, 16, 6, 1280, 896, 2, true, false, Down::ring},
        // f16; shared experts (DeepSeek's); out aliasing x; 24 blocks for 128 items (the last
        // blocks have none); 16 blocks of 64 items each (the ring refilled many times).
        Case{DType::f16, true, 16, 4, 512, 256, 0, false, false, Down::staged},
        Case{DType::bf16, true, 16, 4, 512, 256, 2, true, false, Down::staged},
        Case{DType::bf16, true, 12, 3, 384, 256, 1, false, true, Down::staged},
        Case{DType::f16, true, 8, 2, 256, 128, 0, false, true, Down::staged},
        Case{DType::bf16, true, 64, 8, 256, 1024, 0, true, false, Down::staged},
        // The same small shapes with 16-bit experts, staged and through the ring.
        Case{DType::f16, false, 16, 4, 512, 256, 0, false, false, Down::staged},
        Case{DType::f16, false, 16, 4, 512, 256, 0, false, false, Down::forced_ring},
        Case{DType::bf16, false, 12, 3, 384, 256, 1, false, true, Down::forced_ring},
        Case{DType::bf16, false, 64, 8, 256, 1024, 0, true, false, Down::forced_ring},
        Case{DType::f16, true, 8, 2, 256, 128, 0, false, true, Down::forced_ring}),
    [](const auto& info) { return case_name(info.param); });

// A pair with kMoeNotLocal and a token that chose one expert twice: the same as the two kernels,
// with fp8 experts (down rows staged) and 16-bit ones (through the ring).
TEST(MoeExpertsOneTokenCuda, IdsThatContributeNothingOrRepeat) {
  BRAID_REQUIRE_CUDA();
  for (const Case& c : {Case{DType::bf16, true, 16, 4, 512, 128, 1, true, false, Down::staged},
                        Case{DType::bf16, false, 16, 4, 512, 128, 1, true, false, Down::forced_ring}}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(case_name(c) + ", seed " + std::to_string(seed));
    Problem p = make_problem(c, seed);
    const OwnedTensor counter = zero_counter();
    for (const std::vector<int32_t>& ids : {std::vector<int32_t>{3, ops::kMoeNotLocal, 7, 1},
                                            std::vector<int32_t>{5, 5, 2, 5},
                                            std::vector<int32_t>{ops::kMoeNotLocal, ops::kMoeNotLocal,
                                                                 ops::kMoeNotLocal, ops::kMoeNotLocal}}) {
      OwnedTensor host(DType::i32, {1, 4}, Device::cpu());
      std::memcpy(host.view().data, ids.data(), ids.size() * sizeof(int32_t));
      p.ids = to_device(host, Device::cuda());
      EXPECT_EQ(run(c, p, counter), run(c, p, Tensor{})) << "ids " << ids[0] << " " << ids[1]
                                                         << " " << ids[2] << " " << ids[3];
      EXPECT_EQ(counter_value(counter), 0);
    }
  }
}

#if BRAID_WITH_CUDA
// Captured once and replayed with other routing each time: every replay equals the two kernels.
TEST(MoeExpertsOneTokenCuda, GraphReplayFollowsNewRouting) {
  BRAID_REQUIRE_CUDA();
  const Case c{DType::bf16, true, 64, 6, 1024, 256, 0, true, false, Down::staged};
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Problem p = make_problem(c, seed);
  const Device gpu = Device::cuda();
  const OwnedTensor counter = zero_counter();
  auto x = to_device(p.x, gpu), res = to_device(p.residual, gpu);
  auto ws = poisoned(DType::f32, {c.k, c.inter}, gpu);
  ops::MoeExpertsExtras extras;
  extras.residual = res;
  extras.barrier = counter;
  StreamOwner stream;
  auto s = static_cast<cudaStream_t>(stream.get().handle);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    ops::moe_experts(x, p.weights, p.ids, p.gate_up, p.down, ws, res, p.gate_up_scale,
                     p.down_scale, extras, stream.get());
  } catch (const Error& e) {
    cudaStreamEndCapture(s, &graph);
    FAIL() << "moe_experts failed under capture: " << e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 4; ++replay) {
    OwnedTensor ids(DType::i32, {1, c.k}, Device::cpu());
    moe::distinct_routing(ids.view(), c.experts, seed + 100 + replay);
    copy(ids, p.ids);
    copy(p.residual, res);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    stream.synchronize();
    const OwnedTensor got = to_device(res, Device::cpu());
    const auto* bytes = static_cast<const uint8_t*>(got.view().data);
    const std::vector<uint8_t> replayed(bytes, bytes + got.view().numel() * 2);
    EXPECT_EQ(replayed, run(c, p, Tensor{})) << "replay " << replay;
  }
  EXPECT_EQ(counter_value(counter), 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
#endif

// The counter is checked wherever the op runs (the CPU ignores its value).
TEST(MoeExpertsOneToken, BadBarrierIsNamed) {
  const int64_t experts = 8, k = 2, hidden = 64, inter = 32;
  OwnedTensor x = random_host(DType::bf16, {1, hidden}, 1);
  OwnedTensor w = random_host(DType::f32, {1, k}, 2, 0.1f, 1.0f);
  OwnedTensor ids(DType::i32, {1, k}, Device::cpu());
  moe::distinct_routing(ids.view(), experts, 3);
  OwnedTensor gu = random_host(DType::bf16, {experts, 2 * inter, hidden}, 4);
  OwnedTensor dn = random_host(DType::bf16, {experts, hidden, inter}, 5);
  OwnedTensor ws(DType::f32, {k, inter}, Device::cpu()), out(DType::bf16, {1, hidden}, Device::cpu());
  OwnedTensor good(DType::i32, {1}, Device::cpu());
  good.view().ptr<int32_t>()[0] = 0;
  OwnedTensor wide(DType::i32, {2}, Device::cpu()), f32(DType::f32, {1}, Device::cpu());
  auto call = [&](const Tensor& barrier) {
    ops::MoeExpertsExtras extras;
    extras.barrier = barrier;
    ops::moe_experts(x, w, ids, gu, dn, ws, out, Tensor{}, Tensor{}, extras);
  };
  call(good);  // accepted, and ignored on the CPU
  for (const Tensor& bad : {wide.view(), f32.view()}) {
    try {
      call(bad);
      ADD_FAILURE() << "no error for a bad barrier";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("'barrier'"), std::string::npos) << err.what();
    }
  }
}

}  // namespace
}  // namespace braid::test
