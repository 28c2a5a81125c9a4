// bench moe's layer wiring, driven on the CPU at a small shape: the grouped path (router gemm ->
// route -> permute -> gather -> grouped GEMMs -> combine) must give what ops::moe_experts gives
// for the same routing, the decode path must be moe_experts itself, and the sampled check and the
// dense peer must run. The GPU runs the same code in `braidinfer bench moe`.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "bench/suites/moe_check.h"
#include "bench/suites/moe_layer.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench {
namespace {

MoeShape tiny(int64_t tokens) {
  // Sizes that are not multiples of a tile, 8 experts, top-2.
  return {MoeModel{"tiny", 40, 24, 8, 2, true}, tokens, "T=" + std::to_string(tokens)};
}

void run(const MoeShape& s, const MoeWeights& w, const MoeBuffers& b) {
  enqueue_moe_step(MoeStep::layer, s, w, b, nullptr, {});
}

TEST(BenchMoeLayer, GroupedPathMatchesMoeExpertsOnTheCpu) {
  const MoeShape s = tiny(37);
  ASSERT_FALSE(s.decode());
  const MoeWeights w = make_moe_weights(s.model, false, 11, Device::cpu());
  const MoeBuffers b = make_moe_buffers(s, 12, Device::cpu());
  run(s, w, b);

  OwnedTensor ws(DType::f32, {s.tokens * s.model.k, s.model.inter}, Device::cpu());
  OwnedTensor ref(DType::bf16, {s.tokens, s.model.hidden}, Device::cpu());
  ops::moe_experts(b.x, b.topk_weights, b.topk_ids, w.gate_up, w.down, ws, ref);
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref.view().numel(); ++i) {
    const double got = load_as_float(b.out.data(), DType::bf16, i);
    const double want = load_as_float(ref.data(), DType::bf16, i);
    num += (got - want) * (got - want);
    den += want * want;
  }
  EXPECT_GT(den, 0);
  EXPECT_LE(std::sqrt(num / den), 1e-2);

  const MoeHostWeights host = copy_weights_to_host(w);
  const MoeCheck check = check_moe_layer(s, w, host, b, 16, 5);
  EXPECT_EQ(check.tokens, 16);
  EXPECT_TRUE(check.ok()) << "rel L2 " << check.layer_vs_cpu.rel_l2;
  EXPECT_EQ(check.experts_vs_cpu.max_abs, 0.0);  // on the CPU it is the reference itself
  EXPECT_GT(check.layer_vs_cpu.elements, 0);
}

TEST(BenchMoeLayer, DecodePathIsMoeExperts) {
  const MoeShape s = tiny(3);
  ASSERT_TRUE(s.decode());
  const MoeWeights w = make_moe_weights(s.model, false, 21, Device::cpu());
  const MoeBuffers b = make_moe_buffers(s, 22, Device::cpu());
  EXPECT_EQ(b.xs.view().data, nullptr);  // no grouped buffers on the decode path
  run(s, w, b);
  const MoeHostWeights host = copy_weights_to_host(w);
  const MoeCheck check = check_moe_layer(s, w, host, b, 64, 5);
  EXPECT_EQ(check.tokens, 3);
  EXPECT_EQ(check.layer_vs_cpu.max_abs, 0.0);
  EXPECT_THROW(enqueue_moe_step(MoeStep::dense_gate_up, s, w, b, nullptr, {}), Error);
}

TEST(BenchMoeLayer, SkewSendsMostPairsToTheBiasedExperts) {
  const MoeShape s = tiny(64);
  const MoeWeights w = make_moe_weights(s.model, true, 31, Device::cpu());
  const MoeBuffers b = make_moe_buffers(s, 32, Device::cpu());
  run(s, w, b);
  // moe_skew_bias(8, 2) biases experts 0 and 1.
  const int32_t* ids = b.topk_ids.view().ptr<int32_t>();
  int64_t hot = 0;
  for (int64_t i = 0; i < s.tokens * s.model.k; ++i) hot += ids[i] < 2;
  EXPECT_GT(hot, s.tokens * s.model.k / 2);
}

TEST(BenchMoeLayer, DensePeerRunsOnTheGatheredRows) {
  const MoeShape s = tiny(20);
  const MoeWeights w = make_moe_weights(s.model, false, 41, Device::cpu());
  const MoeBuffers b = make_moe_buffers(s, 42, Device::cpu());
  run(s, w, b);
  const MoeDenseBuffers d = make_moe_dense_buffers(s, Device::cpu());
  fill_bytes(d.gate_up_out, 0xFF);
  fill_bytes(d.down_out, 0xFF);
  enqueue_moe_step(MoeStep::dense_gate_up, s, w, b, &d, {});
  enqueue_moe_step(MoeStep::dense_down, s, w, b, &d, {});
  for (const Tensor* t : {&d.gate_up_out.view(), &d.down_out.view()})
    for (int64_t i = 0; i < t->numel(); ++i)
      ASSERT_TRUE(std::isfinite(load_as_float(t->data, t->dtype, i))) << i;
}

}  // namespace
}  // namespace braid::bench
