// Fused decode ops (rms_norm_gemm, rms_norm_gemm_argmax, gemm_add, swiglu_gemm_add, add_inplace):
// CUDA against the CPU reference (the primitive references in sequence) on decode shapes of
// Qwen2.5-0.5B, Llama-3.2-1B and Llama-2-7B at m = 1, 4, 16 (the fused GEMV kernel) and on shapes that take the unfused path
// (m = 33; k % 8 != 0), outputs and scratch poisoned with NaN; plus the argument checks.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

// ---------------------------------------------------------------------------------------------
// Differential tests of the three fused GEMV ops.

struct FusedCase {
  std::string label;  // "llama_3_2_1b", "fallback_m33"
  DType dtype;
  int64_t m, n, k;
  bool bias;     // rms_norm_gemm and gemm_add
  bool out_f32;  // rms_norm_gemm only
};

std::string case_name(const FusedCase& c) {
  return c.label + "_" + std::string(dtype_name(c.dtype)) + "_m" + std::to_string(c.m) + "_" +
         std::to_string(c.n) + "x" + std::to_string(c.k) + (c.bias ? "_bias" : "") +
         (c.out_f32 ? "_f32out" : "");
}
void PrintTo(const FusedCase& c, std::ostream* os) { *os << case_name(c); }

// (k, n) pairs as the decode step uses them: hidden 896 -> Qwen's qkv 1152, hidden 2048 -> the
// 1B's gate_up 2 * 8192 cut below, hidden 4096 -> an o_proj-like 896. The CPU reference costs
// m * n * k multiply-adds per op, so n is cut where that passes 3e7, to a multiple of 16 less 3
// (a partial last tile).
std::vector<FusedCase> fused_cases() {
  struct Shape {
    const char* label;
    int64_t n, k;
  };
  const Shape shapes[] = {{"qwen2_5_0_5b", 1152, 896},
                          {"llama_3_2_1b", 4864 * 2, 2048},
                          {"llama_2_7b", 896, 4096}};
  std::vector<FusedCase> cases;
  int i = 0;
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (const Shape& s : shapes) {
      for (int64_t m : {1, 4, 16}) {
        int64_t n = s.n;
        if (double(m) * double(n) * double(s.k) > 3e7)
          n = std::max<int64_t>(16, static_cast<int64_t>(3e7 / double(m * s.k)) / 16 * 16) - 3;
        cases.push_back({s.label, dtype, m, n, s.k, i % 2 == 0, i % 3 == 1});
        ++i;
      }
    }
    // The unfused path: too many rows for the GEMV, and k not a multiple of 8.
    cases.push_back({"fallback_m33", dtype, 33, 200, 896, true, false});
    cases.push_back({"fallback_k1001", dtype, 4, 300, 1001, false, true});
  }
  return cases;
}

// Weights in +-2/sqrt(k) keep the products O(1), so the residual add is not lost in rounding.
OwnedTensor random_weights(DType dtype, int64_t n, int64_t k, uint64_t seed) {
  const float a = 2.0f / std::sqrt(static_cast<float>(k));
  return random_host(dtype, {n, k}, seed, -a, a);
}

void expect_close(const Tensor& got, const Tensor& ref, DType dtype) {
  const double err = rel_error(to_floats(got), to_floats(ref));
  EXPECT_LE(err, tolerance(dtype)) << "relative error " << err;
}

class FusedGemmDiff : public ::testing::TestWithParam<FusedCase> {};

