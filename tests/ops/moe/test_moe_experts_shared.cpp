// moe_experts with DeepSeek's shared experts and the residual add (MoeExpertsExtras): the CPU
// reference against the separate ops it replaces in forward() (routed experts, the shared MLP as
// gemm + swiglu_gemm_add, add_inplace), its fp8 form against the same weights dequantized, the
// argument checks, and the CUDA kernels against the CPU reference (skipped without a GPU): the
// DeepSeek-OCR and V2-Lite shapes, 1 to 40 tokens, 1 to 3 shared experts, each extra alone,
// out aliasing residual, scalar-load widths, f16/bf16/f32 and fp8.
#include <cmath>
#include <string>
#include <vector>

#include "braid/ops.h"
#include "ops/fp8_test_util.h"
#include "ops/moe/moe_test_util.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct SharedProblem {
  OwnedTensor x, weights, ids, gate_up, down;  // the routed experts, as moe_experts takes them
  OwnedTensor shared_gate_up, shared_down;     // [2S, H], [H, S]
  OwnedTensor residual;                        // [T, H]
};

SharedProblem make_shared_problem(DType dtype, int64_t tokens, int64_t experts, int64_t k,
                                  int64_t hidden, int64_t inter, int64_t shared, uint64_t seed) {
  const float gate_scale = 2.0f / std::sqrt(static_cast<float>(hidden));
  const float down_scale = 2.0f / std::sqrt(static_cast<float>(inter));
  const int64_t width = shared * inter;
  SharedProblem p{random_host(dtype, {tokens, hidden}, seed),
                  random_host(DType::f32, {tokens, k}, seed + 1, 0.05f, 1.0f),
                  OwnedTensor(DType::i32, {tokens, k}, Device::cpu()),
                  random_host(dtype, {experts, 2 * inter, hidden}, seed + 2, -gate_scale, gate_scale),
                  random_host(dtype, {experts, hidden, inter}, seed + 3, -down_scale, down_scale),
                  random_host(dtype, {2 * width, hidden}, seed + 5, -gate_scale, gate_scale),
                  random_host(dtype, {hidden, width}, seed + 6, -down_scale, down_scale),
                  random_host(dtype, {tokens, hidden}, seed + 7, -2.0f, 2.0f)};
  moe::distinct_routing(p.ids.view(), experts, seed + 4);
  return p;
}

// moe_experts with the extras on `device`: with_shared / with_residual pick them; out as floats.
// in_place: out is the residual tensor itself.
std::vector<float> run_shared(const SharedProblem& p, Device device, bool with_shared,
                              bool with_residual, bool in_place = false) {
  const Tensor& xt = p.x.view();
  const int64_t tokens = xt.shape[0], hidden = xt.shape[1], k = p.ids.view().shape[1];
  const int64_t inter = p.down.view().shape[2];
  const int64_t shared = with_shared ? p.shared_gate_up.view().shape[0] / 2 / inter : 0;
  auto x = to_device(p.x, device), w = to_device(p.weights, device), ids = to_device(p.ids, device);
  auto gu = to_device(p.gate_up, device), dn = to_device(p.down, device);
  auto sgu = to_device(p.shared_gate_up, device), sdn = to_device(p.shared_down, device);
  auto res = to_device(p.residual, device);
  auto ws = poisoned(DType::f32, {tokens * (k + shared), inter}, device);
  auto out = poisoned(xt.dtype, {tokens, hidden}, device);
  ops::MoeExpertsExtras extras;
  if (with_shared) {
    extras.shared_gate_up = sgu;
    extras.shared_down = sdn;
  }
  if (with_residual) extras.residual = res;
  const Tensor target = in_place ? res.view() : out.view();
  ops::moe_experts(x, w, ids, gu, dn, ws, target, Tensor{}, Tensor{}, extras);
  return to_floats(target);
}

using moe::expect_elementwise_close;

// fp8 weights [E, N, K] (fp8::weights) as f32 values: each code times its block's scale.
OwnedTensor dequantized(const fp8::Fp8Tensor& w) {
  const Tensor q = w.q.view();
  const int64_t experts = q.shape[0], n = q.shape[1], k = q.shape[2];
  OwnedTensor out(DType::f32, {experts, n, k}, Device::cpu());
  const float* s = w.scale.view().ptr<float>();
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const int64_t i = (e * n + r) * k + c;
        const float scale = s[(e * (n / fp8::kB) + r / fp8::kB) * (k / fp8::kB) + c / fp8::kB];
        out.view().ptr<float>()[i] = f8e4m3_to_float(q.ptr<uint8_t>()[i]) * scale;
      }
  return out;
}

