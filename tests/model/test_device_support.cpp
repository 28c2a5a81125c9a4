// The device check before a model loads (model/device_support.h): which compute capabilities a
// CUDA_ARCHITECTURES list runs on, and the errors for a GPU the build's kernels do not run on and
// for fp8 weights on a GPU without fp8. Pure functions: they run without a GPU.
#include "model/device_support.h"

#include "test_util.h"

namespace braid::test {
namespace {

using model::cuda_archs_run_on;

TEST(DeviceSupport, ArchitectureListsRunWhereCudaLoadsThem) {
  // This build's default: Hopper's architecture-specific code runs on 9.0 only.
  EXPECT_TRUE(cuda_archs_run_on("90a", 9, 0));
  EXPECT_FALSE(cuda_archs_run_on("90a", 8, 0));
  EXPECT_FALSE(cuda_archs_run_on("90a", 10, 0));
  EXPECT_FALSE(cuda_archs_run_on("90a", 8, 9));
  // A plain entry carries PTX: it runs on its own and every newer GPU.
  EXPECT_TRUE(cuda_archs_run_on("80", 8, 0));
  EXPECT_TRUE(cuda_archs_run_on("80", 8, 6));
  EXPECT_TRUE(cuda_archs_run_on("80", 12, 0));
  EXPECT_FALSE(cuda_archs_run_on("80", 7, 5));
  EXPECT_TRUE(cuda_archs_run_on("80-virtual", 9, 0));
  // Machine code only: the same major from its minor up.
  EXPECT_TRUE(cuda_archs_run_on("80-real", 8, 6));
  EXPECT_FALSE(cuda_archs_run_on("86-real", 8, 0));
  EXPECT_FALSE(cuda_archs_run_on("80-real", 9, 0));
  // Lists, as CMake's ';' or this build's ',' separate them.
  EXPECT_TRUE(cuda_archs_run_on("80;90a", 8, 6));
  EXPECT_TRUE(cuda_archs_run_on("86-real,90a", 9, 0));
  EXPECT_FALSE(cuda_archs_run_on("86-real,90a", 8, 0));
  // Nothing, or what does not parse, runs nowhere.
  EXPECT_FALSE(cuda_archs_run_on("", 9, 0));
  EXPECT_FALSE(cuda_archs_run_on("native", 9, 0));
  EXPECT_FALSE(cuda_archs_run_on("90b", 9, 0));
  EXPECT_FALSE(cuda_archs_run_on(";;", 9, 0));
}

TEST(DeviceSupport, AGpuTheKernelsDoNotRunOnIsNamed) {
  model::ModelConfig c;
  const model::CudaDeviceInfo a100{0, "NVIDIA A100-SXM4-80GB", 8, 0};
  expect_error([&] { model::check_cuda_device(c, a100, "90a"); }, ErrorKind::unsupported,
               {"cuda:0", "NVIDIA A100-SXM4-80GB", "compute capability 8.0", "architectures 90a"});
  const model::CudaDeviceInfo h100{1, "NVIDIA H100 80GB HBM3", 9, 0};
  model::check_cuda_device(c, h100, "90a");  // the GPU this build is for
}

TEST(DeviceSupport, Fp8WeightsNeedAGpuWithFp8) {
  model::ModelConfig c;
  c.weights = model::WeightFormat::fp8_blocks;
  const model::CudaDeviceInfo a100{2, "NVIDIA A100-SXM4-80GB", 8, 0};
  // A build whose kernels run on the A100, but the checkpoint is fp8.
  expect_error([&] { model::check_cuda_device(c, a100, "80"); }, ErrorKind::unsupported,
               {"quantization_config", "fp8 (128 x 128 blocks)", "8.9 or newer", "cuda:2",
                "compute capability 8.0"});
  c.weights = model::WeightFormat::fp8_per_channel;
  expect_error([&] { model::check_cuda_device(c, a100, "80"); }, ErrorKind::unsupported,
               {"fp8 (per channel)", "8.9"});
  const model::CudaDeviceInfo l40{0, "NVIDIA L40S", 8, 9};
  model::check_cuda_device(c, l40, "80");  // Ada has fp8
  c.weights = model::WeightFormat::dense;
  model::check_cuda_device(c, a100, "80");  // 16-bit weights run there
}

}  // namespace
}  // namespace braid::test
