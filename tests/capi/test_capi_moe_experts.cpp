// braid_moe_experts and braid_moe_experts_ex through the C API, as a C caller uses them: only
// braid.h, plain descriptors, statuses and braid_last_error_message(). The expected values are
// the op's formula (include/braid/ops.h, moe_experts) evaluated here in double precision; in f32
// its roundings are exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "capi_test_util.h"

namespace {

using namespace braid_capi_test;

// Deterministic values in (-1, 1) that differ from element to element.
std::vector<float> values(size_t n, float salt) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(salt + 0.7f * static_cast<float>(i));
  return v;
}

double silu(double g) { return g / (1 + std::exp(-g)); }

// One SwiGLU MLP on row x: down[H, I] @ (silu(gate_up[0:I] @ x) * (gate_up[I:2I] @ x)), the
// matrices in the Hugging Face [out, in] layout.
std::vector<double> swiglu(const float* gate_up, const float* down, const float* x, int64_t H,
                           int64_t I) {
  std::vector<double> h(I), y(H, 0.0);
  for (int64_t i = 0; i < I; ++i) {
    double g = 0, u = 0;
    for (int64_t c = 0; c < H; ++c) {
      g += double{gate_up[i * H + c]} * x[c];
      u += double{gate_up[(I + i) * H + c]} * x[c];
    }
    h[i] = silu(g) * u;
  }
  for (int64_t n = 0; n < H; ++n)
    for (int64_t i = 0; i < I; ++i) y[n] += double{down[n * I + i]} * h[i];
  return y;
}

constexpr int64_t T = 3, E = 4, K = 2, H = 8, I = 4, S = 8;  // S: two shared experts' width

struct Layer {
  std::vector<float> x = values(T * H, 0.1f), weights = {0.6f, 0.4f, 0.9f, 0.1f, 0.5f, 0.5f};
  std::vector<int32_t> ids = {0, 3, 2, 1, 3, 0};
  std::vector<float> gate_up = values(E * 2 * I * H, 0.3f), down = values(E * H * I, 0.5f);
  std::vector<float> shared_gate_up = values(2 * S * H, 0.7f), shared_down = values(H * S, 0.9f);
  std::vector<float> residual = values(T * H, 1.1f);
  std::vector<int64_t> xs{T, H}, ks{T, K}, gus{E, 2 * I, H}, ds{E, H, I}, sgus{2 * S, H}, sds{H, S};
  braid_tensor tx = cpu_tensor(x.data(), xs, kF32), tw = cpu_tensor(weights.data(), ks, kF32);
  braid_tensor ti = cpu_tensor(ids.data(), ks, kI32);
  braid_tensor tgu = cpu_tensor(gate_up.data(), gus, kF32), td = cpu_tensor(down.data(), ds, kF32);
  braid_tensor tsgu = cpu_tensor(shared_gate_up.data(), sgus, kF32);
  braid_tensor tsd = cpu_tensor(shared_down.data(), sds, kF32);
  braid_tensor tres = cpu_tensor(residual.data(), xs, kF32);

  // The routed experts' sum for token t.
  std::vector<double> routed(int64_t t) const {
    std::vector<double> out(H, 0.0);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t e = ids[t * K + j];
      const auto y = swiglu(&gate_up[e * 2 * I * H], &down[e * H * I], &x[t * H], H, I);
      for (int64_t n = 0; n < H; ++n) out[n] += weights[t * K + j] * y[n];
    }
    return out;
  }
};

TEST(CApi, MoeExpertsMatchesFormula) {
  Layer l;
  std::vector<float> ws(T * K * I), out(T * H, NAN);
  std::vector<int64_t> wss{T * K, I};
  braid_tensor tws = cpu_tensor(ws.data(), wss, kF32), tout = cpu_tensor(out.data(), l.xs, kF32);
  ASSERT_EQ(braid_moe_experts(&l.tx, &l.tw, &l.ti, &l.tgu, &l.td, &tws, &tout, nullptr), BRAID_OK)
      << braid_last_error_message();
  for (int64_t t = 0; t < T; ++t) {
    const auto want = l.routed(t);
    for (int64_t n = 0; n < H; ++n) EXPECT_NEAR(out[t * H + n], want[n], 1e-5) << t << ", " << n;
  }
}

