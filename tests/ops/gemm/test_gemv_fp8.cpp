// The fused GEMV on FP8 weights (gemv_fused.h: gemv_plain, gemv_rms_norm, gemv_add,
// gemv_swiglu_add with an f8e4m3 w and its f32 scales, per 128 x 128 block or per output
// channel), called directly, against a CPU reference written here: the weights dequantized
// (code * scale, in fp64), the op's activations rounded as the kernel rounds them (and, with
// the e4m3 activations, quantized per row and 128 columns as moe_fp8_quantize does), the sum in
// fp64, then the op's output roundings. Both activation settings run (exact on fewer shapes);
// the same check runs on 16-bit weights. Plus: every e4m3
// code decodes exactly, power-of-two scales scale the result exactly, and when the kernel
// applies / which scale shapes it takes (these two need no GPU).
//
// The tolerance, per element: the GPU and the reference differ in the order of the fp32 sum
// only (the products a * w are exact in the mma, the activations are rounded the same way), so
//   |got - exact| <= delta + the output's roundings (half a unit in the last place of T for each
//                    rounding to T the op does: one, or two with the residual add),
//   delta = (k / 128 + 32) * 2^-22 * sum_k |a_k w_k s_k|,
// a bound on fp32 accumulation along the kernel's chains (a warp's k / 8 columns in 16-column
// mmas, k / 128 of them, the 8 warps' partial sums, the scale fmas; the tensor cores' adds truncate, so
// 2^-22 per add, not 2^-24) with room to spare. With normalised prologues (rms_norm, swiglu) the
// activation itself may round the other way when the GPU's 1 / rms or silu differs from the
// reference's in the last fp32 bit: allowed for up to 8 elements per row, each moving its term
// by 2 units of T's last place (8 * 2^-(p-1) * max_k |term|). Quantized, such an element may also
// change its e4m3 code (and, as a block's amax, the block's scale): allowed as up to 8 terms
// moving by one e4m3 step (2^-3 relative), max_k |term| in all. The products of codes are exact
// in the mma, and a block scale's product s_w * s_a is one more fp32 rounding, inside delta. A wrong block scale, a misplaced
// column or a tail left out moves a sum by whole terms and fails by orders of magnitude; a wrong
// decoding of small codes could hide under delta, so DecodesEveryCode checks decoding exactly.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "braid/ops.h"
#include "ops/cpu/cpu_ops.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/gemv/gemv_fused.h"
#endif

