// --quantize fp8: a 16-bit checkpoint's linear layers quantized at load to the 128 x 128 block fp8
// format. The tiny writer quantizes its fp8 checkpoints by the same rule (amax / 448 per block,
// e4m3 rounded to nearest even, from the values a 16-bit checkpoint of the same spec holds), so
// a 16-bit checkpoint quantized at load must give the fp8 checkpoint's bytes, and therefore the
// same logits to the last bit.
#include <cstring>

#include "engine/engine.h"
#include "engine/llm_engine.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "test_util.h"
#include "tiny_model.h"

namespace braid::test {
namespace {

// As test_engine_fp8.cpp's: every linear layer's rows in whole 128-row blocks.
TinyModelSpec llama_spec(const std::string& fp8, const std::string& dtype) {
  TinyModelSpec s;
  s.vocab = 96, s.hidden = 256, s.layers = 2, s.heads = 8, s.kv_heads = 4, s.head_dim = 32;
  s.intermediate = 256;
  s.fp8 = fp8;
  s.dtype = dtype;
  s.config_dtype = dtype == "BF16" ? "bfloat16" : dtype == "F16" ? "float16" : "float32";
  return s;
}

// DeepSeek-V3's layout (dense MLPs): q LoRA, kv_a_proj_with_mqa ending in a partial scale block
// (160 rows), kv_b_proj quantized and then dequantized for the absorbed attention.
TinyModelSpec deepseek_spec(const std::string& fp8, const std::string& dtype) {
  TinyModelSpec s = llama_spec(fp8, dtype);
  s.arch = "DeepseekV3ForCausalLM";
  s.deepseek = true;
  s.heads = 4;
  s.q_lora = 128, s.kv_lora = 128, s.nope = 32, s.rope = 32, s.v_head = 32;
  return s;
}

std::vector<int32_t> prompt_of(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(3 + rng() % 93);
  return ids;
}

engine::EngineOptions quantized(Device device = Device::cpu()) {
  engine::EngineOptions o;
  o.device = device;
  o.quantize = model::Quantize::fp8;
  return o;
}

// A tensor's bytes, on the host (contiguous tensors only).
std::vector<uint8_t> bytes_of(const Tensor& t) {
  if (!t.data) return {};
  OwnedTensor host(t.dtype, std::vector<int64_t>(t.shape, t.shape + t.ndim), Device::cpu());
  copy(t, host.view());
  const auto* p = static_cast<const uint8_t*>(host.view().data);
  return std::vector<uint8_t>(p, p + host.view().nbytes());
}

// Every linear layer (values and scales) of two loads, byte for byte.
void expect_same_linear_layers(const model::Weights& a, const model::Weights& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  EXPECT_EQ(a.bytes, b.bytes);
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const model::LayerWeights &x = a.layers[l], &y = b.layers[l];
    const std::vector<std::pair<const char*, std::pair<Tensor, Tensor>>> tensors = {
        {"qkv", {x.qkv, y.qkv}},           {"qkv_scale", {x.qkv_scale, y.qkv_scale}},
        {"o_proj", {x.o_proj, y.o_proj}},  {"o_proj_scale", {x.o_proj_scale, y.o_proj_scale}},
        {"gate_up", {x.gate_up, y.gate_up}}, {"gate_up_scale", {x.gate_up_scale, y.gate_up_scale}},
        {"down", {x.down, y.down}},        {"down_scale", {x.down_scale, y.down_scale}},
        {"q_b", {x.q_b, y.q_b}},           {"q_b_scale", {x.q_b_scale, y.q_b_scale}}};
    for (const auto& [name, t] : tensors) {
      SCOPED_TRACE("layer " + std::to_string(l) + " " + name);
      EXPECT_EQ(t.first.dtype, t.second.dtype);
      EXPECT_TRUE(bytes_of(t.first) == bytes_of(t.second));
    }
  }
}

TEST(QuantizeFp8Blocks, ScaleIsTheBlockAmaxOver448AndValuesRoundToE4m3) {
  // 130 x 200: blocks of 128 x 128, 128 x 72, 2 x 128 and 2 x 72 (partial at both edges); the
  // last one all zeros.
  const int64_t rows = 130, cols = 200;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    OwnedTensor w = random_host(t, {rows, cols}, 7, -3.0f, 3.0f);
    for (int64_t r = 128; r < rows; ++r)
      for (int64_t c = 128; c < cols; ++c) store_from_float(w.data(), t, r * cols + c, 0.0f);
    std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
    std::vector<float> scale(4);
    model::quantize_fp8_blocks("w", w.data(), t, rows, cols, q.data(), scale.data());
    for (int64_t br = 0; br < 2; ++br)
      for (int64_t bc = 0; bc < 2; ++bc) {
        float amax = 0;
        for (int64_t r = br * 128; r < std::min(rows, br * 128 + 128); ++r)
          for (int64_t c = bc * 128; c < std::min(cols, bc * 128 + 128); ++c)
            amax = std::max(amax, std::fabs(load_as_float(w.data(), t, r * cols + c)));
        const float s = scale[static_cast<size_t>(br * 2 + bc)];
        EXPECT_EQ(s, amax > 0 ? amax / 448.0f : 1.0f) << "block " << br << ", " << bc;
        bool reaches_448 = false;
        for (int64_t r = br * 128; r < std::min(rows, br * 128 + 128); ++r)
          for (int64_t c = bc * 128; c < std::min(cols, bc * 128 + 128); ++c) {
            const uint8_t code = q[static_cast<size_t>(r * cols + c)];
            ASSERT_EQ(code, float_to_f8e4m3(load_as_float(w.data(), t, r * cols + c) / s));
            reaches_448 |= std::fabs(f8e4m3_to_float(code)) == 448.0f;
          }
        EXPECT_EQ(reaches_448, amax > 0) << "the block's largest value maps to e4m3's 448";
      }
    EXPECT_EQ(scale[3], 1.0f) << "an all-zero block: scale 1, values 0";
  }
}

