// gemm_batched (per-head projections, MLA's W_UK and W_UV): the CPU reference against a plain
// fp64 loop for both weight layouts (rows of k, and the transposed view of a row-major [k, n]
// matrix) and strided activations; CUDA (cuBLAS strided-batched) against the CPU; bad arguments
// named. Also the two small additions MLA needed elsewhere: kv_append with keys only, and RoPE
// over interleaved pairs.
#include <cstring>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

// A [rows, cols] tensor's view as [m, batch, k]: batch parts of width k, part_stride apart,
// starting at column col0 (how the forward pass sees the heads inside a packed row).
Tensor parts(const Tensor& packed, int64_t col0, int64_t batch, int64_t part_stride, int64_t k) {
  Tensor v = packed;
  v.data = packed.at(col0);
  v.ndim = 3;
  v.shape[1] = batch;
  v.shape[2] = k;
  v.strides[0] = packed.strides[0];
  v.strides[1] = part_stride;
  v.strides[2] = 1;
  return v;
}

// w[b] as the logical [n, k] matrix gemm_batched takes, over a [batch, k, n] row-major tensor.
Tensor transposed_view(const Tensor& kn) {
  Tensor v = kn;
  v.shape[1] = kn.shape[2];
  v.shape[2] = kn.shape[1];
  v.strides[1] = kn.strides[2];
  v.strides[2] = kn.strides[1];
  return v;
}

// out[i, b, j] = sum_c a[i, b, c] * w[b, j, c], in fp64 from the tensors' float values.
std::vector<float> naive(const Tensor& a, const Tensor& w) {
  const std::vector<float> af = to_floats(a), wf = to_floats(w);
  const int64_t m = a.shape[0], B = a.shape[1], k = a.shape[2], n = w.shape[1];
  std::vector<float> out(static_cast<size_t>(m * B * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t c = 0; c < k; ++c) s += double(af[(i * B + b) * k + c]) * wf[(b * n + j) * k + c];
        out[(i * B + b) * n + j] = static_cast<float>(s);
      }
  return out;
}

struct Case {
  int64_t m, batch, k, n;
  bool w_transposed;  // w given as the transposed view of a [batch, k, n] tensor
};

void run_case(const Case& c, DType dtype, Device device, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "m " << c.m << " batch " << c.batch << " k " << c.k << " n "
                                    << c.n << (c.w_transposed ? " w^T" : "") << " seed " << seed);
  // a: the batch parts sit inside wider packed rows, 8 columns of padding per part.
  const OwnedTensor a_host = random_host(dtype, {c.m, c.batch * (c.k + 8)}, seed);
  const OwnedTensor w_host = c.w_transposed ? random_host(dtype, {c.batch, c.k, c.n}, seed + 1)
                                            : random_host(dtype, {c.batch, c.n, c.k}, seed + 1);
  const OwnedTensor a_dev = to_device(a_host.view(), device), w_dev = to_device(w_host.view(), device);
  const Tensor a = parts(a_dev.view(), 4, c.batch, c.k + 8, c.k);
  const Tensor w = c.w_transposed ? transposed_view(w_dev.view()) : w_dev.view();
  const OwnedTensor out_packed = poisoned(dtype, {c.m, c.batch * (c.n + 2)}, device);
  ops::gemm_batched(a, w, parts(out_packed.view(), 0, c.batch, c.n + 2, c.n));
  OwnedTensor out_host(dtype, {c.m, c.batch * (c.n + 2)}, Device::cpu());
  copy(out_packed.view(), out_host.view());
  const Tensor out = parts(out_host.view(), 0, c.batch, c.n + 2, c.n);

  const Tensor a_ref = parts(a_host.view(), 4, c.batch, c.k + 8, c.k);
  const Tensor w_ref = c.w_transposed ? transposed_view(w_host.view()) : w_host.view();
  const std::vector<float> want = naive(a_ref, w_ref);
  // fp32 sums of exact products against fp64: well inside the dtype's tolerance.
  EXPECT_LT(rel_error(to_floats(out), want), tolerance(dtype));
}

const Case kCases[] = {{1, 4, 16, 64, false},  {1, 4, 16, 64, true},   {7, 16, 128, 512, true},
                       {7, 16, 512, 128, false}, {33, 3, 32, 48, true}, {130, 2, 64, 16, false}};

TEST(GemmBatched, CpuMatchesNaive) {
  for (DType dtype : {DType::f32, DType::bf16})
    for (const Case& c : kCases) run_case(c, dtype, Device::cpu(), fresh_seed());
}

TEST(GemmBatched, CudaMatchesNaive) {
  BRAID_REQUIRE_CUDA();
  for (DType dtype : {DType::bf16, DType::f16})
    for (const Case& c : kCases) run_case(c, dtype, Device::cuda(0), fresh_seed());
}