namespace braid::test {
namespace {

#if !BRAID_WITH_CUDA
TEST(GemvFp8, CudaOnly) { GTEST_SKIP() << "CPU-only build: the fused GEMV is a CUDA kernel"; }
#else

enum class Op { plain, rms_norm, add, swiglu_add };
enum class Scales { block, channel, none };  // none: 16-bit w in the activations' dtype

const char* op_name(Op op) {
  switch (op) {
    case Op::plain: return "plain";
    case Op::rms_norm: return "rms_norm";
    case Op::add: return "add";
    case Op::swiglu_add: return "swiglu_add";
  }
  return "?";
}
const char* scales_name(Scales s) {
  return s == Scales::block ? "block" : s == Scales::channel ? "channel" : "w16";
}

struct Fp8Case {
  Op op;
  Scales scales;
  DType dtype;  // activations (and w when scales == none)
  int64_t m, n, k;
  cuda::Fp8GemvActivations acts = cuda::Fp8GemvActivations::e4m3;
};

// plain and rms_norm write f32 at m = 3 and 9; plain, rms_norm and add take a bias at m = 1, 9.
bool out_f32(const Fp8Case& c) { return (c.op == Op::plain || c.op == Op::rms_norm) && (c.m == 3 || c.m == 9); }
bool has_bias(const Fp8Case& c) { return c.op != Op::swiglu_add && (c.m == 1 || c.m == 9); }

std::string case_name(const Fp8Case& c) {
  return std::string(op_name(c.op)) + "_" + scales_name(c.scales) + "_" +
         std::string(dtype_name(c.dtype)) + "_m" + std::to_string(c.m) + "_" + std::to_string(c.n) +
         "x" + std::to_string(c.k) + (has_bias(c) ? "_bias" : "") + (out_f32(c) ? "_f32out" : "") +
         (c.scales != Scales::none && c.acts == cuda::Fp8GemvActivations::exact ? "_exact" : "");
}
void PrintTo(const Fp8Case& c, std::ostream* os) { *os << case_name(c); }

// FP8: every op, both scale layouts and activation dtypes, m in {1, 3, 9, 16} (m > 8 takes the
// kernel's wide variant), n in {128, 200, 384, 4224} (200: a partial 16-row tile and a partial
// 128-row scale block; 4224 = 4096 + 128: 33 scale blocks), k in {128, 512, 4096} (k = 128 and
// 512: fewer 128-column blocks than warps), with the e4m3 setting (which keeps these n exact:
// too few tiles per block), plus n = 17408 (1088 tiles: quantized on GPUs of up to 136 SMs) at m
// in {1, 9, 16}, k in {512, 4096}. Exact setting: m in {1, 9, 16}, n in {200, 4224}, k in {512,
// 4096}. 16-bit weights: every op at m in {1, 9} on two shapes.
std::vector<Fp8Case> fp8_cases() {
  std::vector<Fp8Case> cases;
  for (Op op : {Op::plain, Op::rms_norm, Op::add, Op::swiglu_add})
    for (Scales s : {Scales::block, Scales::channel})
      for (DType t : {DType::bf16, DType::f16}) {
        for (int64_t m : {1, 3, 9, 16})
          for (int64_t n : {128, 200, 384, 4224})
            for (int64_t k : {128, 512, 4096}) cases.push_back({op, s, t, m, n, k});
        for (int64_t m : {1, 9, 16})
          for (int64_t k : {512, 4096}) cases.push_back({op, s, t, m, 17408, k});
        for (int64_t m : {1, 9, 16})
          for (int64_t n : {200, 4224})
            for (int64_t k : {512, 4096})
              cases.push_back({op, s, t, m, n, k, cuda::Fp8GemvActivations::exact});
      }
  return cases;
}
std::vector<Fp8Case> w16_cases() {
  std::vector<Fp8Case> cases;
  for (Op op : {Op::plain, Op::rms_norm, Op::add, Op::swiglu_add})
    for (DType t : {DType::bf16, DType::f16})
      for (int64_t m : {1, 9})
        for (auto [n, k] : {std::pair<int64_t, int64_t>{200, 512}, {4224, 4096}})
          cases.push_back({op, Scales::none, t, m, n, k});
  return cases;
}

// ---------------------------------------------------------------------------------------------
// Weights, made once per (layout, dtype, n, k) and kept for the whole run (the large ones take
// ~0.5 s to draw).

struct Weights {
  OwnedTensor w, scale;      // host: [n, k] f8e4m3 or T; [ceil(n/128), k/128] or [n, 1] f32
  OwnedTensor dw, dscale;    // the same on the GPU (dscale undefined for 16-bit w)
  std::vector<float> value;  // [n, k] the code's value (exact in float), unscaled
  Scales scales;
  int64_t n, k;
  double scale_at(int64_t r, int64_t c) const {
    if (scales == Scales::none) return 1.0;
    const float* s = scale.view().ptr<float>();
    return scales == Scales::channel ? s[r] : s[(r / 128) * (k / 128) + c / 128];
  }
};

// e4m3 weights like a checkpoint's: randn / sqrt(k), each scale group (a 128 x 128 block, or a
// row) times 2^u, u uniform in [-2, 2] (so neighbouring scales differ and a wrong one shows),
// quantized as DeepSeek-V3 does: s = amax / 448, q = e4m3(v / s). 16-bit: uniform +-2 / sqrt(k).
std::shared_ptr<Weights> make_weights(Scales scales, DType dtype, int64_t n, int64_t k) {
  auto w = std::make_shared<Weights>();
  w->scales = scales;
  w->n = n;
  w->k = k;
  const uint64_t seed = 0x5eed0000u + static_cast<uint64_t>(n * 7919 + k * 31 + static_cast<int>(scales));
  w->value.resize(static_cast<size_t>(n * k));
  if (scales == Scales::none) {
    const float a = 2.0f / std::sqrt(static_cast<float>(k));
    w->w = random_host(dtype, {n, k}, seed, -a, a);
    for (int64_t i = 0; i < n * k; ++i) w->value[i] = load_as_float(w->w.data(), dtype, i);
    w->dw = to_device(w->w, Device::cuda(0));
    return w;
  }
  const int64_t row_groups = scales == Scales::block ? (n + 127) / 128 : n;
  const int64_t col_groups = scales == Scales::block ? k / 128 : 1;
  const int64_t rows_per = scales == Scales::block ? 128 : 1, cols_per = k / col_groups;
  w->w = OwnedTensor(DType::f8e4m3, {n, k}, Device::cpu());
  w->scale = OwnedTensor(DType::f32, {row_groups, col_groups}, Device::cpu());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-2.0f, 2.0f);
  uint8_t* q = w->w.view().ptr<uint8_t>();
  float* s = w->scale.view().ptr<float>();
  std::vector<float> v;
  for (int64_t gr = 0; gr < row_groups; ++gr)
    for (int64_t gc = 0; gc < col_groups; ++gc) {
      const int64_t r0 = gr * rows_per, r1 = std::min(n, r0 + rows_per), c0 = gc * cols_per;
      const float magnitude = std::exp2(exponent(rng)) / std::sqrt(static_cast<float>(k));
      v.assign(static_cast<size_t>((r1 - r0) * cols_per), 0.0f);
      float amax = 0.0f;
      for (float& x : v) {
        x = normal(rng) * magnitude;
        amax = std::max(amax, std::fabs(x));
      }
      const float scale = amax > 0 ? amax / 448.0f : 1.0f;
      s[gr * col_groups + gc] = scale;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c0 + cols_per; ++c) {
          const uint8_t code = float_to_f8e4m3(v[(r - r0) * cols_per + (c - c0)] / scale);
          q[r * k + c] = code;
          w->value[r * k + c] = f8e4m3_to_float(code);
        }
    }
  w->dw = to_device(w->w, Device::cuda(0));
  w->dscale = to_device(w->scale, Device::cuda(0));
  return w;
}