TEST(QuantizeFp8Blocks, ANonFiniteValueIsAnErrorNamingTheTensor) {
  std::vector<float> w(256 * 4, 0.5f);
  w[300] = INFINITY;
  std::vector<uint8_t> q(w.size());
  std::vector<float> scale(2);
  expect_error([&] { model::quantize_fp8_blocks("model.x.weight", w.data(), DType::f32, 256, 4,
                                                q.data(), scale.data()); },
               ErrorKind::io, {"model.x.weight", "infinity or NaN"});
}

TEST(QuantizeFp8Option, NamesAndConfig) {
  EXPECT_EQ(model::quantize_from_name("fp8"), model::Quantize::fp8);
  EXPECT_EQ(model::quantize_from_name("none"), model::Quantize::none);
  EXPECT_EQ(model::quantize_from_name("int4"), std::nullopt);
  EXPECT_EQ(model::quantize_from_name("FP8"), std::nullopt);

  model::ModelConfig c;
  EXPECT_EQ(model::quantized_config(c, model::Quantize::none).weights, model::WeightFormat::dense);
  EXPECT_EQ(model::quantized_config(c, model::Quantize::fp8).weights, model::WeightFormat::fp8_blocks);
  c.weights = model::WeightFormat::fp8_per_channel;  // already fp8: kept
  EXPECT_EQ(model::quantized_config(c, model::Quantize::fp8).weights,
            model::WeightFormat::fp8_per_channel);
}

class QuantizeFp8 : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  TinyModelSpec spec(const std::string& fp8) const {
    const auto& [arch, dtype] = GetParam();
    return arch == "deepseek" ? deepseek_spec(fp8, dtype) : llama_spec(fp8, dtype);
  }
};

TEST_P(QuantizeFp8, CpuLoadEqualsTheFp8CheckpointBitForBit) {
  TinyModelDir dense(spec("")), fp8(spec("blocks"));
  engine::Engine a(dense.path(), quantized()), b(fp8.path(), {});
  EXPECT_EQ(a.config().weights, model::WeightFormat::fp8_blocks);
  EXPECT_EQ(b.config().weights, model::WeightFormat::fp8_blocks);
  EXPECT_EQ(a.weight_bytes(), b.weight_bytes());
  const auto prompt = prompt_of(19, 3);
  EXPECT_EQ(a.step(prompt, true), b.step(prompt, true));
  EXPECT_EQ(a.step({7}), b.step({7}));

  const model::ModelConfig c = a.config();
  expect_same_linear_layers(
      model::load_weights(c, model::Checkpoint::open(dense.path()), Device::cpu(), DType::f32,
                          model::Quantize::fp8),
      model::load_weights(b.config(), model::Checkpoint::open(fp8.path()), Device::cpu(), DType::f32));
}

TEST_P(QuantizeFp8, QuantizingAnFp8CheckpointLoadsItAsItIs) {
  TinyModelDir fp8(spec("blocks"));
  engine::Engine a(fp8.path(), quantized()), b(fp8.path(), {});
  EXPECT_EQ(a.config().weights, model::WeightFormat::fp8_blocks);
  const auto prompt = prompt_of(11, 4);
  EXPECT_EQ(a.step(prompt, true), b.step(prompt, true));
}

TEST_P(QuantizeFp8, CudaLoadEqualsTheFp8CheckpointAndTheCpu) {
  BRAID_REQUIRE_CUDA();
  TinyModelDir dense(spec("")), fp8(spec("blocks"));
  const Device gpu = Device::cuda();
  const model::ModelConfig c =
      model::quantized_config(model::load_config(dense.path()), model::Quantize::fp8);
  expect_same_linear_layers(
      model::load_weights(c, model::Checkpoint::open(dense.path()), gpu, DType::bf16,
                          model::Quantize::fp8),
      model::load_weights(model::load_config(fp8.path()), model::Checkpoint::open(fp8.path()), gpu,
                          DType::bf16));
  // The same numbers as the CPU within the fp8 checkpoints' CUDA bound (test_engine_fp8.cpp):
  // bf16 activations, fp8-quantized activations in the block-scaled GEMM.
  engine::Engine g(dense.path(), quantized(gpu)), cpu(dense.path(), quantized());
  const auto prompt = prompt_of(40, 5);  // 40 rows: the block-scaled GEMM
  EXPECT_LE(rel_error(g.step(prompt, true), cpu.step(prompt, true)), 6e-2);
  for (int32_t t : prompt_of(6, 9))  // one row at a time: the fp8 GEMV
    EXPECT_LE(rel_error(g.step({t}), cpu.step({t})), 6e-2);
}