TEST(GemmBatched, BadArguments) {
  const OwnedTensor a(DType::f32, {2, 3, 4}, Device::cpu()), w(DType::f32, {3, 5, 4}, Device::cpu());
  const OwnedTensor out(DType::f32, {2, 3, 5}, Device::cpu());
  EXPECT_NO_THROW(ops::gemm_batched(a, w, out));
  const OwnedTensor w_batch(DType::f32, {2, 5, 4}, Device::cpu());
  expect_error([&] { ops::gemm_batched(a, w_batch, out); }, ErrorKind::shape, {"gemm_batched", "'w'"});
  const OwnedTensor w_k(DType::f32, {3, 5, 6}, Device::cpu());
  expect_error([&] { ops::gemm_batched(a, w_k, out); }, ErrorKind::shape, {"gemm_batched", "'w'"});
  const OwnedTensor out_n(DType::f32, {2, 3, 6}, Device::cpu());
  expect_error([&] { ops::gemm_batched(a, w, out_n); }, ErrorKind::shape, {"gemm_batched", "'out'"});
  const OwnedTensor w_bf16(DType::bf16, {3, 5, 4}, Device::cpu());
  expect_error([&] { ops::gemm_batched(a, w_bf16, out); }, ErrorKind::dtype, {"'w'"});
  // A w[b] with no unit stride: neither rows nor columns.
  const OwnedTensor big(DType::f32, {3, 10, 8}, Device::cpu());
  Tensor strided = big.view();
  strided.shape[1] = 5;
  strided.shape[2] = 4;
  strided.strides[1] = 16;
  strided.strides[2] = 2;
  expect_error([&] { ops::gemm_batched(a, strided, out); }, ErrorKind::shape, {"'w'", "stride of 1"});
  // out over a's own memory.
  expect_error([&] { ops::gemm_batched(a, w, a); }, ErrorKind::shape, {"'out'"});
  const OwnedTensor a2(DType::f32, {2, 3, 5}, Device::cpu());
  const OwnedTensor w2(DType::f32, {3, 5, 5}, Device::cpu());
  expect_error([&] { ops::gemm_batched(a2, w2, a2); }, ErrorKind::invalid_argument, {"'out'", "apart"});
}

// kv_append with keys only: the rows land in their slots, nothing else is touched.
TEST(KvAppendKeysOnly, CpuAndCuda) {
  for (Device device : {Device::cpu(), Device::cuda(0)}) {
    if (device.is_cuda() && !cuda_available()) continue;
    SCOPED_TRACE(device.is_cpu() ? "cpu" : "cuda");
    const OwnedTensor rows_host = random_host(DType::bf16, {3, 1, 96}, fresh_seed());
    const OwnedTensor slots_host(DType::i32, {3}, Device::cpu());
    const int32_t slots[] = {5, 0, 9};
    std::copy(slots, slots + 3, slots_host.view().ptr<int32_t>());
    const OwnedTensor rows = to_device(rows_host.view(), device), s = to_device(slots_host.view(), device);
    const OwnedTensor zeros_host(DType::bf16, {3, 4, 1, 96}, Device::cpu());
    std::memset(zeros_host.data(), 0, zeros_host.view().nbytes());
    const OwnedTensor pages = to_device(zeros_host.view(), device);
    ops::kv_append(rows, Tensor{}, s, pages, Tensor{});
    const std::vector<float> got = to_floats(pages), want_rows = to_floats(rows_host);
    for (int64_t slot = 0; slot < 12; ++slot)
      for (int64_t j = 0; j < 96; ++j) {
        float want = 0.0f;
        for (int i = 0; i < 3; ++i)
          if (slots[i] == slot) want = want_rows[i * 96 + j];
        ASSERT_EQ(got[slot * 96 + j], want) << "slot " << slot << " column " << j;
      }
    // v without v_pages (or the reverse) is an error naming the missing one.
    expect_error([&] { ops::kv_append(rows, rows, s, pages, Tensor{}); }, ErrorKind::invalid_argument,
                 {"kv_append", "v_pages"});
  }
}

// RoPE over interleaved pairs equals the half-split rotation of the de-interleaved vector (how
// transformers' DeepseekV3 computes it), reordered back: exactly on the CPU, to fp32 rounding on
// CUDA (where the compiler may contract the two kernels' products into FMAs differently).
TEST(RopeInterleaved, EqualsHalfSplitOfDeinterleaved) {
  for (Device device : {Device::cpu(), Device::cuda(0)}) {
    if (device.is_cuda() && !cuda_available()) continue;
    SCOPED_TRACE(device.is_cpu() ? "cpu" : "cuda");
    const int64_t n = 5, heads = 3, d = 64;
    const OwnedTensor x_host = random_host(DType::f32, {n, heads, d}, fresh_seed());
    OwnedTensor deint_host(DType::f32, {n, heads, d}, Device::cpu());
    const float* x = x_host.view().ptr<float>();
    float* y = deint_host.view().ptr<float>();
    for (int64_t r = 0; r < n * heads; ++r)
      for (int64_t i = 0; i < d / 2; ++i) {
        y[r * d + i] = x[r * d + 2 * i];
        y[r * d + d / 2 + i] = x[r * d + 2 * i + 1];
      }
    OwnedTensor pos_host(DType::i32, {n}, Device::cpu());
    for (int64_t i = 0; i < n; ++i) pos_host.view().ptr<int32_t>()[i] = static_cast<int32_t>(7 * i + 3);
    const OwnedTensor pos = to_device(pos_host.view(), device);
    ops::RopeConfig rope;
    rope.scaling = ops::RopeScaling::yarn;
    rope.factor = 4.0f;
    rope.original_max_position = 64;
    rope.mscale = rope.mscale_all_dim = 0.707f;
    const OwnedTensor a = to_device(x_host.view(), device), b = to_device(deint_host.view(), device);
    ops::RopeConfig interleaved = rope;
    interleaved.interleaved = true;
    ops::rope_apply(a, Tensor{}, pos, interleaved);
    ops::rope_apply(b, Tensor{}, pos, rope);
    const std::vector<float> got = to_floats(a), half = to_floats(b);
    const float tol = device.is_cpu() ? 0.0f : 1e-6f;
    for (int64_t r = 0; r < n * heads; ++r)
      for (int64_t i = 0; i < d / 2; ++i) {
        ASSERT_NEAR(got[r * d + 2 * i], half[r * d + i], tol) << r << " " << i;
        ASSERT_NEAR(got[r * d + 2 * i + 1], half[r * d + d / 2 + i], tol) << r << " " << i;
      }
  }
}

}  // namespace
}  // namespace braid::test