// What forward() ran before the extras existed, with the CPU's separate ops.
std::vector<float> by_separate_ops(const SharedProblem& p) {
  const Tensor& x = p.x.view();
  const int64_t tokens = x.shape[0], hidden = x.shape[1], k = p.ids.view().shape[1];
  const int64_t inter = p.down.view().shape[2], width = p.shared_down.view().shape[1];
  OwnedTensor ws(DType::f32, {tokens * k, inter}, Device::cpu());
  OwnedTensor proj(x.dtype, {tokens, hidden}, Device::cpu());
  ops::moe_experts(x, p.weights, p.ids, p.gate_up, p.down, ws, proj);
  OwnedTensor mlp(x.dtype, {tokens, 2 * width}, Device::cpu());
  OwnedTensor act(x.dtype, {tokens, width}, Device::cpu());
  OwnedTensor scratch(x.dtype, {tokens, hidden}, Device::cpu());
  ops::gemm(x, p.shared_gate_up, Tensor{}, mlp);
  ops::swiglu_gemm_add(mlp, p.shared_down, proj, act, scratch);
  OwnedTensor res = to_device(p.residual, Device::cpu());
  ops::add_inplace(proj, res);
  return to_floats(res);
}

TEST(MoeExpertsShared, CpuEqualsTheSeparateOps) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int64_t shared : {1, 2, 3}) {
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(dtype_name(dt)) + " shared " +
                   std::to_string(shared));
      const SharedProblem p = make_shared_problem(dt, 3, 8, 2, 64, 32, shared, seed);
      expect_elementwise_close(run_shared(p, Device::cpu(), true, true), by_separate_ops(p),
                   dt == DType::f32 ? 1e-5 : tolerance(dt));
    }
  }
}

// Each extra on its own: no shared experts is the plain op plus the residual; no residual is the
// separate ops without the last add.
TEST(MoeExpertsShared, CpuExtrasOneAtATime) {
  const SharedProblem p = make_shared_problem(DType::f32, 2, 8, 2, 64, 32, 2, fresh_seed());
  const auto both = run_shared(p, Device::cpu(), true, true);
  const auto routed_only = run_shared(p, Device::cpu(), false, false);
  const auto routed_res = run_shared(p, Device::cpu(), false, true);
  const auto moe = run_shared(p, Device::cpu(), true, false);
  const auto res = to_floats(p.residual);
  std::vector<float> want_res(res.size()), want_both(res.size());
  for (size_t i = 0; i < res.size(); ++i) {
    want_res[i] = res[i] + routed_only[i];
    want_both[i] = res[i] + moe[i];
  }
  expect_elementwise_close(routed_res, want_res, 1e-6);
  expect_elementwise_close(both, want_both, 1e-6);
  EXPECT_GT(rel_error(moe, routed_only), 0.1);  // the shared experts are there
}

// fp8 shared experts (128 x 128 block scales) on the CPU: the same op on the weights dequantized
// to f32 with f32 activations (the products are exact in both; the sums differ by rounding only).
TEST(MoeExpertsShared, CpuFp8MatchesDequantizedWeights) {
  const int64_t tokens = 3, experts = 4, k = 2, hidden = 256, inter = 128, shared = 2;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const fp8::Fp8Tensor gu = fp8::weights(experts, 2 * inter, hidden, seed);
  const fp8::Fp8Tensor dn = fp8::weights(experts, hidden, inter, seed + 1);
  const fp8::Fp8Tensor sgu = fp8::weights(1, 2 * shared * inter, hidden, seed + 2);
  const fp8::Fp8Tensor sdn = fp8::weights(1, hidden, shared * inter, seed + 3);
  SharedProblem p = make_shared_problem(DType::f32, tokens, experts, k, hidden, inter, shared, seed + 4);
  const int64_t width = shared * inter;
  OwnedTensor ws(DType::f32, {tokens * (k + shared), inter}, Device::cpu());
  OwnedTensor out(DType::f32, {tokens, hidden}, Device::cpu());
  ops::MoeExpertsExtras extras;
  extras.shared_gate_up = {sgu.q.view().reshape({2 * width, hidden}), sgu.scale.view().reshape({2 * width / 128, hidden / 128})};
  extras.shared_down = {sdn.q.view().reshape({hidden, width}), sdn.scale.view().reshape({hidden / 128, width / 128})};
  extras.residual = p.residual;
  ops::moe_experts(p.x, p.weights, p.ids, gu.q, dn.q, ws, out, gu.scale, dn.scale, extras);

  p.gate_up = dequantized(gu);
  p.down = dequantized(dn);
  p.shared_gate_up = to_device(dequantized(sgu).view().reshape({2 * width, hidden}), Device::cpu());
  p.shared_down = to_device(dequantized(sdn).view().reshape({hidden, width}), Device::cpu());
  expect_elementwise_close(to_floats(out), run_shared(p, Device::cpu(), true, true), 1e-5);
}

