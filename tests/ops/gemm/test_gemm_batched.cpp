// gemm_batched (per-head projections, MLA's W_UK and W_UV): the CPU reference against a plain
// fp64 loop for both weight layouts (rows of k, and the transposed view of a row-major [k, n]
// matrix) and strided activations; CUDA against the CPU, on both of its paths (the decode GEMV
// for up to 16 rows of 16-byte aligned parts with w in rows of k, cuBLAS strided-batched
// otherwise); bad arguments named. Also the two small additions MLA needed elsewhere: kv_append with keys only, and RoPE
// over interleaved pairs.
#include <cstring>

#include "braid/ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/gemv/gemv.h"
#endif
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
  int64_t a_col0 = 4;  // where a's first part starts in its packed rows (8: 16-byte aligned)
  int64_t w_pad = 0;   // w's rows of k padded to k + w_pad (a row stride other than k)
};

void run_case(const Case& c, DType dtype, Device device, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "m " << c.m << " batch " << c.batch << " k " << c.k << " n "
                                    << c.n << (c.w_transposed ? " w^T" : "") << " a at "
                                    << c.a_col0 << " w pad " << c.w_pad << " seed " << seed);
  // a: the batch parts sit inside wider packed rows, 8 columns of padding per part.
  const OwnedTensor a_host = random_host(dtype, {c.m, c.batch * (c.k + 8) + 8}, seed);
  const OwnedTensor w_host =
      c.w_transposed ? random_host(dtype, {c.batch, c.k, c.n}, seed + 1)
                     : random_host(dtype, {c.batch, c.n, c.k + c.w_pad}, seed + 1);
  const OwnedTensor a_dev = to_device(a_host.view(), device), w_dev = to_device(w_host.view(), device);
  const Tensor a = parts(a_dev.view(), c.a_col0, c.batch, c.k + 8, c.k);
  // Rows of k: the first k columns of each padded row.
  auto rows_of_k = [&](Tensor t) {
    t.shape[2] = c.k;
    return t;
  };
  const Tensor w = c.w_transposed ? transposed_view(w_dev.view()) : rows_of_k(w_dev.view());
  const OwnedTensor out_packed = poisoned(dtype, {c.m, c.batch * (c.n + 2)}, device);
  ops::gemm_batched(a, w, parts(out_packed.view(), 0, c.batch, c.n + 2, c.n));
  OwnedTensor out_host(dtype, {c.m, c.batch * (c.n + 2)}, Device::cpu());
  copy(out_packed.view(), out_host.view());
  const Tensor out = parts(out_host.view(), 0, c.batch, c.n + 2, c.n);

  const Tensor a_ref = parts(a_host.view(), c.a_col0, c.batch, c.k + 8, c.k);
  const Tensor w_ref = c.w_transposed ? transposed_view(w_host.view()) : rows_of_k(w_host.view());
  const std::vector<float> want = naive(a_ref, w_ref);
  // fp32 sums of exact products against fp64: well inside the dtype's tolerance.
  EXPECT_LT(rel_error(to_floats(out), want), tolerance(dtype));
}

const Case kCases[] = {
    {1, 4, 16, 64, false},  {1, 4, 16, 64, true},   {7, 16, 128, 512, true},
    {7, 16, 512, 128, false}, {33, 3, 32, 48, true}, {130, 2, 64, 16, false},
    // Aligned parts with w in rows of k: on CUDA the decode GEMV path (up to 16 rows). MLA's
    // W_UK (k 128, rows padded as in W^T's view) and W_UV at V2-Lite's 16 heads and V3's 128;
    // both activation-row widths of the kernel (up to 8 and up to 16); n past a 16-row tile;
    // k shorter than the block's 8 warps' 32-column steps.
    {1, 16, 128, 512, false, 8, 128}, {1, 16, 512, 128, false, 8},
    {3, 128, 128, 512, false, 8, 8}, {16, 5, 256, 40, false, 8}, {9, 3, 64, 24, false, 8, 16},
    {17, 2, 64, 32, false, 8}, {2, 7, 8, 8, false, 8}};

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