const Weights& weights(Scales scales, DType dtype, int64_t n, int64_t k) {
  static std::map<std::tuple<int, int, int64_t, int64_t>, std::shared_ptr<Weights>> cache;
  const DType key_dtype = scales == Scales::none ? dtype : DType::f8e4m3;  // fp8 serves both
  auto& slot = cache[{static_cast<int>(scales), static_cast<int>(key_dtype), n, k}];
  if (!slot) slot = make_weights(scales, dtype, n, k);
  return *slot;
}

// The activation setting for one scope (the process-wide one restored after).
struct ActivationsScope {
  cuda::Fp8GemvActivations saved = cuda::fp8_gemv_activations();
  explicit ActivationsScope(cuda::Fp8GemvActivations a) { cuda::set_fp8_gemv_activations(a); }
  ~ActivationsScope() { cuda::set_fp8_gemv_activations(saved); }
};

// ---------------------------------------------------------------------------------------------
// The reference.

float round_to(DType t, float v) { return quantize(t, v); }

// Half the spacing of T's values at magnitude x (x >= 0).
double half_ulp(DType t, double x) {
  const int precision = t == DType::bf16 ? 8 : 11, min_exp = t == DType::bf16 ? -126 : -14;
  const int e = x > 0 ? std::max(std::ilogb(x), min_exp) : min_exp;
  return std::ldexp(1.0, e - precision);  // spacing 2^(e - (p - 1)), halved
}

