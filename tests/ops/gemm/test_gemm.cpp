// gemm: cuBLASLt against the CPU reference (dense, strided and unaligned views, graph capture),
// the reference against hand-computed values, and argument errors.
#include <cstdio>

#include "braid/ops.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/gemm/gemm_lt.h"
#endif

namespace braid::test {
namespace {

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

struct GemmCase {
  DType in, out;
  bool bias;
  int64_t m, n, k;
};

std::string case_name(const GemmCase& c) {
  return std::string(dtype_name(c.in)) + "_to_" + std::string(dtype_name(c.out)) +
         (c.bias ? "_bias_" : "_") + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
         std::to_string(c.k);
}
void PrintTo(const GemmCase& c, std::ostream* os) { *os << case_name(c); }

// Tolerance by the output dtype. For f32 outputs the only difference left is the order of the fp32
// sums (cuBLASLt: tiled, sometimes split-k) against the fp64 reference; on an H100 it measured
// 1e-7 .. 2.5e-6 for the shapes below (largest at k = 4096 with split-k), inside fp32's 1e-5.
class GemmDiff : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto a = random_host(c.in, {c.m, c.k}, seed);
  auto w = random_host(c.in, {c.n, c.k}, seed + 1);
  OwnedTensor b = c.bias ? random_host(c.out, {c.n}, seed + 2) : OwnedTensor();
  const Tensor bias = c.bias ? b.view() : Tensor{};
  auto ref = poisoned(c.out, {c.m, c.n}, Device::cpu());
  ops::gemm(a, w, bias, ref);

  auto da = to_device(a, Device::cuda());
  auto dw = to_device(w, Device::cuda());
  OwnedTensor db = c.bias ? to_device(b, Device::cuda()) : OwnedTensor();
  const Tensor dbias = c.bias ? db.view() : Tensor{};
  auto dout = poisoned(c.out, {c.m, c.n}, Device::cuda());
  ops::gemm(da, dw, dbias, dout);
#if BRAID_WITH_CUDA
  RecordProperty("cublaslt_algo", cuda::gemm_plan_description(da, dw, dbias, dout));
#endif
  const double err = rel_error(to_floats(dout), to_floats(ref));
  RecordProperty("rel_error", sci(err));
  EXPECT_LE(err, tolerance(c.out));
}

// CPU reference cost (m*n*k MACs) summed over this list stays near 1.3e9.
INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmDiff,
    ::testing::Values(
        GemmCase{DType::bf16, DType::bf16, false, 1, 4096, 4096},  // decode GEMV
        GemmCase{DType::f16, DType::f16, true, 1, 4096, 4096},
        GemmCase{DType::bf16, DType::f32, false, 7, 896, 4864},
        GemmCase{DType::f16, DType::f32, false, 7, 1000, 896},
        GemmCase{DType::bf16, DType::bf16, true, 33, 1000, 896},
        GemmCase{DType::f16, DType::f16, false, 33, 1000, 896},
        GemmCase{DType::bf16, DType::bf16, false, 128, 11008, 256},
        GemmCase{DType::f16, DType::f16, true, 128, 2048, 256},
        GemmCase{DType::bf16, DType::bf16, true, 5, 777, 1001},  // k, n not multiples of 8
        GemmCase{DType::f16, DType::f32, false, 3, 1000, 1001},
        GemmCase{DType::bf16, DType::f32, false, 300, 520, 136},
        GemmCase{DType::f16, DType::f16, true, 1, 1, 8},
        GemmCase{DType::bf16, DType::bf16, true, 3, 5, 1},
        GemmCase{DType::f16, DType::f32, false, 1, 4096, 4096},
        GemmCase{DType::bf16, DType::bf16, false, 5, 151936, 896}),  // Qwen2 LM head
    [](const auto& info) { return case_name(info.param); });