#if BRAID_WITH_CUDA
// Which calls take the decode GEMV path (metadata only: runs without a GPU). MLA's two absorbed
// projections as the engine lays them out for V2-Lite (16 heads, nope 128, v 128, rank 512): W_UK
// a view of its transposed copy ([r, heads x 128] from a bf16 kv_b_proj, or of the whole W^T
// [r, heads x 256] from an fp8 one), W_UV a view of W itself, the activations head parts of a
// packed row; then what sends a call to cuBLAS instead.
TEST(GemmBatched, DecodeGemvTakesMlasLayouts) {
  const int64_t h = 16, dn = 128, dv = 128, r = 512, rows = h * (dn + dv), dq = 192;
  auto view = [](Tensor t, std::initializer_list<int64_t> shape,
                 std::initializer_list<int64_t> strides) {
    t.ndim = 3;
    std::copy(shape.begin(), shape.end(), t.shape);
    std::copy(strides.begin(), strides.end(), t.strides);
    return t;
  };
  const Tensor wt = fake_cuda(DType::bf16, {r, rows}), w = fake_cuda(DType::bf16, {rows, r});
  const Tensor w_uk_t = fake_cuda(DType::bf16, {r, h * dn});
  const Tensor w_uk = view(w_uk_t, {h, r, dn}, {dn, h * dn, 1});
  const Tensor w_uk_fp8 = view(wt, {h, r, dn}, {dn + dv, rows, 1});
  Tensor w_uv = view(w, {h, dv, r}, {(dn + dv) * r, r, 1});
  w_uv.data = w.at(dn * r);
  for (int64_t m : {1, 4, 16}) {
    SCOPED_TRACE(m);
    const Tensor q_nope = view(fake_cuda(DType::bf16, {m, h * dq}), {m, h, dn}, {h * dq, dq, 1});
    const Tensor q_latent = fake_cuda(DType::bf16, {m, h, r});
    const Tensor attn = view(fake_cuda(DType::bf16, {m, h * dv}), {m, h, dv}, {h * dv, dv, 1});
    EXPECT_TRUE(cuda::gemv_batched_applicable(q_nope, w_uk, q_latent));
    EXPECT_TRUE(cuda::gemv_batched_applicable(q_nope, w_uk_fp8, q_latent));
    EXPECT_TRUE(cuda::gemv_batched_applicable(q_latent, w_uv, attn));
  }
  const Tensor a = fake_cuda(DType::bf16, {17, h, r}), out = fake_cuda(DType::bf16, {17, h, dv});
  EXPECT_FALSE(cuda::gemv_batched_applicable(a, w_uv, out)) << "17 rows: cuBLAS";
  const Tensor one = fake_cuda(DType::bf16, {1, h, r}), one_out = fake_cuda(DType::bf16, {1, h, dv});
  const Tensor w_uv_columns = view(wt, {h, dv, r}, {dn + dv, 1, rows});
  EXPECT_FALSE(cuda::gemv_batched_applicable(one, w_uv_columns, one_out)) << "w in columns of n";
  Tensor shifted = one;
  shifted.data = one.at(4);  // 8 bytes off a 16-byte boundary
  EXPECT_FALSE(cuda::gemv_batched_applicable(shifted, w_uv, one_out)) << "misaligned a";
  Tensor odd_parts = view(fake_cuda(DType::bf16, {1, h * (r + 4)}), {1, h, r}, {h * (r + 4), r + 4, 1});
  EXPECT_FALSE(cuda::gemv_batched_applicable(odd_parts, w_uv, one_out)) << "parts 8 bytes apart";
  const Tensor f32 = fake_cuda(DType::f32, {1, h, r});
  EXPECT_FALSE(cuda::gemv_batched_applicable(f32, w_uv, one_out)) << "f32";
  EXPECT_EQ(cuda::gemv_batched_launch(128).split, 4);  // W_UK: 4 steps of 32 columns
  EXPECT_EQ(cuda::gemv_batched_launch(128).tiles_per_block, 2);
  EXPECT_EQ(cuda::gemv_batched_launch(512).split, 8);
  EXPECT_EQ(cuda::gemv_batched_launch(8).split, 1);
}
#endif

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
