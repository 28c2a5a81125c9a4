// gemm on fp8 weights with 128 x 128 block scales (ops::Weight) for more rows than the GEMV
// takes: CUDA quantizes the bf16 activations per row and 128 columns (e4m3: 3 mantissa bits, a
// rounding error up to 2^-4 of each value, rms ~2^-4 / sqrt(3) = 3.6% for uniformly placed
// values) and runs cuBLASLt's block-scaled fp8 GEMM (k >= 512; k 128 and 256 take the exact
// GEMV, 16 rows at a time). The sum of k such terms with independent errors and random signs
// has the same relative rms error, so the bound is 5% of ||ref||; a wrong scale, layout or row
// fails by far more. Rows not a multiple of 4 take the padded path; k / 128 not a multiple of 4
// (k 640, 768, 1408: DeepSeek-V2-Lite's and Moonlight's expert width) the padded weight scales.
// Per-channel scales: per-token activations and cuBLASLt's outer-vector scales (the last tests).
#include <cmath>

#include "braid/ops.h"
#include "ops/fp8_test_util.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct Shape {
  int64_t m, n, k;
  bool bias;
};

// The relative error of ops::gemm on CUDA (output poisoned first) against the CPU reference, for
// host operands a [m, k] bf16, fp8 weights wq with scales ws, and a bf16 bias [n] when s.bias.
double cuda_error_against_cpu(const Shape& s, const Tensor& a, const Tensor& wq, const Tensor& ws,
                              const Tensor& bias) {
  const Tensor b = s.bias ? bias : Tensor{};
  OwnedTensor ref(DType::bf16, {s.m, s.n}, Device::cpu());
  ops::gemm(a, {wq, ws}, b, ref);
  const Device dev = Device::cuda();
  const OwnedTensor da = to_device(a, dev), dq = to_device(wq, dev), dsc = to_device(ws, dev);
  const OwnedTensor db = to_device(bias, dev);
  const OwnedTensor out = poisoned(DType::bf16, {s.m, s.n}, dev);
  ops::gemm(da, {dq, dsc}, s.bias ? db.view() : Tensor{}, out);
  return rel_error(to_floats(out), to_floats(ref));
}

TEST(GemmFp8Blocks, CudaMatchesTheExactReferenceWithinTheActivationQuantization) {
  BRAID_REQUIRE_CUDA();
  for (const Shape s : {Shape{17, 384, 128, false}, Shape{40, 384, 256, false},
                        Shape{40, 384, 256, true}, Shape{40, 384, 512, false},
                        Shape{253, 384, 512, false}, Shape{40, 256, 640, false},
                        Shape{33, 384, 768, true}, Shape{64, 2048, 1408, false},
                        Shape{256, 256, 1024, false}, Shape{64, 1024, 4096, false},
                        Shape{20, 512, 14336, false}}) {
    SCOPED_TRACE("m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " +
                 std::to_string(s.k) + (s.bias ? " bias" : ""));
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    const OwnedTensor a = random_host(DType::bf16, {s.m, s.k}, seed);
    const fp8::Fp8Tensor w = fp8::weights(1, s.n, s.k, seed + 1);
    const Tensor wq = w.q.view().reshape({s.n, s.k});
    const Tensor ws = w.scale.view().reshape({s.n / 128, s.k / 128});
    const OwnedTensor bias = random_host(DType::bf16, {s.n}, seed + 2);
    EXPECT_LE(cuda_error_against_cpu(s, a, wq, ws, bias), 0.05);
  }
}

// Per-channel scales ([n, 1], compressed-tensors FP8-dynamic): k >= 512 quantizes the
// activations per token and runs cuBLASLt's outer-vector-scaled fp8 GEMM (one e4m3 rounding of
// each activation: the 5% bound above); k below 512 (the first shape) takes the exact GEMV 16 rows
// at a time. Rows not a multiple of 4 or 16, n not a multiple of 128.
TEST(GemmFp8PerChannel, CudaMatchesTheExactReferenceWithinTheActivationQuantization) {
  BRAID_REQUIRE_CUDA();
  for (const Shape s : {Shape{17, 200, 256, false}, Shape{40, 384, 512, true},
                        Shape{253, 384, 1024, false}, Shape{64, 1024, 4096, true},
                        Shape{20, 512, 14336, false}}) {
    SCOPED_TRACE("m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " +
                 std::to_string(s.k) + (s.bias ? " bias" : ""));
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    const OwnedTensor a = random_host(DType::bf16, {s.m, s.k}, seed);
    const OwnedTensor wq = random_host(DType::f8e4m3, {s.n, s.k}, seed + 1, -448.0f, 448.0f);
    const OwnedTensor ws = random_host(DType::f32, {s.n, 1}, seed + 2, 1e-4f, 4e-4f);
    const OwnedTensor bias = random_host(DType::bf16, {s.n}, seed + 3);
    EXPECT_LE(cuda_error_against_cpu(s, a, wq, ws, bias), s.k < 512 ? 1e-2 : 0.05);
  }
}

// The scale is per token: rows whose magnitudes differ by 2^20 each keep their own precision (a
// scale shared between rows, or taken from the wrong row, flushes the small rows to zero or
// saturates the large ones). bf16 and f16 activations; the error is measured row by row.
TEST(GemmFp8PerChannel, EachTokenKeepsItsOwnScale) {
  BRAID_REQUIRE_CUDA();
  const int64_t m = 36, n = 256, k = 1024;
  for (const DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    OwnedTensor a = random_host(dt, {m, k}, seed);
    // f16 holds 2^-10 .. 2^10 times values of 1 with its full precision (normal range from 2^-14).
    for (int64_t r = 0; r < m; ++r) {
      const float row_scale = std::ldexp(1.0f, static_cast<int>(r % 21) - 10);
      for (int64_t c = 0; c < k; ++c)
        store_from_float(a.data(), dt, r * k + c, load_as_float(a.data(), dt, r * k + c) * row_scale);
    }
    const OwnedTensor wq = random_host(DType::f8e4m3, {n, k}, seed + 1, -448.0f, 448.0f);
    const OwnedTensor ws = random_host(DType::f32, {n, 1}, seed + 2, 1e-4f, 4e-4f);
    OwnedTensor ref(dt, {m, n}, Device::cpu());
    ops::gemm(a, {wq, ws}, Tensor{}, ref);
    const Device dev = Device::cuda();
    const OwnedTensor da = to_device(a, dev), dq = to_device(wq, dev), dsc = to_device(ws, dev);
    const OwnedTensor out = poisoned(dt, {m, n}, dev);
    ops::gemm(da, {dq, dsc}, Tensor{}, out);
    const std::vector<float> got = to_floats(out), want = to_floats(ref);
    for (int64_t r = 0; r < m; ++r) {
      const std::vector<float> g(got.begin() + r * n, got.begin() + (r + 1) * n);
      const std::vector<float> w(want.begin() + r * n, want.begin() + (r + 1) * n);
      EXPECT_LE(rel_error(g, w), 0.05) << "row " << r;
    }
  }
}

}  // namespace
}  // namespace braid::test