// a and out are column windows of wider tensors (row strides that are not multiples of 8,
// pointers that are not 16-byte aligned), and so is the bias. Columns outside out's window must
// stay untouched.
TEST(GemmStrided, CudaMatchesReferenceOnUnalignedViews) {
  BRAID_REQUIRE_CUDA();
  for (DType in : {DType::bf16, DType::f16}) {
    for (DType out_t : {in, DType::f32}) {
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE("seed " + std::to_string(seed) + " in " + std::string(dtype_name(in)) +
                   " out " + std::string(dtype_name(out_t)));
      const int64_t m = 19, n = 203, k = 77;
      auto a_wide = random_host(in, {m, k + 5}, seed);
      auto w = random_host(in, {n, k}, seed + 1);
      auto b_wide = random_host(out_t, {n + 1}, seed + 2);
      auto out_wide = poisoned(out_t, {m, n + 11}, Device::cpu());
      const Tensor a = a_wide.view().slice(1, 3, 3 + k);
      const Tensor bias = b_wide.view().slice(0, 1, n + 1);
      ops::gemm(a, w, bias, out_wide.view().slice(1, 5, 5 + n));

      auto da_wide = to_device(a_wide, Device::cuda());
      auto dw = to_device(w, Device::cuda());
      auto db_wide = to_device(b_wide, Device::cuda());
      auto dout_wide = poisoned(out_t, {m, n + 11}, Device::cuda());
      const Tensor dbias = db_wide.view().slice(0, 1, n + 1);
      ops::gemm(da_wide.view().slice(1, 3, 3 + k), dw, dbias, dout_wide.view().slice(1, 5, 5 + n));

      auto got_wide = to_device(dout_wide, Device::cpu());
      EXPECT_LE(rel_error(to_floats(got_wide.view().slice(1, 5, 5 + n)),
                          to_floats(out_wide.view().slice(1, 5, 5 + n))),
                tolerance(out_t));
      for (float v : to_floats(got_wide.view().slice(1, 0, 5))) EXPECT_TRUE(std::isnan(v));
      for (float v : to_floats(got_wide.view().slice(1, 5 + n, n + 11))) EXPECT_TRUE(std::isnan(v));
    }
  }
}

#if BRAID_WITH_CUDA
// After a first call has made the plan, a gemm must be capturable in a CUDA graph (no
// allocation, no synchronisation) and the captured launch must compute the same result.
TEST(GemmGraph, CapturedAfterFirstCallMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 4, n = 640, k = 384;
  auto a = random_host(DType::bf16, {m, k}, seed);
  auto w = random_host(DType::bf16, {n, k}, seed + 1);
  auto b = random_host(DType::bf16, {n}, seed + 2);
  auto ref = poisoned(DType::bf16, {m, n}, Device::cpu());
  ops::gemm(a, w, b, ref);

  auto da = to_device(a, Device::cuda());
  auto dw = to_device(w, Device::cuda());
  auto db = to_device(b, Device::cuda());
  auto warm = poisoned(DType::bf16, {m, n}, Device::cuda());
  auto dout = poisoned(DType::bf16, {m, n}, Device::cuda());
  StreamOwner stream;
  ops::gemm(da, dw, db, warm, stream.get());  // makes the plan
  stream.synchronize();
  const size_t plans = cuda::gemm_plan_count();

  auto s = static_cast<cudaStream_t>(stream.get().handle);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    ops::gemm(da, dw, db, dout, stream.get());
  } catch (const Error& e) {
    cudaStreamEndCapture(s, &graph);
    FAIL() << "gemm failed under capture: " << e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  EXPECT_EQ(cuda::gemm_plan_count(), plans) << "the captured call made a new plan";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  stream.synchronize();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT_LE(rel_error(to_floats(dout), to_floats(ref)), tolerance(DType::bf16));
}
#endif

TEST(GemmReference, MatchesHandComputedValues) {
  // a [2, 4], w [3, 4], bias [3]: every value and every sum is exact in bf16 and f32.
  const float a_v[] = {1, 2, 3, 4, -1, 0, 0.5f, 2};
  const float w_v[] = {1, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1};
  const float b_v[] = {0.5f, -1, 2};
  const float with_bias[] = {1.5f, 5, 12, -0.5f, 1, 3.5f};
  const float without_bias[] = {1, 6, 10, -1, 2, 1.5f};
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    OwnedTensor a(t, {2, 4}, Device::cpu()), w(t, {3, 4}, Device::cpu()), b(t, {3}, Device::cpu());
    for (int i = 0; i < 8; ++i) store_from_float(a.data(), t, i, a_v[i]);
    for (int i = 0; i < 12; ++i) store_from_float(w.data(), t, i, w_v[i]);
    for (int i = 0; i < 3; ++i) store_from_float(b.data(), t, i, b_v[i]);
    auto out = poisoned(t, {2, 3}, Device::cpu());
    ops::gemm(a, w, b, out);
    EXPECT_EQ(to_floats(out), std::vector<float>(with_bias, with_bias + 6));
    auto out32 = poisoned(DType::f32, {2, 3}, Device::cpu());
    ops::gemm(a, w, Tensor{}, out32);
    EXPECT_EQ(to_floats(out32), std::vector<float>(without_bias, without_bias + 6));
  }
}