TEST_P(FusedGemmDiff, RmsNormGemm) {
  BRAID_REQUIRE_CUDA();
  const FusedCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  const DType out_t = c.out_f32 ? DType::f32 : c.dtype;
  OwnedTensor x = random_host(c.dtype, {c.m, c.k}, seed, -2.0f, 2.0f);
  OwnedTensor nw = random_host(c.dtype, {c.k}, seed + 1, 0.5f, 1.5f);
  OwnedTensor w = random_weights(c.dtype, c.n, c.k, seed + 2);
  OwnedTensor bias = c.bias ? random_host(out_t, {c.n}, seed + 3) : OwnedTensor();
  const float eps = 1e-6f;

  OwnedTensor ref = poisoned(out_t, {c.m, c.n}, cpu), ref_normed = poisoned(c.dtype, {c.m, c.k}, cpu);
  ops::rms_norm_gemm(x, nw, eps, w, bias.view(), ref, ref_normed);

  OwnedTensor dx = to_device(x, gpu), dnw = to_device(nw, gpu), dw = to_device(w, gpu);
  OwnedTensor dbias = c.bias ? to_device(bias, gpu) : OwnedTensor();
  OwnedTensor out = poisoned(out_t, {c.m, c.n}, gpu), normed = poisoned(c.dtype, {c.m, c.k}, gpu);
  ops::rms_norm_gemm(dx, dnw, eps, dw, dbias.view(), out, normed);
  expect_close(out, ref, c.dtype);

  // keep_normed: the same product, and normed written on every path (poisoned with NaN before).
  OwnedTensor out2 = poisoned(out_t, {c.m, c.n}, gpu), normed2 = poisoned(c.dtype, {c.m, c.k}, gpu);
  ops::rms_norm_gemm_keep_normed(dx, dnw, eps, dw, dbias.view(), out2, normed2);
  expect_close(out2, ref, c.dtype);
  expect_close(normed2, ref_normed, c.dtype);
}

TEST_P(FusedGemmDiff, GemmAdd) {
  BRAID_REQUIRE_CUDA();
  const FusedCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  OwnedTensor a = random_host(c.dtype, {c.m, c.k}, seed);
  OwnedTensor w = random_weights(c.dtype, c.n, c.k, seed + 1);
  OwnedTensor bias = c.bias ? random_host(c.dtype, {c.n}, seed + 2) : OwnedTensor();
  OwnedTensor residual = random_host(c.dtype, {c.m, c.n}, seed + 3, -4.0f, 4.0f);

  OwnedTensor ref = to_device(residual, cpu), ref_scratch = poisoned(c.dtype, {c.m, c.n}, cpu);
  ops::gemm_add(a, w, bias.view(), ref, ref_scratch);

  OwnedTensor da = to_device(a, gpu), dw = to_device(w, gpu);
  OwnedTensor dbias = c.bias ? to_device(bias, gpu) : OwnedTensor();
  OwnedTensor res = to_device(residual, gpu), scratch = poisoned(c.dtype, {c.m, c.n}, gpu);
  ops::gemm_add(da, dw, dbias.view(), res, scratch);
  expect_close(res, ref, c.dtype);
}

TEST_P(FusedGemmDiff, SwigluGemmAdd) {
  BRAID_REQUIRE_CUDA();
  const FusedCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  // k is the intermediate size I: gate_up is [m, 2I], w [n, I].
  OwnedTensor gate_up = random_host(c.dtype, {c.m, 2 * c.k}, seed, -3.0f, 3.0f);
  OwnedTensor w = random_weights(c.dtype, c.n, c.k, seed + 1);
  OwnedTensor residual = random_host(c.dtype, {c.m, c.n}, seed + 2, -4.0f, 4.0f);

  OwnedTensor ref = to_device(residual, cpu);
  OwnedTensor ref_act = poisoned(c.dtype, {c.m, c.k}, cpu), ref_scratch = poisoned(c.dtype, {c.m, c.n}, cpu);
  ops::swiglu_gemm_add(gate_up, w, ref, ref_act, ref_scratch);

  OwnedTensor dgu = to_device(gate_up, gpu), dw = to_device(w, gpu), res = to_device(residual, gpu);
  OwnedTensor act = poisoned(c.dtype, {c.m, c.k}, gpu), scratch = poisoned(c.dtype, {c.m, c.n}, gpu);
  ops::swiglu_gemm_add(dgu, dw, res, act, scratch);
  expect_close(res, ref, c.dtype);
}

