// fp8_quantize_rows' two CUDA kernels give the same bytes: the one-trip kernel (a thread per up to
// four 16-byte pieces) against the looping one (256 threads looping over the row), on rows short
// and long (up to the one-trip kernel's limit of 32768 columns and past it, where the looping one
// takes over), unaligned widths (looping alone), strided rows, all-zero rows and large values.
// The arithmetic itself is checked against the CPU through gemm_fp8 (test_gemm_fp8.cpp). Skipped
// without a GPU.
#include <cstring>

#include "braid/ops.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::test {
namespace {

#if BRAID_WITH_CUDA
TEST(Fp8QuantizeRowsCuda, OneTripKernelGivesTheLoopingKernelsBytes) {
  BRAID_REQUIRE_CUDA();
  struct Shape {
    int64_t m, k, pad;  // pad: extra columns between rows (a strided view)
  };
  for (DType dtype : {DType::bf16, DType::f16})
    for (const Shape sh : {Shape{1, 4096, 0}, Shape{128, 14336, 0}, Shape{3, 8, 0},
                           Shape{5, 32768, 8}, Shape{2, 32776, 0}, Shape{4, 100, 0},
                           Shape{7, 4104, 16}, Shape{33, 2048, 0}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " m " + std::to_string(sh.m) + " k " +
                   std::to_string(sh.k) + " pad " + std::to_string(sh.pad));
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE("seed " + std::to_string(seed));
      OwnedTensor host = random_host(dtype, {sh.m, sh.k + sh.pad}, seed, -3.0f, 3.0f);
      for (int64_t c = 0; c < sh.k + sh.pad; ++c)  // row 0 all zeros: its scale is 1
        store_from_float(host.data(), dtype, c, 0.0f);
      if (sh.m > 1)  // a large value in row 1 (bf16's range past f16's is not needed here)
        store_from_float(host.data(), dtype, (sh.k + sh.pad) + sh.k / 2, 6.0e4f);
      const OwnedTensor dev = to_device(host.view(), Device::cuda());
      const Tensor x = dev.view().slice(1, 0, sh.k);
      std::vector<std::vector<float>> codes, scales;
      for (bool looping_only : {true, false}) {
        OwnedTensor q(DType::f8e4m3, {sh.m, sh.k}, Device::cuda());
        const OwnedTensor s = poisoned(DType::f32, {sh.m}, Device::cuda());
        fill_bytes(q.view(), 0xAA);
        cuda::fp8_quantize_rows(x, q.view(), s.view(), {}, looping_only);
        OwnedTensor q_host(DType::f8e4m3, {sh.m, sh.k}, Device::cpu());
        copy(q.view(), q_host.view());
        std::vector<float> bytes(static_cast<size_t>(sh.m * sh.k));
        const auto* b = static_cast<const uint8_t*>(q_host.data());
        for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = b[i];
        codes.push_back(bytes);
        scales.push_back(to_floats(s.view()));
      }
      ASSERT_EQ(scales[0].size(), scales[1].size());
      for (size_t i = 0; i < scales[0].size(); ++i)
        ASSERT_EQ(std::memcmp(&scales[0][i], &scales[1][i], sizeof(float)), 0) << "row " << i;
      EXPECT_EQ(scales[0][0], 1.0f) << "an all-zero row";
      for (size_t i = 0; i < codes[0].size(); ++i)
        ASSERT_EQ(codes[0][i], codes[1][i]) << "element " << i;
    }
}
#endif

}  // namespace
}  // namespace braid::test