// The activations the kernel feeds the mmas, [m, k] as floats (values of T): a itself, or
// rms_norm's two roundings (x * inv_rms, then weight * that, in fp32) or swiglu's one.
std::vector<float> mma_activations(Op op, DType t, const Tensor& a, const Tensor& nw, float eps,
                                   int64_t m, int64_t k) {
  std::vector<float> h(static_cast<size_t>(m * k));
  const int64_t ld = a.shape[1];
  for (int64_t i = 0; i < m; ++i) {
    float inv_rms = 0.0f;
    if (op == Op::rms_norm) {
      double ss = 0;
      for (int64_t c = 0; c < k; ++c) {
        const double x = load_as_float(a.data, t, i * ld + c);
        ss += x * x;
      }
      inv_rms = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(k) + eps));
    }
    for (int64_t c = 0; c < k; ++c) {
      const float x = load_as_float(a.data, t, i * ld + c);
      float v = x;
      if (op == Op::rms_norm) {
        const float normed = round_to(t, x * inv_rms);
        v = round_to(t, load_as_float(nw.data, t, c) * normed);
      } else if (op == Op::swiglu_add) {
        const float up = load_as_float(a.data, t, i * ld + k + c);
        const float silu = static_cast<float>(x / (1.0 + std::exp(-static_cast<double>(x))));
        v = round_to(t, silu * up);
      }
      h[i * k + c] = v;
    }
  }
  return h;
}

// h [m, k] quantized per row and 128 columns by moe_fp8_quantize's one-term definition (the CPU
// reference's block quantizer), as the values code * s (exact in double).
std::vector<double> quantized_activations(const std::vector<float>& h, int64_t m, int64_t k) {
  std::vector<double> q(h.size());
  uint8_t codes[128];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t b = 0; b < k; b += 128) {
      float s = 0.0f;
      cpu::fp8_quantize_block(h.data() + i * k + b, 1, codes, 0, &s, 0);
      for (int j = 0; j < 128; ++j) q[i * k + b + j] = static_cast<double>(f8e4m3_to_float(codes[j])) * s;
    }
  return q;
}

struct RefSum {
  double sum = 0, abs_sum = 0, max_term = 0;
};

// sum_c h[i, c] * value[j, c] * scale(j, c) for all (i, j), in fp64, over the machine's threads.
std::vector<RefSum> reference_sums(const std::vector<double>& h, const Weights& w, int64_t m) {
  const int64_t n = w.n, k = w.k;
  std::vector<RefSum> out(static_cast<size_t>(m * n));
  auto work = [&](int64_t j0, int64_t j1) {
    std::vector<double> s(static_cast<size_t>(k));
    for (int64_t j = j0; j < j1; ++j) {
      for (int64_t c = 0; c < k; ++c) s[c] = w.value[j * k + c] * w.scale_at(j, c);  // exact
      for (int64_t i = 0; i < m; ++i) {
        const double* hi = h.data() + i * k;
        double sum[4] = {}, abs_sum[4] = {}, max_term = 0;
        for (int64_t c = 0; c < k; c += 4)
          for (int u = 0; u < 4; ++u) {
            const double term = hi[c + u] * s[c + u];
            sum[u] += term;
            abs_sum[u] += std::fabs(term);
            max_term = std::max(max_term, std::fabs(term));
          }
        out[i * n + j] = {sum[0] + sum[1] + sum[2] + sum[3],
                          abs_sum[0] + abs_sum[1] + abs_sum[2] + abs_sum[3], max_term};
      }
    }
  };
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  std::vector<std::thread> pool;
  const int64_t per = (n + threads - 1) / threads;
  for (int64_t t = 0; t < threads; ++t)
    if (t * per < n) pool.emplace_back(work, t * per, std::min(n, (t + 1) * per));
  for (auto& th : pool) th.join();
  return out;
}