// Greedy head: each id is the argmax of the f32 logits rms_norm_gemm computes on the same GPU (up
// to 1e-6 relative, as the head may normalise in a separate kernel whose fp32 sum of squares
// runs in another order), and its logit in the CPU reference is the reference maximum up to the
// products' rounding.
std::vector<int32_t> ids_of(const Tensor& t) {
  OwnedTensor host = to_device(t, Device::cpu());
  const int32_t* p = host.view().ptr<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

void run_greedy_head_case(DType dtype, int64_t m, int64_t n, int64_t k, uint64_t seed) {
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  OwnedTensor x = random_host(dtype, {m, k}, seed, -2.0f, 2.0f);
  OwnedTensor nw = random_host(dtype, {k}, seed + 1, 0.5f, 1.5f);
  OwnedTensor w = random_weights(dtype, n, k, seed + 2);
  const float eps = 1e-6f;

  OwnedTensor ref_logits = poisoned(DType::f32, {m, n}, cpu), ref_normed = poisoned(dtype, {m, k}, cpu);
  OwnedTensor ref_ids(DType::i32, {m}, cpu);
  ops::rms_norm_gemm_argmax(x, nw, eps, w, ref_ids, ref_logits, ref_normed);

  OwnedTensor dx = to_device(x, gpu), dnw = to_device(nw, gpu), dw = to_device(w, gpu);
  OwnedTensor logits = poisoned(DType::f32, {m, n}, gpu), normed = poisoned(dtype, {m, k}, gpu);
  ops::rms_norm_gemm(dx, dnw, eps, dw, Tensor{}, logits, normed);
  const std::vector<float> gl = to_floats(logits), rl = to_floats(ref_logits);

  OwnedTensor ids(DType::i32, {m}, gpu);
  fill_bytes(ids.view(), 0xFF);
  OwnedTensor scratch = poisoned(DType::f32, {m, n}, gpu);
  ops::rms_norm_gemm_argmax(dx, dnw, eps, dw, ids, scratch, normed);
  const std::vector<int32_t> got = ids_of(ids);
  for (int64_t r = 0; r < m; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    ASSERT_GE(got[r], 0);
    ASSERT_LT(got[r], n);
    const float* g_row = gl.data() + r * n;
    const float g_best = *std::max_element(g_row, g_row + n);
    EXPECT_GE(g_row[got[r]], g_best - 1e-6f * std::fabs(g_best));
    const float* r_row = rl.data() + r * n;
    const float r_best = *std::max_element(r_row, r_row + n);
    EXPECT_GE(r_row[got[r]], r_best - 2e-2f * std::max(1.0f, std::fabs(r_best)));
  }
}

TEST_P(FusedGemmDiff, RmsNormGemmArgmax) {
  BRAID_REQUIRE_CUDA();
  const FusedCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  run_greedy_head_case(c.dtype, c.m, c.n, c.k, seed);
}

// A vocabulary-sized head (Qwen2.5's 151936 x 896): ~9500 keys per row.
TEST(FusedGemmGreedyHead, VocabularySized) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  run_greedy_head_case(DType::bf16, 1, 151936, 896, seed);
  run_greedy_head_case(DType::f16, 3, 50021, 256, seed + 10);
}

// torch.argmax's order in the fused epilogue: all-zero logits (+0 and -0 alike) go to index 0,
// and NaN rows win over every number, the lower of two NaN indices first.
TEST(FusedGemmGreedyHead, TiesAndNaN) {
  BRAID_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const int64_t m = 2, n = 1000, k = 64;
  OwnedTensor x = random_host(DType::bf16, {m, k}, 7, -2.0f, 2.0f);
  OwnedTensor nw = random_host(DType::bf16, {k}, 8, 0.5f, 1.5f);
  OwnedTensor w(DType::bf16, {n, k}, Device::cpu());
  std::fill_n(static_cast<unsigned char*>(w.data()), w.view().nbytes(), 0);
  OwnedTensor dx = to_device(x, gpu), dnw = to_device(nw, gpu);
  OwnedTensor logits(DType::f32, {m, n}, gpu), normed(DType::bf16, {m, k}, gpu);
  OwnedTensor ids(DType::i64, {m}, gpu);
  auto greedy = [&](const OwnedTensor& host_w) {
    OwnedTensor dw = to_device(host_w, gpu);
    ops::rms_norm_gemm_argmax(dx, dnw, 1e-6f, dw, ids, logits, normed);
    OwnedTensor h = to_device(ids, Device::cpu());
    const int64_t* p = h.view().ptr<int64_t>();
    return std::vector<int64_t>(p, p + m);
  };
  EXPECT_EQ(greedy(w), (std::vector<int64_t>{0, 0}));
  for (int64_t j : {777, 513})
    for (int64_t c = 0; c < k; ++c) store_from_float(w.data(), DType::bf16, j * k + c, NAN);
  EXPECT_EQ(greedy(w), (std::vector<int64_t>{513, 513}));
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedGemmDiff, ::testing::ValuesIn(fused_cases()),
                         [](const auto& info) { return case_name(info.param); });