TEST(GemmReference, StridedRowsAreRespected) {
  // a is a column window of a wider tensor, out a window of a wider output.
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto a_wide = random_host(DType::bf16, {5, 40}, seed);
  auto w = random_host(DType::bf16, {6, 33}, seed + 1);
  auto out_wide = poisoned(DType::f32, {5, 9}, Device::cpu());
  const Tensor a = a_wide.view().slice(1, 2, 35);
  ops::gemm(a, w, Tensor{}, out_wide.view().slice(1, 1, 7));

  OwnedTensor a_dense(DType::bf16, {5, 33}, Device::cpu());
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t j = 0; j < 33; ++j)
      store_from_float(a_dense.data(), DType::bf16, r * 33 + j,
                       load_as_float(a_wide.data(), DType::bf16, r * 40 + 2 + j));
  auto out_dense = poisoned(DType::f32, {5, 6}, Device::cpu());
  ops::gemm(a_dense, w, Tensor{}, out_dense);
  EXPECT_EQ(to_floats(out_wide.view().slice(1, 1, 7)), to_floats(out_dense));
  for (float v : to_floats(out_wide.view().slice(1, 0, 1))) EXPECT_TRUE(std::isnan(v));
  for (float v : to_floats(out_wide.view().slice(1, 7, 9))) EXPECT_TRUE(std::isnan(v));
}

TEST(GemmReference, NoRowsIsNoWork) {
  OwnedTensor a(DType::bf16, {0, 8}, Device::cpu()), w(DType::bf16, {3, 8}, Device::cpu()),
      out(DType::bf16, {0, 3}, Device::cpu());
  EXPECT_NO_THROW(ops::gemm(a, w, Tensor{}, out));
}

TEST(GemmErrors, NameTheArgument) {
  const Device cpu = Device::cpu();
  OwnedTensor a(DType::bf16, {2, 8}, cpu), w(DType::bf16, {3, 8}, cpu), b(DType::bf16, {3}, cpu),
      out(DType::bf16, {2, 3}, cpu);
  OwnedTensor w_k7(DType::bf16, {3, 7}, cpu), w_f32(DType::f32, {3, 8}, cpu),
      a_i32(DType::i32, {2, 8}, cpu), b_4(DType::bf16, {4}, cpu), b_f16(DType::f16, {3}, cpu),
      out_bad(DType::bf16, {2, 4}, cpu), out_i32(DType::i32, {2, 3}, cpu),
      out_f16(DType::f16, {2, 3}, cpu), a_3d(DType::bf16, {1, 2, 8}, cpu),
      w_wide(DType::bf16, {3, 10}, cpu);

  expect_error([&] { ops::gemm(a, w_k7, b, out); }, ErrorKind::shape,
               {"gemm", "'w'", "8", "[3, 7]"});
  expect_error([&] { ops::gemm(a_i32, w, b, out); }, ErrorKind::dtype, {"gemm", "'a'", "i32"});
  expect_error([&] { ops::gemm(a, w_f32, b, out); }, ErrorKind::dtype, {"'w'", "bf16", "f32"});
  expect_error([&] { ops::gemm(a, w, b_4, out); }, ErrorKind::shape, {"'bias'", "[3]", "[4]"});
  expect_error([&] { ops::gemm(a, w, b_f16, out); }, ErrorKind::dtype,
               {"'bias'", "bf16", "f16"});
  expect_error([&] { ops::gemm(a, w, b, out_bad); }, ErrorKind::shape,
               {"'out'", "[2, 3]", "[2, 4]"});
  expect_error([&] { ops::gemm(a, w, b, out_i32); }, ErrorKind::dtype, {"'out'", "i32"});
  expect_error([&] { ops::gemm(a, w, b, out_f16); }, ErrorKind::dtype,
               {"'out'", "bf16 or f32", "f16"});
  expect_error([&] { ops::gemm(a_3d, w, b, out); }, ErrorKind::shape, {"'a'", "2 dimensions"});
  expect_error([&] { ops::gemm(Tensor{}, w, b, out); }, ErrorKind::invalid_argument, {"'a'"});
  expect_error([&] { ops::gemm(a, w_wide.view().slice(1, 0, 8), b, out); }, ErrorKind::shape,
               {"'w'", "contiguous"});
  Tensor a_overlap = a.view();
  a_overlap.strides[0] = 4;  // rows of 8 every 4 elements
  expect_error([&] { ops::gemm(a_overlap, w, b, out); }, ErrorKind::shape,
               {"'a'", "row stride >= 8", "row stride 4"});

  Tensor w_cuda = fake_cuda(DType::bf16, {3, 8});
  expect_error([&] { ops::gemm(a, w_cuda, b, out); }, ErrorKind::device, {"'w'", "cpu", "cuda:0"});
  Tensor b_cuda = fake_cuda(DType::bf16, {3});
  expect_error([&] { ops::gemm(a, w, b_cuda, out); }, ErrorKind::device, {"'bias'", "cuda:0"});
  // f32 inputs are the CPU reference's only: rejected on CUDA before anything touches a GPU.
  expect_error([&] {
    ops::gemm(fake_cuda(DType::f32, {2, 8}), fake_cuda(DType::f32, {3, 8}), Tensor{},
              fake_cuda(DType::f32, {2, 3}));
  }, ErrorKind::dtype, {"'a'", "f16 or bf16", "CPU-only"});
}

}  // namespace
}  // namespace braid::test