// ---------------------------------------------------------------------------------------------
// The differential test.

class GemvFp8Diff : public ::testing::TestWithParam<Fp8Case> {};

void run_case(const Fp8Case& c) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda(0);
  const DType t = c.dtype, out_t = out_f32(c) ? DType::f32 : t;
  const Weights& w = weights(c.scales, t, c.n, c.k);
  const float eps = 1e-6f;
  ActivationsScope setting(c.acts);
  const bool quantized = c.scales != Scales::none && cuda::gemv_fp8_quantizes(c.m, c.n, c.k);
  ::testing::Test::RecordProperty("quantized", quantized ? "yes" : "no");

  const int64_t a_cols = c.op == Op::swiglu_add ? 2 * c.k : c.k;
  const float a_range = c.op == Op::rms_norm ? 2.0f : c.op == Op::swiglu_add ? 3.0f : 1.0f;
  OwnedTensor a = random_host(t, {c.m, a_cols}, seed, -a_range, a_range);
  OwnedTensor nw = random_host(t, {c.k}, seed + 1, 0.5f, 1.5f);
  OwnedTensor bias = has_bias(c) ? random_host(out_t, {c.n}, seed + 2) : OwnedTensor();
  OwnedTensor residual = random_host(t, {c.m, c.n}, seed + 3, -4.0f, 4.0f);
  const bool adds = c.op == Op::add || c.op == Op::swiglu_add;

  OwnedTensor da = to_device(a, gpu), dnw = to_device(nw, gpu);
  OwnedTensor dbias = has_bias(c) ? to_device(bias, gpu) : OwnedTensor();
  OwnedTensor out = adds ? to_device(residual, gpu) : poisoned(out_t, {c.m, c.n}, gpu);
  ASSERT_TRUE(cuda::gemv_fused_applicable(da, c.k, w.dw));
  switch (c.op) {
    case Op::plain: cuda::gemv_plain(da, w.dw, w.dscale, dbias.view(), out, {}); break;
    case Op::rms_norm:
      cuda::gemv_rms_norm(da, dnw, eps, w.dw, w.dscale, dbias.view(), out, Tensor{}, {});
      break;
    case Op::add: cuda::gemv_add(da, w.dw, w.dscale, dbias.view(), out, {}); break;
    case Op::swiglu_add: cuda::gemv_swiglu_add(da, w.dw, w.dscale, out, {}); break;
  }
  const std::vector<float> got = to_floats(out);  // synchronises

  const std::vector<float> h = mma_activations(c.op, t, a, nw, eps, c.m, c.k);
  const std::vector<RefSum> ref =
      reference_sums(quantized ? quantized_activations(h, c.m, c.k) : std::vector<double>(h.begin(), h.end()), w, c.m);
  const double chain = (static_cast<double>(c.k) / 128.0 + 32.0) * std::ldexp(1.0, -22);
  const bool normalised = c.op == Op::rms_norm || c.op == Op::swiglu_add;
  const double flip = !normalised ? 0.0 : quantized ? 1.0 : 8.0 * std::ldexp(1.0, t == DType::bf16 ? -7 : -10);
  int failures = 0;
  double worst = 0;  // largest |error| / bound
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      const RefSum& r = ref[i * c.n + j];
      const double b = has_bias(c) ? load_as_float(bias.data(), out_t, j) : 0.0;
      const double product = r.sum + b;  // the exact product (+ bias)
      const double delta = chain * (r.abs_sum + std::fabs(b)) + flip * r.max_term;
      double exact = product, bound = delta;
      if (adds) {  // residual + to_dtype(product), rounded again
        exact += load_as_float(residual.data(), t, i * c.n + j);
        bound += half_ulp(t, std::fabs(product) + delta) + half_ulp(t, std::fabs(exact) + 2 * bound);
      } else if (out_t == DType::f32) {
        bound += std::ldexp(std::fabs(product), -23);
      } else {
        bound += half_ulp(t, std::fabs(product) + delta);
      }
      const double g = got[i * c.n + j], err = std::fabs(g - exact);
      worst = std::max(worst, err / bound);
      if (!(err <= bound) && ++failures <= 5)
        ADD_FAILURE() << "out[" << i << ", " << j << "] = " << g << ", expected " << exact
                      << " within " << bound << " (sum |terms| " << r.abs_sum << ")";
    }
  EXPECT_EQ(failures, 0) << failures << " elements outside the bound";
  ::testing::Test::RecordProperty("worst_error_over_bound", std::to_string(worst));
}