TEST(MoeExpertsShared, BadArgumentsNameTheTensor) {
  const SharedProblem p = make_shared_problem(DType::bf16, 2, 8, 2, 64, 32, 2, fresh_seed());
  OwnedTensor ws(DType::f32, {2 * 4, 32}, Device::cpu()), out(DType::bf16, {2, 64}, Device::cpu());
  auto call = [&](const ops::MoeExpertsExtras& e, const Tensor& workspace) {
    ops::moe_experts(p.x, p.weights, p.ids, p.gate_up, p.down, workspace, out, Tensor{}, Tensor{}, e);
  };
  auto expect_error = [&](const ops::MoeExpertsExtras& e, const Tensor& workspace, const char* arg) {
    try {
      call(e, workspace);
      ADD_FAILURE() << "no error for " << arg;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(std::string("'") + arg + "'"), std::string::npos) << err.what();
    }
  };
  ops::MoeExpertsExtras good;
  good.shared_gate_up = p.shared_gate_up;
  good.shared_down = p.shared_down;
  call(good, ws);  // the right shapes pass

  // A shared width that is no multiple of I (48 = 1.5 x 32).
  OwnedTensor odd_gu(DType::bf16, {96, 64}, Device::cpu()), odd_dn(DType::bf16, {64, 48}, Device::cpu());
  ops::MoeExpertsExtras e = good;
  e.shared_gate_up = odd_gu;
  e.shared_down = odd_dn;
  expect_error(e, ws, "shared_gate_up");
  e = good;
  OwnedTensor wrong_dn(DType::bf16, {64, 32}, Device::cpu());
  e.shared_down = wrong_dn;
  expect_error(e, ws, "shared_down");
  e = good;
  e.shared_down = ops::Weight{};
  expect_error(e, ws, "shared_down");
  OwnedTensor f16_gu(DType::f16, {128, 64}, Device::cpu());
  e = good;
  e.shared_gate_up = f16_gu;
  expect_error(e, ws, "shared_gate_up");
  // The plain op's workspace (no rows for the shared experts' h).
  OwnedTensor small_ws(DType::f32, {2 * 2, 32}, Device::cpu());
  expect_error(good, small_ws, "workspace");
  e = good;
  OwnedTensor bad_res(DType::bf16, {3, 64}, Device::cpu());
  e.residual = bad_res;
  expect_error(e, ws, "residual");
  // fp8 routed experts with 16-bit shared ones.
  const fp8::Fp8Tensor gu8 = fp8::weights(8, 256, 128, 1), dn8 = fp8::weights(8, 128, 128, 2);
  const SharedProblem q = make_shared_problem(DType::bf16, 2, 8, 2, 128, 128, 1, fresh_seed());
  OwnedTensor ws8(DType::f32, {2 * 3, 128}, Device::cpu()), out8(DType::bf16, {2, 128}, Device::cpu());
  ops::MoeExpertsExtras e8;
  e8.shared_gate_up = q.shared_gate_up;
  e8.shared_down = q.shared_down;
  try {
    ops::moe_experts(q.x, q.weights, q.ids, gu8.q, dn8.q, ws8, out8, gu8.scale, dn8.scale, e8);
    ADD_FAILURE() << "no error for 16-bit shared experts beside fp8 ones";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("'shared_gate_up'"), std::string::npos) << err.what();
  }
}

struct SharedCase {
  DType dtype;
  int64_t tokens, experts, k, hidden, inter, shared;
};

std::string shared_case_name(const SharedCase& c) {
  return std::string(dtype_name(c.dtype)) + "_T" + std::to_string(c.tokens) + "_E" +
         std::to_string(c.experts) + "_k" + std::to_string(c.k) + "_H" + std::to_string(c.hidden) +
         "_I" + std::to_string(c.inter) + "_S" + std::to_string(c.shared);
}
void PrintTo(const SharedCase& c, std::ostream* os) { *os << shared_case_name(c); }

class MoeExpertsSharedDiff : public ::testing::TestWithParam<SharedCase> {};