// Shared experts and the residual, out written over the residual: out = residual + (routed +
// shared), shared the MLP of width S (S / I = 2 more experts of width I) on every token.
TEST(CApi, MoeExpertsExSharedExpertsAndResidualInPlace) {
  Layer l;
  const std::vector<float> residual = l.residual;
  std::vector<float> ws(T * (K + S / I) * I);
  std::vector<int64_t> wss{T * (K + S / I), I};
  braid_tensor tws = cpu_tensor(ws.data(), wss, kF32);
  ASSERT_EQ(braid_moe_experts_ex(&l.tx, &l.tw, &l.ti, &l.tgu, nullptr, &l.td, nullptr, &l.tsgu,
                                 nullptr, &l.tsd, nullptr, &l.tres, &tws, &l.tres, nullptr),
            BRAID_OK)
      << braid_last_error_message();
  for (int64_t t = 0; t < T; ++t) {
    const auto routed = l.routed(t);
    const auto shared = swiglu(l.shared_gate_up.data(), l.shared_down.data(), &l.x[t * H], H, S);
    for (int64_t n = 0; n < H; ++n)
      EXPECT_NEAR(l.residual[t * H + n], residual[t * H + n] + routed[n] + shared[n], 1e-5)
          << t << ", " << n;
  }
}

TEST(CApi, MoeExpertsExWithoutExtrasIsMoeExperts) {
  Layer l;
  std::vector<float> ws(T * K * I), a(T * H, NAN), b(T * H, NAN);
  std::vector<int64_t> wss{T * K, I};
  braid_tensor tws = cpu_tensor(ws.data(), wss, kF32);
  braid_tensor ta = cpu_tensor(a.data(), l.xs, kF32), tb = cpu_tensor(b.data(), l.xs, kF32);
  ASSERT_EQ(braid_moe_experts(&l.tx, &l.tw, &l.ti, &l.tgu, &l.td, &tws, &ta, nullptr), BRAID_OK);
  ASSERT_EQ(braid_moe_experts_ex(&l.tx, &l.tw, &l.ti, &l.tgu, nullptr, &l.td, nullptr, nullptr,
                                 nullptr, nullptr, nullptr, nullptr, &tws, &tb, nullptr),
            BRAID_OK)
      << braid_last_error_message();
  EXPECT_EQ(a, b);
}

TEST(CApi, MoeExpertsExBadArgumentsNameTheTensor) {
  Layer l;
  std::vector<float> ws(T * K * I), out(T * H);
  std::vector<int64_t> wss{T * K, I};
  braid_tensor tws = cpu_tensor(ws.data(), wss, kF32), tout = cpu_tensor(out.data(), l.xs, kF32);
  // Shared experts but a workspace without room for their h rows.
  EXPECT_EQ(braid_moe_experts_ex(&l.tx, &l.tw, &l.ti, &l.tgu, nullptr, &l.td, nullptr, &l.tsgu,
                                 nullptr, &l.tsd, nullptr, nullptr, &tws, &tout, nullptr),
            BRAID_ERR_SHAPE);
  std::string msg = braid_last_error_message();
  EXPECT_NE(msg.find("moe_experts"), std::string::npos) << msg;
  EXPECT_NE(msg.find("argument 'workspace'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[12, 4]"), std::string::npos) << msg;  // T * (k + S / I) rows
  // A shared gate_up without its down.
  EXPECT_NE(braid_moe_experts_ex(&l.tx, &l.tw, &l.ti, &l.tgu, nullptr, &l.td, nullptr, &l.tsgu,
                                 nullptr, nullptr, nullptr, nullptr, &tws, &tout, nullptr),
            BRAID_OK);
  msg = braid_last_error_message();
  EXPECT_NE(msg.find("argument 'shared_down'"), std::string::npos) << msg;
  // A block scale beside f32 weights.
  std::vector<float> scale(E);
  std::vector<int64_t> ss{E, 1, 1};
  braid_tensor ts = cpu_tensor(scale.data(), ss, kF32);
  EXPECT_NE(braid_moe_experts_ex(&l.tx, &l.tw, &l.ti, &l.tgu, &ts, &l.td, &ts, nullptr, nullptr,
                                 nullptr, nullptr, nullptr, &tws, &tout, nullptr),
            BRAID_OK);
  msg = braid_last_error_message();
  EXPECT_NE(msg.find("moe_experts"), std::string::npos) << msg;
  EXPECT_NE(msg.find("argument 'gate_up_scale'"), std::string::npos) << msg;
}

}  // namespace