INSTANTIATE_TEST_SUITE_P(
    Models, QuantizeFp8,
    ::testing::Combine(::testing::Values("llama", "deepseek"), ::testing::Values("F32", "BF16")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(QuantizeFp8Errors, RowsThatDoNotFillScaleBlocksNameTheTensor) {
  TinyModelSpec s = llama_spec("", "F32");
  s.kv_heads = 2;  // k_proj and v_proj 64 rows: their 128 x 128 blocks cannot be stacked
  TinyModelDir dir(s);
  EXPECT_NO_THROW(engine::Engine(dir.path(), {}));
  expect_error([&] { engine::Engine(dir.path(), quantized()); }, ErrorKind::unsupported,
               {"k_proj.weight", "64 rows", "multiple of 128", "quantize fp8"});
}

TEST(QuantizeFp8Errors, AMissingWeightIsNamed) {
  TinyModelSpec s = llama_spec("", "F32");
  s.drop_tensor = "model.layers.1.mlp.down_proj.weight";
  TinyModelDir dir(s);
  expect_error([&] { engine::Engine(dir.path(), quantized()); }, ErrorKind::io,
               {"model.layers.1.mlp.down_proj.weight", "missing"});
}

// A per-channel fp8 checkpoint is already fp8: it keeps its own format and loads as it is.
TEST(QuantizeFp8Errors, PerChannelFp8CheckpointLoadsAsItIs) {
  TinyModelDir dir(llama_spec("channel", "F32"));
  engine::Engine a(dir.path(), quantized()), b(dir.path(), {});
  EXPECT_EQ(a.config().weights, model::WeightFormat::fp8_per_channel);
  const auto prompt = prompt_of(9, 2);
  EXPECT_EQ(a.step(prompt, true), b.step(prompt, true));
}

// The serving engine takes the option too (EngineConfig::quantize): the same greedy tokens as
// the fp8 checkpoint's.
TEST(QuantizeFp8Serving, LlmEngineRunsTheQuantizedModel) {
  TinyModelDir dense(llama_spec("", "F32")), fp8(llama_spec("blocks", "F32"));
  auto run = [](const std::string& dir, model::Quantize q) {
    engine::EngineConfig e;
    e.quantize = q;
    e.max_model_len = 64;
    engine::LLMEngine eng(dir, e);
    EXPECT_EQ(eng.model_config().weights, model::WeightFormat::fp8_blocks);
    engine::Request r;
    r.id = "a";
    r.prompt = prompt_of(7, 1);
    r.stop.max_tokens = 6;
    r.stop.ignore_eos = true;
    eng.add_request(r);
    std::vector<int32_t> tokens;
    while (eng.has_unfinished())
      for (const auto& out : eng.step()) tokens.insert(tokens.end(), out.tokens.begin(), out.tokens.end());
    return tokens;
  };
  const auto tokens = run(dense.path(), model::Quantize::fp8);
  EXPECT_EQ(tokens.size(), 6u);
  EXPECT_EQ(tokens, run(fp8.path(), model::Quantize::none));
}

// MoE models: with fp8 experts loading (ModelConfig::fp8_experts), the routed experts are
// quantized by the same rule as the tiny writer's fp8_experts checkpoints hold them; shared
// experts (DeepSeek) are linear layers like the rest.
TEST(QuantizeFp8Moe, RoutedAndSharedExpertsEqualTheFp8Checkpoint) {
  for (const bool deepseek : {false, true}) {
    SCOPED_TRACE(deepseek ? "DeepSeek-V3 layout" : "Qwen3-MoE");
    auto spec = [&](const std::string& fp8) {
      TinyModelSpec s = deepseek ? deepseek_spec(fp8, "BF16") : llama_spec(fp8, "BF16");
      if (!deepseek) s.arch = "Qwen3MoeForCausalLM", s.qk_norm = true;
      s.experts = 4, s.experts_per_token = 2, s.moe_intermediate = 128;  // whole 128-blocks
      s.fp8_experts = true;
      return s;
    };
    TinyModelDir dense(spec("")), fp8(spec("blocks"));
    engine::Engine a(dense.path(), quantized()), b(fp8.path(), {});
    ASSERT_TRUE(a.config().fp8_experts());
    const auto prompt = prompt_of(11, 4);
    EXPECT_EQ(a.step(prompt, true), b.step(prompt, true));
    EXPECT_EQ(a.step({9}), b.step({9}));
  }
}

}  // namespace
}  // namespace braid::test