TEST_P(MoeExpertsSharedDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const SharedCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const SharedProblem p = make_shared_problem(c.dtype, c.tokens, c.experts, c.k, c.hidden, c.inter,
                                              c.shared, seed);
  const double tol = tolerance(c.dtype);
  for (bool with_shared : {true, false})
    for (bool with_residual : {true, false}) {
      if (!with_shared && !with_residual) continue;  // the plain op: test_moe_experts_decode.cpp
      SCOPED_TRACE(std::string("shared ") + (with_shared ? "on" : "off") + ", residual " +
                   (with_residual ? "on" : "off"));
      expect_elementwise_close(run_shared(p, Device::cuda(), with_shared, with_residual),
                   run_shared(p, Device::cpu(), with_shared, with_residual), tol);
    }
  SCOPED_TRACE("out is residual");
  expect_elementwise_close(run_shared(p, Device::cuda(), true, true, true),
               run_shared(p, Device::cpu(), true, true), tol);
}

constexpr DType bf16 = DType::bf16, f16 = DType::f16, f32 = DType::f32;

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeExpertsSharedDiff,
    ::testing::Values(
        // DeepSeek-OCR's language model (H 1280, 64 experts of I 896, top-6, 2 shared).
        SharedCase{bf16, 1, 64, 6, 1280, 896, 2}, SharedCase{bf16, 4, 64, 6, 1280, 896, 2},
        // DeepSeek-V2-Lite (H 2048, I 1408).
        SharedCase{bf16, 1, 64, 6, 2048, 1408, 2}, SharedCase{f16, 16, 64, 6, 2048, 1408, 2},
        // Two token tiles, two down batches (40 tokens of 8 pairs each).
        SharedCase{bf16, 40, 16, 6, 256, 128, 2}, SharedCase{bf16, 9, 8, 1, 128, 64, 3},
        SharedCase{bf16, 3, 8, 2, 128, 64, 1},
        // Widths off the 16-byte vector (scalar loads), and f32 (the CUDA-core path).
        SharedCase{bf16, 5, 8, 2, 100, 37, 2}, SharedCase{f32, 3, 8, 2, 128, 64, 2},
        SharedCase{f32, 17, 8, 4, 36, 20, 3}),
    [](const auto& info) { return shared_case_name(info.param); });

// fp8 routed and shared experts on CUDA against the CPU reference, with exact and with quantized
// activations.
TEST(MoeExpertsSharedCuda, Fp8MatchesReference) {
  BRAID_REQUIRE_CUDA();
  for (bool quantized : {false, true})
  for (int64_t tokens : {1, 5, 16}) {
    const int64_t experts = 16, k = 4, hidden = 512, inter = 256, shared = 2, width = shared * inter;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " tokens " + std::to_string(tokens) +
                 (quantized ? " quantized" : " exact"));
    const fp8::Fp8Tensor gu = fp8::weights(experts, 2 * inter, hidden, seed);
    const fp8::Fp8Tensor dn = fp8::weights(experts, hidden, inter, seed + 1);
    const fp8::Fp8Tensor sgu = fp8::weights(1, 2 * width, hidden, seed + 2);
    const fp8::Fp8Tensor sdn = fp8::weights(1, hidden, width, seed + 3);
    const SharedProblem p = make_shared_problem(DType::bf16, tokens, experts, k, hidden, inter, shared, seed + 4);
    auto run = [&](Device d) {
      auto x = to_device(p.x, d), w = to_device(p.weights, d), ids = to_device(p.ids, d);
      auto g = to_device(gu.q, d), gs = to_device(gu.scale, d), n = to_device(dn.q, d), ns = to_device(dn.scale, d);
      auto sg = to_device(sgu.q, d), sgs = to_device(sgu.scale, d), sn = to_device(sdn.q, d), sns = to_device(sdn.scale, d);
      auto res = to_device(p.residual, d);
      auto ws = poisoned(DType::f32, {tokens * (k + shared), inter}, d);
      ops::MoeExpertsExtras extras;
      extras.shared_gate_up = {sg.view().reshape({2 * width, hidden}), sgs.view().reshape({2 * width / 128, hidden / 128})};
      extras.shared_down = {sn.view().reshape({hidden, width}), sns.view().reshape({hidden / 128, width / 128})};
      extras.residual = res;
      extras.quantize_activations = quantized;
      ops::moe_experts(x, w, ids, g, n, ws, res, gs, ns, extras);
      return to_floats(res);
    };
    expect_elementwise_close(run(Device::cuda()), run(Device::cpu()), tolerance(DType::bf16));
  }
}

}  // namespace
}  // namespace braid::test