TEST_P(GemvFp8Diff, MatchesReference) { run_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Fp8, GemvFp8Diff, ::testing::ValuesIn(fp8_cases()),
                         [](const auto& info) { return case_name(info.param); });
INSTANTIATE_TEST_SUITE_P(Weights16, GemvFp8Diff, ::testing::ValuesIn(w16_cases()),
                         [](const auto& info) { return case_name(info.param); });

// Which products quantize (gemv_fused.h): n with at least 4 tiles of 16 rows per block of a grid
// of two blocks per SM, and m rows of k codes within the 96 KB of shared memory; none with the
// exact setting.
TEST(GemvFp8, QuantizesWhereEachBlockHasFourTiles) {
  BRAID_REQUIRE_CUDA();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int64_t n = 16 * 4 * 2 * int64_t{sms};  // the smallest n that quantizes
  ActivationsScope setting(cuda::Fp8GemvActivations::e4m3);
  EXPECT_TRUE(cuda::gemv_fp8_quantizes(1, n, 4096));
  EXPECT_FALSE(cuda::gemv_fp8_quantizes(1, n - 16, 4096));
  EXPECT_TRUE(cuda::gemv_fp8_quantizes(16, n, 4096));
  EXPECT_TRUE(cuda::gemv_fp8_quantizes(6, n, 14336));   // 6 x 14400 + 7168 bytes
  EXPECT_FALSE(cuda::gemv_fp8_quantizes(7, n, 14336));  // past 96 KB
  EXPECT_FALSE(cuda::gemv_fp8_quantizes(17, n, 4096));
  cuda::set_fp8_gemv_activations(cuda::Fp8GemvActivations::exact);
  EXPECT_FALSE(cuda::gemv_fp8_quantizes(1, n, 4096));
}

// ---------------------------------------------------------------------------------------------
// Exactness.

