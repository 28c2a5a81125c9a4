// fp8 checkpoints (quant_method "fp8" with 128 x 128 scale blocks; compressed-tensors per-channel
// scales): the engine's logits against the same quantized values written dense. On the CPU the
// two are the same numbers (an fp8 value times its f32 scale is exact in f32, and the reference
// GEMM reads both as those f32 values), so they must agree to fp32 rounding of the sums. On the
// GPU, bf16 activations; products of up to 16 rows are exact (the GEMV), longer ones quantize the
// activations to fp8 per 128 columns (relative error up to 2^-4 per element, ~2^-5.6 rms): the
// bound there is the bf16 tolerance of the other engine tests widened for that.
#include "engine/engine.h"
#include "test_util.h"
#include "tiny_model.h"

namespace braid::test {
namespace {

// Linear layers whose rows are whole 128-row blocks (q 256, k and v 128, o, gate, up and down
// 256 rows) and whose k is at least 256 (cuBLASLt's block-scaled GEMM needs it).
TinyModelSpec fp8_spec(const std::string& format, bool dequantized) {
  TinyModelSpec s;
  s.vocab = 96, s.hidden = 256, s.layers = 2, s.heads = 8, s.kv_heads = 4, s.head_dim = 32;
  s.intermediate = 256;
  s.fp8 = format;
  s.fp8_dequantized = dequantized;
  return s;
}

std::vector<int32_t> prompt_of(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(3 + rng() % 93);
  return ids;
}

class Fp8Checkpoint : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8Checkpoint, CpuLogitsEqualTheDequantizedCheckpoints) {
  TinyModelDir fp8(fp8_spec(GetParam(), false)), dense(fp8_spec(GetParam(), true));
  engine::Engine a(fp8.path(), {}), b(dense.path(), {});
  EXPECT_EQ(a.config().weights, GetParam() == "blocks" ? model::WeightFormat::fp8_blocks
                                                        : model::WeightFormat::fp8_per_channel);
  EXPECT_EQ(b.config().weights, model::WeightFormat::dense);
  const auto prompt = prompt_of(19, 3);
  EXPECT_LE(rel_error(a.step(prompt, true), b.step(prompt, true)), 1e-6);
  EXPECT_LE(rel_error(a.step({7}), b.step({7})), 1e-6);
}

TEST_P(Fp8Checkpoint, CudaBf16MatchesTheCpuWithinTheActivationQuantization) {
  BRAID_REQUIRE_CUDA();
  if (GetParam() == "channel") GTEST_SKIP() << "per-channel fp8 on CUDA: not yet (refused at load)";
  TinyModelDir dir(fp8_spec(GetParam(), false));
  engine::Engine cpu(dir.path(), {});
  engine::EngineOptions o;
  o.device = Device::cuda();
  engine::Engine gpu(dir.path(), o);
  const auto prompt = prompt_of(40, 5);  // 40 rows: the block-scaled GEMM path
  EXPECT_LE(rel_error(gpu.step(prompt, true), cpu.step(prompt, true)), 6e-2);
  engine::Engine gpu2(dir.path(), o), cpu2(dir.path(), {});
  for (int32_t t : prompt_of(6, 9))  // one row at a time: the GEMV path, exact products
    EXPECT_LE(rel_error(gpu2.step({t}), cpu2.step({t})), 3e-2);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Checkpoint, ::testing::Values("blocks", "channel"));

// Prefill of more than 16 rows has no per-channel GEMM on CUDA yet: the engine says so at load
// instead of failing in its warm-up.
TEST(Fp8CheckpointErrors, PerChannelOnCudaIsRefusedAtLoad) {
  BRAID_REQUIRE_CUDA();
  TinyModelDir dir(fp8_spec("channel", false));
  engine::EngineOptions o;
  o.device = Device::cuda();
  expect_error([&] { engine::Engine(dir.path(), o); }, ErrorKind::unsupported,
               {"per-channel", "CPU"});
}

TEST(Fp8CheckpointErrors, MissingScaleUnknownMethodAndBadBlockSizeAreNamed) {
  TinyModelSpec s = fp8_spec("blocks", false);
  s.drop_tensor = "model.layers.0.self_attn.o_proj.weight_scale_inv";
  TinyModelDir missing(s);
  expect_error([&] { engine::Engine(missing.path(), {}); }, ErrorKind::io,
               {"model.layers.0.self_attn.o_proj.weight_scale_inv", "missing"});

  for (const auto& [q, words] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {R"({"quant_method": "awq"})", {"quant_method", "awq"}},
           {R"({"quant_method": "fp8", "weight_block_size": [64, 64]})", {"weight_block_size", "128"}},
           {R"({"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "static"})",
            {"activation_scheme", "static"}}}) {
    TinyModelDir dir(fp8_spec("blocks", false));
    const std::string cfg_path = dir.path() + "/config.json";
    std::ifstream in(cfg_path);
    nlohmann::json cfg = nlohmann::json::parse(in);
    cfg["quantization_config"] = nlohmann::json::parse(q);
    std::ofstream(cfg_path) << cfg.dump();
    expect_error([&] { engine::Engine(dir.path(), {}); }, ErrorKind::unsupported, words);
  }
}