// The fused kernel reads activation rows through their row stride: a [m, k] view into wider rows
// (as a slice of a packed buffer would be) gives the same result as a dense copy.
TEST(FusedGemmStrided, GemmAddOnRowView) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  const int64_t m = 5, k = 512, n = 333, ld = 640;
  OwnedTensor wide = random_host(DType::bf16, {m, ld}, seed);
  OwnedTensor w = random_weights(DType::bf16, n, k, seed + 1);
  OwnedTensor residual = random_host(DType::bf16, {m, n}, seed + 2);
  Tensor a_view = wide.view();
  a_view.shape[1] = k;

  OwnedTensor ref = to_device(residual, cpu), ref_scratch = poisoned(DType::bf16, {m, n}, cpu);
  ops::gemm_add(a_view, w, Tensor{}, ref, ref_scratch);

  OwnedTensor dwide = to_device(wide, gpu), dw = to_device(w, gpu), res = to_device(residual, gpu);
  Tensor da_view = dwide.view();
  da_view.shape[1] = k;
  OwnedTensor scratch = poisoned(DType::bf16, {m, n}, gpu);
  ops::gemm_add(da_view, dw, Tensor{}, res, scratch);
  expect_close(res, ref, DType::bf16);
}

// ---------------------------------------------------------------------------------------------
// add_inplace

struct AddCase {
  DType dtype;
  int64_t rows, d;
};
std::string add_name(const AddCase& c) {
  return std::string(dtype_name(c.dtype)) + "_" + std::to_string(c.rows) + "x" + std::to_string(c.d);
}
void PrintTo(const AddCase& c, std::ostream* os) { *os << add_name(c); }

class AddInplaceDiff : public ::testing::TestWithParam<AddCase> {};