// Every e4m3 code but the two NaNs decodes to its exact value in both activation dtypes and
// settings, in every byte position of a lane's 16-byte load: w[r, c] = code (r + c) mod 256 (NaN
// codes: 0; n large enough for the e4m3 setting to quantize), and activation row i is one-hot at
// column 17 i (byte i of a load) with the value 448 (an e4m3 value whose block quantizes with
// scale 1), so out[i, r] = value(w[r, 17 i]) * 448, exactly (f32 out, scales of 1, both layouts).
TEST(GemvFp8, DecodesEveryCode) {
  BRAID_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const int64_t m = 16, n = 17408, k = 256;  // n: enough tiles to quantize (QuantizesWhere...)
  OwnedTensor w(DType::f8e4m3, {n, k}, Device::cpu());
  uint8_t* q = w.view().ptr<uint8_t>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const auto code = static_cast<uint8_t>((r + c) % 256);
      q[r * k + c] = (code & 0x7f) == 0x7f ? 0 : code;
    }
  OwnedTensor dw = to_device(w, gpu);
  for (auto acts : {cuda::Fp8GemvActivations::e4m3, cuda::Fp8GemvActivations::exact})
  for (Scales layout : {Scales::block, Scales::channel}) {
    ActivationsScope setting(acts);
    const std::vector<int64_t> shape = layout == Scales::block ? std::vector<int64_t>{n / 128, k / 128}
                                                               : std::vector<int64_t>{n, 1};
    OwnedTensor scale(DType::f32, shape, Device::cpu());
    std::fill_n(scale.view().ptr<float>(), scale.view().numel(), 1.0f);
    OwnedTensor dscale = to_device(scale, gpu);
    for (DType t : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(scales_name(layout)) + " " + std::string(dtype_name(t)) +
                   (acts == cuda::Fp8GemvActivations::exact ? " exact" : " e4m3"));
      OwnedTensor a(t, {m, k}, Device::cpu());
      for (int64_t i = 0; i < m * k; ++i) store_from_float(a.data(), t, i, 0.0f);
      for (int64_t i = 0; i < m; ++i) store_from_float(a.data(), t, i * k + 17 * i, 448.0f);
      OwnedTensor da = to_device(a, gpu), out = poisoned(DType::f32, {m, n}, gpu);
      cuda::gemv_plain(da, dw, dscale, Tensor{}, out, {});
      const std::vector<float> got = to_floats(out);
      int wrong = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < n; ++r) {
          const float expected = f8e4m3_to_float(q[r * k + 17 * i]) * 448.0f;
          if (got[i * n + r] != expected && ++wrong <= 5)
            ADD_FAILURE() << "code 0x" << std::hex << int(q[r * k + 17 * i]) << std::dec
                          << " (row " << r << ", activation row " << i << "): " << got[i * n + r]
                          << ", expected " << expected;
        }
      EXPECT_EQ(wrong, 0);
    }
  }
}

// Power-of-two scales scale the fp32 sums exactly, so gemv_plain (f32 out) with scales 2^e must
// give 2^e times its result with scales of 1, bit for bit: per channel 2^(r mod 5 - 2) (applied
// in the epilogue), and per block one 2^3 for every block (applied to each run's sum), in every
// op's kernel variant that gemv_plain reaches (m <= 8 and m > 8), in both activation settings.
TEST(GemvFp8, PowerOfTwoScalesAreExact) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda(0);
  const Weights& w8 = weights(Scales::block, DType::bf16, 17408, 4096);  // its codes, other scales
  const int64_t n = w8.n, k = w8.k;
  auto scales = [&](std::vector<int64_t> shape, auto value) {
    OwnedTensor s(DType::f32, shape, Device::cpu());
    for (int64_t i = 0; i < s.view().numel(); ++i) s.view().ptr<float>()[i] = value(i);
    return to_device(s, gpu);
  };
  OwnedTensor ch1 = scales({n, 1}, [](int64_t) { return 1.0f; });
  OwnedTensor ch2 = scales({n, 1}, [](int64_t r) { return std::ldexp(1.0f, static_cast<int>(r % 5) - 2); });
  OwnedTensor bl1 = scales({n / 128, k / 128}, [](int64_t) { return 1.0f; });
  OwnedTensor bl2 = scales({n / 128, k / 128}, [](int64_t) { return 8.0f; });
  for (auto acts : {cuda::Fp8GemvActivations::e4m3, cuda::Fp8GemvActivations::exact})
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t m : {3, 16}) {
      ActivationsScope setting(acts);
      SCOPED_TRACE(std::string(dtype_name(t)) + " m " + std::to_string(m) +
                   (acts == cuda::Fp8GemvActivations::exact ? " exact" : " e4m3"));
      OwnedTensor a = to_device(random_host(t, {m, k}, seed, -2.0f, 2.0f), gpu);
      auto run = [&](const Tensor& s) {
        OwnedTensor out = poisoned(DType::f32, {m, n}, gpu);
        cuda::gemv_plain(a, w8.dw, s, Tensor{}, out, {});
        return to_floats(out);
      };
      const std::vector<float> c1 = run(ch1), c2 = run(ch2), b1 = run(bl1), b2 = run(bl2);
      int wrong = 0;
      for (int64_t i = 0; i < m * n; ++i) {
        wrong += c2[i] != std::ldexp(c1[i], static_cast<int>((i % n) % 5) - 2);
        wrong += b2[i] != 8.0f * b1[i];
      }
      EXPECT_EQ(wrong, 0);
    }
}

