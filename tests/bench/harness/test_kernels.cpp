// The benchmarks' helper kernels: argument checks (no GPU needed) and, on a GPU, that the random
// fill and the copy kernel do what the benchmarks rely on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "bench/harness/cuda/kernels.h"
#include "bench/harness/cuda_only.h"
#include "braid/buffer.h"
#include "test_util.h"

namespace braid::bench {
namespace {

#if BRAID_WITH_CUDA

TEST(BenchKernels, CopyKernelRejectsBadSizesAndAlignment) {
  test::expect_error([] { copy_kernel(nullptr, nullptr, 17, 0, {}); },
                     ErrorKind::invalid_argument, {"copy_kernel", "'bytes'", "multiple of 16"});
  auto p = reinterpret_cast<void*>(uintptr_t{0x1008});
  test::expect_error([&] { copy_kernel(p, p, 32, 0, {}); }, ErrorKind::invalid_argument,
                     {"copy_kernel", "16-byte aligned"});
}

TEST(BenchKernels, FillUniformRejectsWhatItCannotFill) {
  test::expect_error([] { fill_uniform(test::fake_cuda(DType::i32, {4}), 1, -1, 1, {}); },
                     ErrorKind::invalid_argument, {"fill_uniform", "i32[4] on cuda:0"});
  OwnedTensor host(DType::f32, {4}, Device::cpu());
  test::expect_error([&] { fill_uniform(host, 1, -1, 1, {}); }, ErrorKind::invalid_argument,
                     {"fill_uniform", "on cpu"});
}

std::string dtype_test_name(const testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

class BenchKernelsGpuFill : public testing::TestWithParam<DType> {};

TEST_P(BenchKernelsGpuFill, UniformInRangeSeededAndNeverConstant) {
  BRAID_REQUIRE_CUDA();
  const DType dt = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int64_t n = 1'000'003;  // odd: the grid-stride tail
  OwnedTensor a = test::poisoned(dt, {n}, Device::cuda());
  OwnedTensor b = test::poisoned(dt, {n}, Device::cuda());
  OwnedTensor c = test::poisoned(dt, {n}, Device::cuda());
  fill_uniform(a, seed, -1.0f, 1.0f, {});
  fill_uniform(b, seed, -1.0f, 1.0f, {});
  fill_uniform(c, seed + 1, -1.0f, 1.0f, {});
  const auto va = test::to_floats(a), vb = test::to_floats(b), vc = test::to_floats(c);
  double sum = 0, sum_sq = 0;
  int64_t zeros = 0, differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(va[i] >= -1.0f && va[i] <= 1.0f) << "element " << i << " = " << va[i];
    sum += va[i];
    sum_sq += double(va[i]) * va[i];
    zeros += va[i] == 0.0f;
    differ += va[i] != vc[i];
  }
  EXPECT_EQ(va, vb) << "same seed, different values";
  EXPECT_GT(differ, n * 9 / 10) << "another seed should give other values";
  EXPECT_NEAR(sum / n, 0.0, 0.01);          // uniform on [-1, 1]: mean 0
  EXPECT_NEAR(sum_sq / n, 1.0 / 3.0, 0.01);  // and variance 1/3
  EXPECT_LT(zeros, n / 100);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BenchKernelsGpuFill,
                         testing::Values(DType::f32, DType::f16, DType::bf16), dtype_test_name);

TEST(BenchKernelsGpu, CopyKernelCopiesEveryByte) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (int64_t n : {int64_t{4}, int64_t{1'000'004}, int64_t{(1 << 22) + 12}}) {  // f32, 16 B steps
    for (int blocks : {0, 1, 3}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " blocks=" << blocks);
      OwnedTensor src = test::to_device(test::random_host(DType::f32, {n}, seed), Device::cuda());
      OwnedTensor dst = test::poisoned(DType::f32, {n}, Device::cuda());
      copy_kernel(src.data(), dst.data(), size_t(n) * 4, blocks, {});
      EXPECT_EQ(test::to_floats(dst), test::to_floats(src));
    }
  }
  EXPECT_GT(copy_kernel_blocks(), 0);
}

TEST(BenchKernelsGpu, LaunchProbesRun) {
  BRAID_REQUIRE_CUDA();
  OwnedTensor in = test::to_device(test::random_host(DType::i32, {1}, test::fresh_seed(), -1000, 1000),
                                   Device::cuda());
  OwnedTensor out = test::poisoned(DType::i32, {1}, Device::cuda());
  launch_empty_kernel({});
  launch_minimal_rw_kernel(in.view().ptr<int>(), out.view().ptr<int>(), {});
  EXPECT_EQ(test::to_floats(out)[0], test::to_floats(in)[0] + 1);
}

#else

TEST(BenchKernels, CpuOnlyBuildSaysItHasNoCuda) {
  // The kernels are in harness/cuda/, which this build lacks: reaching them says so.
  test::expect_error(
      [] { cuda_only(BRAID_CUDA_ONLY(copy_kernel), "copy_kernel")(nullptr, nullptr, 16, 0, {}); },
      ErrorKind::unsupported, {"no CUDA support"});
}

#endif  // BRAID_WITH_CUDA

}  // namespace
}  // namespace braid::bench
