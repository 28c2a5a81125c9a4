// GEMV (gemm's fast path for m <= 16 on CUDA): ops::gemm against the CPU reference on the decode
// shapes of Qwen2.5-0.5B, Llama-3.2-1B and Llama-2-7B, every launch shape the kernel has (warp
// splits, clusters, tails), strided views, the cuBLASLt fallback, graph capture, and when it
// applies. GEMV exists only in CUDA builds; a CPU-only build has one test that skips and says so.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/gemm/gemm_lt.h"
#include "ops/cuda/gemv/gemv.h"
#endif

namespace braid::test {
namespace {

#if !BRAID_WITH_CUDA
TEST(Gemv, CudaOnly) { GTEST_SKIP() << "CPU-only build: GEMV is a CUDA kernel, nothing to test"; }
#else

struct GemvCase {
  std::string label;  // "qwen2_5_0_5b_down", "tail"
  DType in, out;
  bool bias;
  int64_t m, n, k;
};

std::string case_name(const GemvCase& c) {
  return c.label + "_" + std::string(dtype_name(c.in)) + "_to_" + std::string(dtype_name(c.out)) +
         (c.bias ? "_bias" : "") + "_m" + std::to_string(c.m) + "_" + std::to_string(c.n) + "x" +
         std::to_string(c.k);
}
void PrintTo(const GemvCase& c, std::ostream* os) { *os << case_name(c); }

struct ModelShape {
  const char* label;
  int64_t n, k;
};

// [out_features, in_features] of each projection (gate_up: gate and up stacked).
const ModelShape kModelShapes[] = {
    {"qwen2_5_0_5b_qkv", 1152, 896},     {"qwen2_5_0_5b_o", 896, 896},
    {"qwen2_5_0_5b_gate_up", 9728, 896}, {"qwen2_5_0_5b_down", 896, 4864},
    {"qwen2_5_0_5b_lm_head", 151936, 896},
    {"llama_3_2_1b_qkv", 3072, 2048},    {"llama_3_2_1b_o", 2048, 2048},
    {"llama_3_2_1b_gate_up", 16384, 2048}, {"llama_3_2_1b_down", 2048, 8192},
    {"llama_3_2_1b_lm_head", 128256, 2048},
    {"llama_2_7b_qkv", 12288, 4096},     {"llama_2_7b_o", 4096, 4096},
    {"llama_2_7b_gate_up", 22016, 4096}, {"llama_2_7b_down", 4096, 11008},
    {"llama_2_7b_lm_head", 32000, 4096},
};

// Each model shape at m = 1, 2, 4, 7, 16. The CPU reference costs m * n * k multiply-adds, so n is
// cut where that passes 1.4e8 (m = 1) or 2e7 (m > 1), to a multiple of 16 less 3 (a partial last
// tile). In all about 1.8e9 multiply-adds, most of them at m = 1 on the full shapes.
std::vector<GemvCase> model_cases() {
  std::vector<GemvCase> cases;
  int i = 0;
  for (const ModelShape& s : kModelShapes) {
    for (int64_t m : {1, 2, 4, 7, 16}) {
      const double budget = m == 1 ? 1.4e8 : 2e7;
      int64_t n = s.n;
      if (double(m) * double(n) * double(s.k) > budget)
        n = std::max<int64_t>(16, static_cast<int64_t>(budget / double(m * s.k)) / 16 * 16) - 3;
      // Vary the dtypes and the bias over the cases; Qwen's qkv has a bias, as the model does.
      const DType in = i % 3 == 2 ? DType::f16 : DType::bf16;
      const DType out = i % 2 == 1 ? DType::f32 : in;
      const bool bias = i % 4 == 0 || std::string(s.label) == "qwen2_5_0_5b_qkv";
      cases.push_back({s.label, in, out, bias, m, n, s.k});
      ++i;
    }
  }
  return cases;
}

// Shapes that are awkward for the kernel: one output column, partial tiles, k not a multiple of
// 32 (a partial last step), m on both sides of 8 (the kernel's two variants).
std::vector<GemvCase> awkward_cases() {
  return {
      {"tiny", DType::bf16, DType::bf16, true, 1, 1, 8},
      {"tail", DType::f16, DType::f32, false, 3, 17, 24},
      {"tail", DType::bf16, DType::f32, true, 8, 33, 1000},
      {"tail", DType::bf16, DType::bf16, false, 9, 777, 1000},
      {"tail", DType::f16, DType::f16, true, 16, 100, 4104},
      {"tail", DType::bf16, DType::bf16, false, 5, 4099, 128},
  };
}

struct Inputs {
  OwnedTensor a, w, bias;  // host
  OwnedTensor da, dw, dbias;
  Tensor bias_view() const { return bias.view().data ? bias.view() : Tensor{}; }
  Tensor dbias_view() const { return dbias.view().data ? dbias.view() : Tensor{}; }
};

Inputs make_inputs(const GemvCase& c, uint64_t seed) {
  Inputs in;
  in.a = random_host(c.in, {c.m, c.k}, seed);
  in.w = random_host(c.in, {c.n, c.k}, seed + 1);
  if (c.bias) in.bias = random_host(c.out, {c.n}, seed + 2);
  in.da = to_device(in.a, Device::cuda());
  in.dw = to_device(in.w, Device::cuda());
  if (c.bias) in.dbias = to_device(in.bias, Device::cuda());
  return in;
}

class GemvDiff : public ::testing::TestWithParam<GemvCase> {};

TEST_P(GemvDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const GemvCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Inputs in = make_inputs(c, seed);
  auto ref = poisoned(c.out, {c.m, c.n}, Device::cpu());
  ops::gemm(in.a, in.w, in.bias_view(), ref);

  auto dout = poisoned(c.out, {c.m, c.n}, Device::cuda());
  ASSERT_TRUE(cuda::gemv_applicable(in.da, in.dw, in.dbias_view(), dout))
      << "this case should take the GEMV path";
  ops::gemm(in.da, in.dw, in.dbias_view(), dout);
  RecordProperty("launch", cuda::describe(cuda::gemv_launch_for(c.m, c.n, c.k)));
  EXPECT_LE(rel_error(to_floats(dout), to_floats(ref)), tolerance(c.out));
}

INSTANTIATE_TEST_SUITE_P(ModelShapes, GemvDiff, ::testing::ValuesIn(model_cases()),
                         [](const auto& info) { return case_name(info.param); });
INSTANTIATE_TEST_SUITE_P(Awkward, GemvDiff, ::testing::ValuesIn(awkward_cases()),
                         [](const auto& info) { return case_name(info.param); });

// Every launch shape the kernel supports, whatever the heuristic picks: warps of a block sharing
// a tile, one tile per warp, blocks whose last tiles are past n (n = 100 is 7 tiles), more k
// slices than k has steps (k = 40: empty slices), a block of 6 warps.
std::string launch_name(const cuda::GemvLaunch& l) {
  return "t" + std::to_string(l.tiles_per_block) + "_s" + std::to_string(l.split);
}

class GemvLaunches : public ::testing::TestWithParam<cuda::GemvLaunch> {};

TEST_P(GemvLaunches, MatchReference) {
  BRAID_REQUIRE_CUDA();
  const cuda::GemvLaunch launch = GetParam();
  for (const GemvCase& c : {GemvCase{"l", DType::bf16, DType::f32, true, 1, 100, 2000},
                            GemvCase{"l", DType::f16, DType::f16, false, 8, 100, 2000},
                            GemvCase{"l", DType::bf16, DType::bf16, true, 9, 37, 40},
                            GemvCase{"l", DType::bf16, DType::f32, false, 16, 250, 1032}}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " " + case_name(c));
    const Inputs in = make_inputs(c, seed);
    auto ref = poisoned(c.out, {c.m, c.n}, Device::cpu());
    ops::gemm(in.a, in.w, in.bias_view(), ref);
    auto dout = poisoned(c.out, {c.m, c.n}, Device::cuda());
    cuda::gemv(in.da, in.dw, in.dbias_view(), dout, launch, {});
    EXPECT_LE(rel_error(to_floats(dout), to_floats(ref)), tolerance(c.out));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvLaunches,
                         ::testing::Values(cuda::GemvLaunch{1, 8}, cuda::GemvLaunch{2, 4},
                                           cuda::GemvLaunch{4, 2}, cuda::GemvLaunch{8, 1},
                                           cuda::GemvLaunch{1, 1}, cuda::GemvLaunch{3, 2},
                                           cuda::GemvLaunch{1, 5}),
                         [](const auto& info) { return launch_name(info.param); });

// a and out are row windows of wider tensors: a's row stride keeps rows 16-byte aligned (GEMV
// applies), out's is odd. Columns outside out's window must stay untouched.
TEST(GemvStrided, WindowsMatchReference) {
  BRAID_REQUIRE_CUDA();
  for (DType in : {DType::bf16, DType::f16}) {
    for (DType out_t : {in, DType::f32}) {
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE("seed " + std::to_string(seed) + " in " + std::string(dtype_name(in)) +
                   " out " + std::string(dtype_name(out_t)));
      const int64_t m = 11, n = 203, k = 1024;
      auto a_wide = random_host(in, {m, k + 24}, seed);
      auto w = random_host(in, {n, k}, seed + 1);
      auto b = random_host(out_t, {n}, seed + 2);
      auto out_wide = poisoned(out_t, {m, n + 11}, Device::cpu());
      const Tensor a = a_wide.view().slice(1, 8, 8 + k);
      ops::gemm(a, w, b, out_wide.view().slice(1, 5, 5 + n));

      auto da_wide = to_device(a_wide, Device::cuda());
      auto dw = to_device(w, Device::cuda());
      auto db = to_device(b, Device::cuda());
      auto dout_wide = poisoned(out_t, {m, n + 11}, Device::cuda());
      const Tensor da = da_wide.view().slice(1, 8, 8 + k);
      const Tensor dout = dout_wide.view().slice(1, 5, 5 + n);
      ASSERT_TRUE(cuda::gemv_applicable(da, dw, db, dout));
      ops::gemm(da, dw, db, dout);

      auto got_wide = to_device(dout_wide, Device::cpu());
      EXPECT_LE(rel_error(to_floats(got_wide.view().slice(1, 5, 5 + n)),
                          to_floats(out_wide.view().slice(1, 5, 5 + n))),
                tolerance(out_t));
      for (float v : to_floats(got_wide.view().slice(1, 0, 5))) EXPECT_TRUE(std::isnan(v));
      for (float v : to_floats(got_wide.view().slice(1, 5 + n, n + 11))) EXPECT_TRUE(std::isnan(v));
    }
  }
}

// Where GEMV does not apply (k not a multiple of 8, rows of a not 16-byte aligned, m > 16),
// ops::gemm still gives the right answer, through cuBLASLt.
TEST(GemvFallback, CublasLtPathStillCorrect) {
  BRAID_REQUIRE_CUDA();
  struct Case {
    const char* why;
    int64_t m, n, k, a_pad;  // a is [m, k] inside [m, k + a_pad]
  };
  for (const Case& c : {Case{"odd k", 1, 4096, 1001, 0}, Case{"odd k", 7, 896, 4863, 0},
                        Case{"k % 8 = 4", 4, 300, 2052, 0},
                        Case{"unaligned a rows", 4, 500, 1024, 3}, Case{"m = 17", 17, 256, 512, 0}}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(std::string(c.why) + " m " + std::to_string(c.m) + " seed " + std::to_string(seed));
    auto a_wide = random_host(DType::bf16, {c.m, c.k + c.a_pad}, seed);
    auto w = random_host(DType::bf16, {c.n, c.k}, seed + 1);
    auto ref = poisoned(DType::bf16, {c.m, c.n}, Device::cpu());
    ops::gemm(a_wide.view().slice(1, 0, c.k), w, Tensor{}, ref);

    auto da_wide = to_device(a_wide, Device::cuda());
    auto dw = to_device(w, Device::cuda());
    auto dout = poisoned(DType::bf16, {c.m, c.n}, Device::cuda());
    const Tensor da = da_wide.view().slice(1, 0, c.k);
    EXPECT_FALSE(cuda::gemv_applicable(da, dw, Tensor{}, dout));
    ops::gemm(da, dw, Tensor{}, dout);
    EXPECT_LE(rel_error(to_floats(dout), to_floats(ref)), tolerance(DType::bf16));
  }
}

// A GEMV needs no plan and no first call: it can be captured in a CUDA graph straight away, and
// the replay computes the same result.
TEST(GemvGraph, CapturedCallMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const GemvCase c{"graph", DType::bf16, DType::bf16, true, 2, 256, 4096};
  const Inputs in = make_inputs(c, seed);
  auto ref = poisoned(c.out, {c.m, c.n}, Device::cpu());
  ops::gemm(in.a, in.w, in.bias_view(), ref);
  auto dout = poisoned(c.out, {c.m, c.n}, Device::cuda());

  StreamOwner stream;
  const size_t plans = cuda::gemm_plan_count();
  auto s = static_cast<cudaStream_t>(stream.get().handle);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    ops::gemm(in.da, in.dw, in.dbias_view(), dout, stream.get());
  } catch (const Error& e) {
    cudaStreamEndCapture(s, &graph);
    FAIL() << "gemm failed under capture: " << e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  EXPECT_EQ(cuda::gemm_plan_count(), plans) << "a GEMV-sized gemm made a cuBLASLt plan";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  stream.synchronize();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT_LE(rel_error(to_floats(dout), to_floats(ref)), tolerance(c.out));
}

// ---- without a GPU: when GEMV applies, the launch heuristic's limits, bad launches ----

Tensor fake_at(uintptr_t address, DType dtype, std::initializer_list<int64_t> shape) {
  return Tensor(reinterpret_cast<void*>(address), dtype, Device::cuda(0), shape);
}

TEST(GemvApplicable, FollowsTheRules) {
  const Tensor w = fake_cuda(DType::bf16, {4096, 4096});
  const Tensor out1 = fake_cuda(DType::bf16, {1, 4096});
  EXPECT_TRUE(cuda::gemv_applicable(fake_cuda(DType::bf16, {1, 4096}), w, Tensor{}, out1));
  EXPECT_TRUE(cuda::gemv_applicable(fake_cuda(DType::f16, {1, 4096}),
                                    fake_cuda(DType::f16, {4096, 4096}), Tensor{}, out1));
  EXPECT_TRUE(cuda::gemv_applicable(fake_cuda(DType::bf16, {16, 4096}), w, Tensor{},
                                    fake_cuda(DType::f32, {16, 4096})));
  EXPECT_FALSE(cuda::gemv_applicable(fake_cuda(DType::bf16, {17, 4096}), w, Tensor{},
                                     fake_cuda(DType::bf16, {17, 4096})))
      << "m > 16";
  EXPECT_FALSE(cuda::gemv_applicable(fake_cuda(DType::bf16, {1, 4092}),
                                     fake_cuda(DType::bf16, {4096, 4092}), Tensor{}, out1))
      << "k % 8 != 0";
  EXPECT_FALSE(cuda::gemv_applicable(fake_at(0x1008, DType::bf16, {1, 4096}), w, Tensor{}, out1))
      << "a not 16-byte aligned";
  EXPECT_FALSE(cuda::gemv_applicable(fake_cuda(DType::bf16, {1, 4096}),
                                     fake_at(0x1002, DType::bf16, {4096, 4096}), Tensor{}, out1))
      << "w not 16-byte aligned";
  // Rows of a every 4100 elements (8200 bytes): misaligned rows unless there is only one.
  const Tensor a_wide = fake_cuda(DType::bf16, {4, 4100});
  EXPECT_FALSE(cuda::gemv_applicable(a_wide.slice(1, 0, 4096), w, Tensor{},
                                     fake_cuda(DType::bf16, {4, 4096})));
  EXPECT_TRUE(cuda::gemv_applicable(a_wide.slice(0, 0, 1).slice(1, 0, 4096), w, Tensor{}, out1));
  EXPECT_TRUE(cuda::gemv_applicable(fake_cuda(DType::bf16, {4, 4104}).slice(1, 8, 4104), w,
                                    Tensor{}, fake_cuda(DType::bf16, {4, 4096})));
  const OwnedTensor cpu_a(DType::bf16, {1, 64}, Device::cpu()), cpu_w(DType::bf16, {8, 64}, Device::cpu()),
      cpu_out(DType::bf16, {1, 8}, Device::cpu());
  EXPECT_FALSE(cuda::gemv_applicable(cpu_a, cpu_w, Tensor{}, cpu_out)) << "CPU tensors";
}

// The heuristic stays inside the kernel's limits on every model shape, and spreads the
// narrowest one (Qwen2.5-0.5B's down projection: 56 tiles) over at least 8 warps per tile.
TEST(GemvLaunchFor, WithinLimits) {
  for (const ModelShape& s : kModelShapes) {
    for (int64_t m : {1, 7, 16}) {
      SCOPED_TRACE(std::string(s.label) + " m " + std::to_string(m));
      const cuda::GemvLaunch l = cuda::gemv_launch_for(m, s.n, s.k);
      EXPECT_GE(l.tiles_per_block, 1);
      EXPECT_GE(l.split, 1);
      EXPECT_LE(l.tiles_per_block * l.split, 8);
    }
  }
  EXPECT_GE(cuda::gemv_launch_for(1, 896, 4864).split, 8);
}

TEST(GemvLaunchErrors, BadLaunchesAreRefused) {
  const Tensor a = fake_cuda(DType::bf16, {1, 64}), w = fake_cuda(DType::bf16, {32, 64}),
               out = fake_cuda(DType::bf16, {1, 32});
  expect_error([&] { cuda::gemv(a, w, Tensor{}, out, cuda::GemvLaunch{4, 4}, {}); },
               ErrorKind::invalid_argument, {"gemv", "tiles_per_block * split in 1..8", "4 * 4"});
  expect_error([&] { cuda::gemv(a, w, Tensor{}, out, cuda::GemvLaunch{1, 0}, {}); },
               ErrorKind::invalid_argument, {"gemv", "tiles_per_block * split", "1 * 0"});
  expect_error([&] { cuda::gemv(a, w, Tensor{}, out, cuda::GemvLaunch{0, 8}, {}); },
               ErrorKind::invalid_argument, {"gemv", "tiles_per_block * split", "0 * 8"});
}

#endif  // BRAID_WITH_CUDA

}  // namespace
}  // namespace braid::test