// One fp32 add rounded once on both sides: the results must agree to the bit, up to fp32 noise.
TEST_P(AddInplaceDiff, MatchesReference) {
  BRAID_REQUIRE_CUDA();
  const AddCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  OwnedTensor x = random_host(c.dtype, {c.rows, c.d}, seed);
  OwnedTensor residual = random_host(c.dtype, {c.rows, c.d}, seed + 1, -8.0f, 8.0f);
  OwnedTensor ref = to_device(residual, Device::cpu());
  ops::add_inplace(x, ref);
  OwnedTensor dx = to_device(x, Device::cuda(0)), res = to_device(residual, Device::cuda(0));
  ops::add_inplace(dx, res);
  EXPECT_LE(rel_error(to_floats(res), to_floats(ref)), 1e-7);
  // And it did add: the result differs from the residual it started with.
  EXPECT_GT(rel_error(to_floats(res), to_floats(residual)), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AddInplaceDiff,
                         ::testing::Values(AddCase{DType::bf16, 1, 2048}, AddCase{DType::bf16, 16, 896},
                                           AddCase{DType::f16, 4, 4096}, AddCase{DType::f32, 3, 64},
                                           AddCase{DType::bf16, 3, 1001},  // scalar path
                                           AddCase{DType::f16, 1, 7}),
                         [](const auto& info) { return add_name(info.param); });

TEST(AddInplace, ReferenceRoundsOnce) {
  // bf16: 256 + 1 = 257 is not representable; round-to-nearest-even gives 256.
  OwnedTensor x(DType::bf16, {1, 2}, Device::cpu()), r(DType::bf16, {1, 2}, Device::cpu());
  store_from_float(x.data(), DType::bf16, 0, 1.0f);
  store_from_float(x.data(), DType::bf16, 1, 3.0f);
  store_from_float(r.data(), DType::bf16, 0, 256.0f);
  store_from_float(r.data(), DType::bf16, 1, 256.0f);
  ops::add_inplace(x, r);
  EXPECT_EQ(load_as_float(r.data(), DType::bf16, 0), 256.0f);
  EXPECT_EQ(load_as_float(r.data(), DType::bf16, 1), 260.0f);
}

// ---------------------------------------------------------------------------------------------
// Argument checks (no GPU needed).

TEST(AddInplaceErrors, BadArguments) {
  OwnedTensor x(DType::bf16, {2, 8}, Device::cpu()), r(DType::bf16, {2, 8}, Device::cpu());
  OwnedTensor r_bad(DType::bf16, {2, 9}, Device::cpu()), r_f16(DType::f16, {2, 8}, Device::cpu());
  expect_error([&] { ops::add_inplace(x, r_bad); }, ErrorKind::shape, {"add_inplace", "'residual'"});
  expect_error([&] { ops::add_inplace(x, r_f16); }, ErrorKind::dtype,
               {"add_inplace", "'residual'", "bf16", "f16"});
  expect_error([&] { ops::add_inplace(x, fake_cuda(DType::bf16, {2, 8})); }, ErrorKind::device,
               {"add_inplace", "'residual'", "cpu", "cuda:0"});
}

TEST(FusedGemmErrors, RmsNormGemm) {
  const Device cpu = Device::cpu();
  OwnedTensor x(DType::bf16, {2, 8}, cpu), nw(DType::bf16, {8}, cpu), w(DType::bf16, {5, 8}, cpu);
  OwnedTensor out(DType::bf16, {2, 5}, cpu), normed(DType::bf16, {2, 8}, cpu);
  OwnedTensor w_bad(DType::bf16, {5, 7}, cpu), nw_f16(DType::f16, {8}, cpu);
  OwnedTensor out_f16(DType::f16, {2, 5}, cpu), normed_bad(DType::bf16, {3, 8}, cpu);
  OwnedTensor bias_bf16(DType::bf16, {5}, cpu), out_f32(DType::f32, {2, 5}, cpu);
  expect_error([&] { ops::rms_norm_gemm(x, nw, 1e-6f, w_bad, Tensor{}, out, normed); },
               ErrorKind::shape, {"rms_norm_gemm", "'w'", "7"});
  expect_error([&] { ops::rms_norm_gemm(x, nw_f16, 1e-6f, w, Tensor{}, out, normed); },
               ErrorKind::dtype, {"rms_norm_gemm", "'norm_weight'", "bf16", "f16"});
  expect_error([&] { ops::rms_norm_gemm(x, nw, 1e-6f, w, Tensor{}, out_f16, normed); },
               ErrorKind::dtype, {"rms_norm_gemm", "'out'", "f16"});
  // The bias is in out's dtype, as for gemm.
  expect_error([&] { ops::rms_norm_gemm(x, nw, 1e-6f, w, bias_bf16, out_f32, normed); },
               ErrorKind::dtype, {"rms_norm_gemm", "'bias'", "f32", "bf16"});
  expect_error([&] { ops::rms_norm_gemm(x, nw, 1e-6f, w, Tensor{}, out, normed_bad); },
               ErrorKind::shape, {"rms_norm_gemm", "'normed'", "[3, 8]"});
  expect_error([&] { ops::rms_norm_gemm(x, nw, -1.0f, w, Tensor{}, out, normed); },
               ErrorKind::invalid_argument, {"rms_norm_gemm", "'eps'"});
  expect_error(
      [&] { ops::rms_norm_gemm(x, nw, 1e-6f, fake_cuda(DType::bf16, {5, 8}), Tensor{}, out, normed); },
      ErrorKind::device, {"rms_norm_gemm", "'w'", "cpu", "cuda:0"});
  // f32 activations are CPU-only.
  Tensor x32 = fake_cuda(DType::f32, {2, 8});
  expect_error([&] { ops::rms_norm_gemm(x32, nw, 1e-6f, w, Tensor{}, out, normed); },
               ErrorKind::dtype, {"rms_norm_gemm", "'x'", "CPU-only"});
}

TEST(FusedGemmErrors, RmsNormGemmArgmax) {
  const Device cpu = Device::cpu();
  OwnedTensor x(DType::bf16, {2, 8}, cpu), nw(DType::bf16, {8}, cpu), w(DType::bf16, {5, 8}, cpu);
  OwnedTensor ids(DType::i32, {2}, cpu), logits(DType::f32, {2, 5}, cpu);
  OwnedTensor normed(DType::bf16, {2, 8}, cpu);
  OwnedTensor ids_bad(DType::i32, {3}, cpu), ids_f32(DType::f32, {2}, cpu);
  OwnedTensor logits_bf16(DType::bf16, {2, 5}, cpu);
  expect_error([&] { ops::rms_norm_gemm_argmax(x, nw, 1e-6f, w, ids_bad, logits, normed); },
               ErrorKind::shape, {"rms_norm_gemm_argmax", "'ids'", "[3]"});
  expect_error([&] { ops::rms_norm_gemm_argmax(x, nw, 1e-6f, w, ids_f32, logits, normed); },
               ErrorKind::dtype, {"rms_norm_gemm_argmax", "'ids'", "f32"});
  expect_error([&] { ops::rms_norm_gemm_argmax(x, nw, 1e-6f, w, ids, logits_bf16, normed); },
               ErrorKind::dtype, {"rms_norm_gemm_argmax", "'logits'", "f32", "bf16"});
  expect_error([&] {
    ops::rms_norm_gemm_argmax(x, nw, 1e-6f, w, ids, logits, fake_cuda(DType::bf16, {2, 8}));
  }, ErrorKind::device, {"rms_norm_gemm_argmax", "'normed'", "cpu", "cuda:0"});
}

// The CPU reference is rms_norm_gemm then argmax: the ids of the largest logits.
TEST(FusedGemmGreedyHead, CpuReference) {
  const Device cpu = Device::cpu();
  const int64_t m = 3, n = 37, k = 24;
  OwnedTensor x = random_host(DType::f32, {m, k}, 11), nw = random_host(DType::f32, {k}, 12, 0.5f, 1.5f);
  OwnedTensor w = random_host(DType::f32, {n, k}, 13);
  OwnedTensor logits(DType::f32, {m, n}, cpu), normed(DType::f32, {m, k}, cpu);
  OwnedTensor ids(DType::i32, {m}, cpu);
  ops::rms_norm_gemm_argmax(x, nw, 1e-6f, w, ids, logits, normed);
  OwnedTensor plain(DType::f32, {m, n}, cpu);
  ops::rms_norm_gemm(x, nw, 1e-6f, w, Tensor{}, plain, normed);
  const std::vector<float> l = to_floats(plain);
  for (int64_t r = 0; r < m; ++r) {
    const auto best = std::max_element(l.begin() + r * n, l.begin() + (r + 1) * n);
    EXPECT_EQ(ids.view().ptr<int32_t>()[r], best - (l.begin() + r * n)) << "row " << r;
  }
}

TEST(FusedGemmErrors, GemmAdd) {
  const Device cpu = Device::cpu();
  OwnedTensor a(DType::f16, {3, 16}, cpu), w(DType::f16, {4, 16}, cpu);
  OwnedTensor res(DType::f16, {3, 4}, cpu), scratch(DType::f16, {3, 4}, cpu);
  OwnedTensor res_bad(DType::f16, {3, 5}, cpu), res_bf16(DType::bf16, {3, 4}, cpu);
  OwnedTensor bias_bad(DType::f16, {5}, cpu), a_i32(DType::i32, {3, 16}, cpu);
  expect_error([&] { ops::gemm_add(a, w, Tensor{}, res_bad, scratch); }, ErrorKind::shape,
               {"gemm_add", "'residual'", "[3, 5]"});
  expect_error([&] { ops::gemm_add(a, w, Tensor{}, res_bf16, scratch); }, ErrorKind::dtype,
               {"gemm_add", "'residual'", "f16", "bf16"});
  expect_error([&] { ops::gemm_add(a, w, bias_bad, res, scratch); }, ErrorKind::shape,
               {"gemm_add", "'bias'", "[5]"});
  expect_error([&] { ops::gemm_add(a_i32, w, Tensor{}, res, scratch); }, ErrorKind::dtype,
               {"gemm_add", "'a'", "i32"});
  expect_error([&] { ops::gemm_add(a, w, Tensor{}, res, fake_cuda(DType::f16, {3, 4})); },
               ErrorKind::device, {"gemm_add", "'scratch'", "cpu", "cuda:0"});
}

TEST(FusedGemmErrors, SwigluGemmAdd) {
  const Device cpu = Device::cpu();
  OwnedTensor gu(DType::bf16, {2, 16}, cpu), w(DType::bf16, {4, 8}, cpu);
  OwnedTensor res(DType::bf16, {2, 4}, cpu), act(DType::bf16, {2, 8}, cpu), scratch(DType::bf16, {2, 4}, cpu);
  OwnedTensor gu_odd(DType::bf16, {2, 15}, cpu), w_bad(DType::bf16, {4, 16}, cpu);
  OwnedTensor act_bad(DType::bf16, {2, 16}, cpu), w_f16(DType::f16, {4, 8}, cpu);
  expect_error([&] { ops::swiglu_gemm_add(gu_odd, w, res, act, scratch); }, ErrorKind::shape,
               {"swiglu_gemm_add", "'gate_up'", "even"});
  expect_error([&] { ops::swiglu_gemm_add(gu, w_bad, res, act, scratch); }, ErrorKind::shape,
               {"swiglu_gemm_add", "'w'", "16"});
  expect_error([&] { ops::swiglu_gemm_add(gu, w_f16, res, act, scratch); }, ErrorKind::dtype,
               {"swiglu_gemm_add", "'w'", "bf16", "f16"});
  expect_error([&] { ops::swiglu_gemm_add(gu, w, res, act_bad, scratch); }, ErrorKind::shape,
               {"swiglu_gemm_add", "'act'", "[2, 16]"});
  expect_error([&] { ops::swiglu_gemm_add(gu, w, fake_cuda(DType::bf16, {2, 4}), act, scratch); },
               ErrorKind::device, {"swiglu_gemm_add", "'residual'", "cpu", "cuda:0"});
}

// The CPU reference is the composition it claims to be: rms_norm then gemm, gemm then add,
// silu_mul then gemm then add, through the primitive ops (here on the CPU, f32 included).
TEST(FusedGemmReference, IsTheComposition) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device cpu = Device::cpu();
  for (DType t : {DType::f32, DType::bf16}) {
    const int64_t m = 3, k = 24, n = 10;
    OwnedTensor x = random_host(t, {m, k}, seed), nw = random_host(t, {k}, seed + 1);
    OwnedTensor w = random_host(t, {n, k}, seed + 2), bias = random_host(t, {n}, seed + 3);
    OwnedTensor normed(t, {m, k}, cpu), out(t, {m, n}, cpu), out2(t, {m, n}, cpu);
    ops::rms_norm_gemm(x, nw, 1e-5f, w, bias, out, normed);
    OwnedTensor n2(t, {m, k}, cpu);
    ops::rms_norm(x, nw, 1e-5f, n2);
    ops::gemm(n2, w, bias, out2);
    EXPECT_EQ(to_floats(out), to_floats(out2));

    OwnedTensor res = random_host(t, {m, n}, seed + 4), res2 = to_device(res, cpu);
    OwnedTensor scratch(t, {m, n}, cpu), prod(t, {m, n}, cpu);
    ops::gemm_add(x, w, bias, res, scratch);
    ops::gemm(x, w, bias, prod);
    ops::add_inplace(prod, res2);
    EXPECT_EQ(to_floats(res), to_floats(res2));

    OwnedTensor gu = random_host(t, {m, 2 * k}, seed + 5), act(t, {m, k}, cpu), act2(t, {m, k}, cpu);
    OwnedTensor res3 = to_device(res, cpu);
    ops::swiglu_gemm_add(gu, w, res, act, scratch);
    ops::silu_mul(gu, act2);
    ops::gemm(act2, w, Tensor{}, prod);
    ops::add_inplace(prod, res3);
    EXPECT_EQ(to_floats(res), to_floats(res3));
  }
}

}  // namespace
}  // namespace braid::test
