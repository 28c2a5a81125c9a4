// bench moe-fp8's layers, driven at small shapes: the seed003 pipeline of public ops against
// ops::moe_fp8_block_scale and the host references, the seed001 FP8 layer against its fp32
// references, and the host expert arithmetic against ops::moe_experts. On the CPU here; on a
// GPU the same wiring runs on CUDA (what `braidinfer bench moe-fp8` does at full size).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "bench/harness/fp8_fill.h"
#include "bench/suites/moe_fp8_check.h"
#include "bench/suites/moe_fp8_layer.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "braid/ops.h"
#include "test_util.h"

namespace braid::bench {
namespace {

// 16 experts in 4 groups of 4, the first group local; 2 groups kept, top-2.
DsModel tiny_ds() { return {256, 128, 16, 4, 0, 4, 2, 2, 2.5f}; }

MoeShape tiny_seed001(int64_t tokens) {
  return {MoeModel{"tiny", 256, 128, 4, 2, true}, tokens, "T=" + std::to_string(tokens)};
}

void run_ds(const DsModel& m, const DsInputs& in, const DsWeights& w, const DsBuffers& b) {
  enqueue_ds_step(Fp8Step::ds_op, m, in, w, b, {});
  enqueue_ds_step(Fp8Step::ds_pipeline, m, in, w, b, {});
}

TEST(BenchMoeFp8Layer, HostExpertMatchesMoeExpertsInF32) {
  // One expert, gate rows first: host_swiglu_expert on f32 weights is moe_experts in f32.
  const int64_t H = 256, I = 128;
  OwnedTensor gu(DType::f32, {1, 2 * I, H}, Device::cpu());
  OwnedTensor dn(DType::f32, {1, H, I}, Device::cpu());
  fill_normal(gu, 1, 0.0f, 0.0625f);
  fill_normal(dn, 2, 0.0f, 0.09f);
  OwnedTensor x(DType::f32, {1, H}, Device::cpu());
  fill_normal(x, 3, 0.0f, 1.0f);
  OwnedTensor weights(DType::f32, {1, 1}, Device::cpu()), ids(DType::i32, {1, 1}, Device::cpu());
  weights.view().ptr<float>()[0] = 1.0f;
  ids.view().ptr<int32_t>()[0] = 0;
  OwnedTensor ws(DType::f32, {1, I}, Device::cpu()), out(DType::f32, {1, H}, Device::cpu());
  ops::moe_experts(x, weights, ids, gu, dn, ws, out);

  std::vector<double> a(H), got(H);
  for (int64_t h = 0; h < H; ++h) a[h] = x.view().ptr<float>()[h];
  host_swiglu_expert(DenseHostWeights(gu), DenseHostWeights(dn), 0, false, a.data(), got.data());
  const std::vector<float> ref = test::to_floats(out);
  std::vector<float> g(got.begin(), got.end());
  EXPECT_LT(test::rel_error(g, ref), 1e-5);

  // gate_last reads the halves the other way round: swapping them gives the same expert.
  OwnedTensor swapped(DType::f32, {1, 2 * I, H}, Device::cpu());
  const float* src = gu.view().ptr<float>();
  float* dst = swapped.view().ptr<float>();
  for (int64_t r = 0; r < 2 * I; ++r)
    for (int64_t h = 0; h < H; ++h) dst[((r + I) % (2 * I)) * H + h] = src[r * H + h];
  std::vector<double> got_last(H);
  host_swiglu_expert(DenseHostWeights(swapped), DenseHostWeights(dn), 0, true, a.data(),
                     got_last.data());
  for (int64_t h = 0; h < H; ++h) EXPECT_DOUBLE_EQ(got_last[h], got[h]);
}

TEST(BenchMoeFp8Layer, Fp8HostWeightsDotIsTheDequantizedDot) {
  OwnedTensor q(DType::f8e4m3, {1, 128, 256}, Device::cpu());
  OwnedTensor s(DType::f32, {1, 1, 2}, Device::cpu());
  random_weight_blocks(q, s, 4, 2.0f);
  std::vector<double> v(256);
  for (int i = 0; i < 256; ++i) v[i] = std::sin(0.1 * i);
  const Fp8HostWeights w(q, s);
  for (int64_t n : {0, 77, 127}) {
    double ref = 0;
    for (int k = 0; k < 256; ++k)
      ref += double(f8e4m3_to_float(q.view().ptr<uint8_t>()[n * 256 + k])) *
             double(s.view().ptr<float>()[k / 128]) * v[k];
    EXPECT_NEAR(w.dot(0, n, v.data()), ref, 1e-9 * (1 + std::fabs(ref)));
  }
  // A round trip keeps the scale rule: every block's largest magnitude comes back exactly.
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = float(i % 128) - 40.0f;
  const std::vector<double> back = fp8_round_trip_row(x);
  EXPECT_NEAR(back[127], 87.0, 1e-5);  // 448 times the fp32 scale 87 / 448
  EXPECT_NEAR(back[1], -39.0, 39.0 / 16);
}

TEST(BenchMoeFp8Layer, Seed003PipelineMatchesTheOpAndTheReferencesOnTheCpu) {
  const DsModel m = tiny_ds();
  const int64_t T = 21;
  const DsWeights w = make_ds_weights(m, 31, Device::cpu());
  const DsInputs in = make_ds_inputs(m, T, 32, Device::cpu());
  const DsHostWeights host = copy_ds_weights_to_host(w);
  const DsReference ref = ds_reference(m, in, host, 8, 5);
  ASSERT_EQ(ref.rows.size(), 8u);

  const DsBuffers b3 = make_ds_buffers(m, T, 3, Device::cpu());
  run_ds(m, in, w, b3);
  // flashinfer's inputs send every choice to a local expert.
  const Fp8Routing r = fp8_routing(b3.topk_ids.view().ptr<int32_t>(), T, m.k, 0, m.local_experts);
  EXPECT_EQ(r.pairs, T * m.k);
  EXPECT_GE(r.active_experts, 2);

  const Fp8DsCheck c3 = check_ds_case(b3, ref);
  EXPECT_EQ(c3.tokens, 8);
  EXPECT_EQ(c3.nonfinite, 0);
  EXPECT_EQ(c3.vs_cpu_op.max_abs, 0.0);  // on the CPU the op is that reference
  EXPECT_LT(c3.vs_fp32.rel_l2, 3e-3);    // the bench's own fp64 definition: bf16 output rounding
  EXPECT_EQ(c3.match_fp32.matched, c3.match_fp32.elements);
  EXPECT_LE(c3.pipeline_vs_op.rel_l2, kFp8PipelineVsOpTolerance);  // 3 terms: close to fp32
  EXPECT_TRUE(c3.ok()) << "pipeline vs op " << c3.pipeline_vs_op.rel_l2;

  // One term: the pipeline's intermediate is requantized to fp8 (about 2% relative), while the
  // CPU op keeps it in fp32, so here they differ by that much.
  const DsBuffers b1 = make_ds_buffers(m, T, 1, Device::cpu());
  run_ds(m, in, w, b1);
  const Fp8DsCheck c1 = check_ds_case(b1, ref);
  EXPECT_GT(c1.pipeline_vs_op.rel_l2, 5e-3);
  EXPECT_LT(c1.pipeline_vs_op.rel_l2, 6e-2);
}

TEST(BenchMoeFp8Layer, Seed003PipelineNeedsLocalExpertsFromZero) {
  DsModel m = tiny_ds();
  m.local_offset = 4;
  const DsWeights w = make_ds_weights(m, 1, Device::cpu());
  const DsInputs in = make_ds_inputs(m, 3, 2, Device::cpu());
  const DsBuffers b = make_ds_buffers(m, 3, 1, Device::cpu());
  test::expect_error([&] { enqueue_ds_step(Fp8Step::ds_permute, m, in, w, b, {}); },
                     ErrorKind::invalid_argument, {"local_offset"});
  EXPECT_NO_THROW(enqueue_ds_step(Fp8Step::ds_op, m, in, w, b, {}));
  test::expect_error([&] { enqueue_ds_step(Fp8Step::gate_up, tiny_ds(), in, w, b, {}); },
                     ErrorKind::invalid_argument, {"seed003 step"});
}

TEST(BenchMoeFp8Layer, Seed001Fp8LayerAgainstItsReferencesOnTheCpu) {
  const MoeShape s = tiny_seed001(37);
  const MoeWeights w = make_moe_weights(s.model, false, 41, Device::cpu());
  const Fp8LayerWeights w8 = quantize_moe_weights(s.model, w);
  const MoeBuffers b = make_moe_buffers(s, 42, Device::cpu());
  const Fp8LayerBuffers b8 = make_fp8_layer_buffers(s, Device::cpu());
  enqueue_fp8_layer_step(Fp8Step::layer, s, w, w8, b, b8, nullptr, {});
  enqueue_fp8_layer_step(Fp8Step::bf16_layer_graph, s, w, w8, b, b8, nullptr, {});

  const MoeHostWeights host = copy_weights_to_host(w);
  const Fp8LayerHostWeights host8 = copy_fp8_layer_weights_to_host(w8);
  const Fp8LayerCheck c = check_fp8_layer(s, host, host8, b, b8, true, 16, 7);
  EXPECT_EQ(c.tokens, 16);
  EXPECT_EQ(c.nonfinite, 0);
  EXPECT_TRUE(c.ok()) << "vs fp8 fp32 " << c.vs_fp8_fp32.rel_l2;
  EXPECT_GT(c.vs_fp8_fp32.rel_l2, 1e-3);  // h is requantized to fp8: not exact
  EXPECT_LT(c.bf16_vs_fp32.rel_l2, 1e-2);  // the bf16 layer, for scale
  EXPECT_GT(c.vs_fp32.rel_l2, c.bf16_vs_fp32.rel_l2);  // fp8 costs more than bf16
  EXPECT_LT(c.vs_fp32.rel_l2, 0.15);

  // The dense peer is cuBLASLt: not on CPU tensors.
  const MoeDenseBuffers dense = make_moe_dense_buffers(s, Device::cpu());
  EXPECT_THROW(enqueue_fp8_layer_step(Fp8Step::dense_gate_up, s, w, w8, b, b8, &dense, {}), Error);
  // The decode path of bench moe has no permutation for the FP8 experts to use.
  const MoeShape small = tiny_seed001(4);
  test::expect_error(
      [&] { enqueue_fp8_layer_step(Fp8Step::layer, small, w, w8, b, b8, nullptr, {}); },
      ErrorKind::invalid_argument, {"grouped path"});
}

TEST(BenchMoeFp8LayerGpu, BothLayersCheckOutOnCuda) {
  BRAID_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  const DsModel m = tiny_ds();
  const int64_t T = 45;
  const DsWeights w = make_ds_weights(m, 51, dev);
  const DsInputs in = make_ds_inputs(m, T, 52, dev);
  const DsHostWeights host = copy_ds_weights_to_host(w);
  const DsReference ref = ds_reference(m, in, host, 16, 3);
  for (int terms : {3, 1}) {
    SCOPED_TRACE(terms);
    const DsBuffers b = make_ds_buffers(m, T, terms, dev);
    fill_bytes(b.op_out, 0xFF);
    fill_bytes(b.out, 0xFF);
    run_ds(m, in, w, b);
    const Fp8DsCheck c = check_ds_case(b, ref);
    EXPECT_EQ(c.nonfinite, 0);
    EXPECT_TRUE(c.ok()) << "pipeline vs op " << c.pipeline_vs_op.rel_l2 << ", matched "
                        << c.match_cpu_op.ratio();
  }

  const MoeShape s = tiny_seed001(40);
  const MoeWeights mw = make_moe_weights(s.model, false, 61, dev);
  const Fp8LayerWeights w8 = quantize_moe_weights(s.model, mw);
  const MoeBuffers b = make_moe_buffers(s, 62, dev);
  const Fp8LayerBuffers b8 = make_fp8_layer_buffers(s, dev);
  fill_bytes(b8.out, 0xFF);
  enqueue_fp8_layer_step(Fp8Step::layer, s, mw, w8, b, b8, nullptr, {});
  enqueue_fp8_layer_step(Fp8Step::bf16_layer_graph, s, mw, w8, b, b8, nullptr, {});
  const Fp8LayerCheck c = check_fp8_layer(s, copy_weights_to_host(mw),
                                          copy_fp8_layer_weights_to_host(w8), b, b8, true, 40, 9);
  EXPECT_TRUE(c.ok()) << "vs fp8 fp32 " << c.vs_fp8_fp32.rel_l2;
  const MoeDenseBuffers dense = make_moe_dense_buffers(s, dev);
  try {
    enqueue_fp8_layer_step(Fp8Step::dense_gate_up, s, mw, w8, b, b8, &dense, {});
    enqueue_fp8_layer_step(Fp8Step::dense_down, s, mw, w8, b, b8, &dense, {});
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::unsupported) throw;
  }
}

}  // namespace
}  // namespace braid::bench