// DeepSeek-V3's layout in fp8 (dense MLP layers: fp8 experts do not load yet): the q LoRA and
// kv_a_proj_with_mqa packed into one fp8 matrix (its 160 rows end in a partial scale block),
// kv_b_proj dequantized for the absorbed attention.
TinyModelSpec deepseek_fp8_spec(bool dequantized) {
  TinyModelSpec s = fp8_spec("blocks", dequantized);
  s.arch = "DeepseekV3ForCausalLM";
  s.deepseek = true;
  s.heads = 4;
  s.q_lora = 128, s.kv_lora = 128, s.nope = 32, s.rope = 32, s.v_head = 32;
  return s;
}

TEST(Fp8Deepseek, CpuLogitsEqualTheDequantizedCheckpoint) {
  TinyModelDir fp8(deepseek_fp8_spec(false)), dense(deepseek_fp8_spec(true));
  engine::Engine a(fp8.path(), {}), b(dense.path(), {});
  EXPECT_TRUE(a.config().mla());
  EXPECT_EQ(a.config().weights, model::WeightFormat::fp8_blocks);
  const auto prompt = prompt_of(19, 3);
  EXPECT_LE(rel_error(a.step(prompt, true), b.step(prompt, true)), 1e-6);
  EXPECT_LE(rel_error(a.step({7}), b.step({7})), 1e-6);
}

TEST(Fp8Deepseek, CudaBf16MatchesTheCpu) {
  BRAID_REQUIRE_CUDA();
  TinyModelDir dir(deepseek_fp8_spec(false));
  engine::Engine cpu(dir.path(), {});
  engine::EngineOptions o;
  o.device = Device::cuda();
  engine::Engine gpu(dir.path(), o);
  const auto prompt = prompt_of(40, 5);
  EXPECT_LE(rel_error(gpu.step(prompt, true), cpu.step(prompt, true)), 6e-2);
  for (int32_t t : prompt_of(6, 9)) EXPECT_LE(rel_error(gpu.step({t}), cpu.step({t})), 6e-2);
}

TEST(Fp8Deepseek, MissingScaleAndUnsupportedLatentWidthAreNamed) {
  TinyModelSpec s = deepseek_fp8_spec(false);
  s.drop_tensor = "model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv";
  TinyModelDir missing(s);
  expect_error([&] { engine::Engine(missing.path(), {}); }, ErrorKind::io,
               {"model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv", "missing"});
  if (!cuda_available()) return;
  TinyModelSpec odd = deepseek_fp8_spec(false);
  odd.kv_lora = 96;  // the CPU runs it; the CUDA kernel takes multiples of 64
  TinyModelDir dir(odd);
  EXPECT_NO_THROW(engine::Engine(dir.path(), {}));
  engine::EngineOptions o;
  o.device = Device::cuda();
  expect_error([&] { engine::Engine(dir.path(), o); }, ErrorKind::unsupported, {"kv_lora_rank 96"});
}

TEST(Fp8CheckpointErrors, RowsThatDoNotFillScaleBlocksAreRefused) {
  TinyModelSpec s = fp8_spec("blocks", false);
  s.kv_heads = 2;  // k_proj and v_proj 64 rows: their 128 x 128 blocks cannot be stacked
  TinyModelDir dir(s);
  expect_error([&] { engine::Engine(dir.path(), {}); }, ErrorKind::unsupported,
               {"k_proj.weight", "64 rows", "multiple of 128"});
}

}  // namespace
}  // namespace braid::test