// ---------------------------------------------------------------------------------------------
// When it applies, and the scale layouts (no GPU needed: fake device pointers, nothing launched).

TEST(GemvFp8Applicable, KMultipleOf128) {
  const Tensor a200 = fake_cuda(DType::bf16, {1, 200}), a256 = fake_cuda(DType::bf16, {4, 256});
  EXPECT_FALSE(cuda::gemv_fused_applicable(a200, 200, fake_cuda(DType::f8e4m3, {256, 200})));
  EXPECT_FALSE(cuda::gemv_fused_applicable(fake_cuda(DType::f16, {2, 136}), 136,
                                           fake_cuda(DType::f8e4m3, {64, 136})));
  EXPECT_TRUE(cuda::gemv_fused_applicable(a256, 256, fake_cuda(DType::f8e4m3, {300, 256})));
  // swiglu: k is half of a's columns.
  EXPECT_TRUE(cuda::gemv_fused_applicable(fake_cuda(DType::bf16, {1, 256}), 128,
                                          fake_cuda(DType::f8e4m3, {64, 128})));
  EXPECT_FALSE(cuda::gemv_fused_applicable(fake_cuda(DType::bf16, {1, 384}), 192,
                                           fake_cuda(DType::f8e4m3, {64, 192})));
  // 16-bit weights as before: k % 8 == 0 is enough.
  EXPECT_TRUE(cuda::gemv_fused_applicable(a200, 200, fake_cuda(DType::bf16, {256, 200})));
  // Other weight dtypes are not the kernel's.
  EXPECT_FALSE(cuda::gemv_fused_applicable(a256, 256, fake_cuda(DType::f8e5m2, {300, 256})));
  EXPECT_FALSE(cuda::gemv_fused_applicable(a256, 256, fake_cuda(DType::f16, {300, 256})));
  EXPECT_FALSE(cuda::gemv_fused_applicable(fake_cuda(DType::f32, {1, 256}), 256,
                                           fake_cuda(DType::f8e4m3, {300, 256})));
}

TEST(GemvFp8Applicable, ScaleLayouts) {
  const Tensor a = fake_cuda(DType::bf16, {2, 256}), w = fake_cuda(DType::f8e4m3, {300, 256});
  const Tensor out = fake_cuda(DType::bf16, {2, 300});
  expect_error([&] { cuda::gemv_plain(a, w, Tensor{}, Tensor{}, out, {}); },
               ErrorKind::invalid_argument, {"gemv_plain", "'w_scale'", "f32"});
  expect_error([&] { cuda::gemv_plain(a, w, fake_cuda(DType::bf16, {3, 2}), Tensor{}, out, {}); },
               ErrorKind::invalid_argument, {"gemv_plain", "'w_scale'"});
  expect_error([&] { cuda::gemv_add(a, w, fake_cuda(DType::f32, {2, 2}), Tensor{}, out, {}); },
               ErrorKind::shape, {"gemv_add", "[3, 2]", "[300, 1]"});
  expect_error([&] { cuda::gemv_rms_norm(a, fake_cuda(DType::bf16, {256}), 1e-6f, w,
                                         fake_cuda(DType::f32, {300}), Tensor{}, out, Tensor{}, {}); },
               ErrorKind::shape, {"gemv_rms_norm", "'w_scale'"});
  expect_error([&] { cuda::gemv_swiglu_add(fake_cuda(DType::bf16, {2, 512}), w,
                                           fake_cuda(DType::f32, {3, 1}), out, {}); },
               ErrorKind::shape, {"gemv_swiglu_add", "'w_scale'"});
}

#endif

}  // namespace
}  // namespace braid::test
