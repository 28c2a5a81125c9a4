// Engine on random tiny checkpoints: prefill and token-by-token decode agree, chunked prefill
// agrees, the GPU (bf16) agrees with the CPU (f32), and bad input is a clear error.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/generate.h"
#include "test_util.h"
#include "tiny_model.h"

namespace braid::test {
namespace {

std::vector<int32_t> prompt_of(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(3 + rng() % (vocab - 3));
  return ids;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) { return rel_error(a, b); }

std::vector<TinyModelSpec> specs() {
  TinyModelSpec llama;
  TinyModelSpec qwen3 = llama;
  qwen3.arch = "Qwen3ForCausalLM", qwen3.qk_norm = true, qwen3.head_dim = 32, qwen3.tied = true;
  TinyModelSpec qwen2 = llama;
  qwen2.arch = "Qwen2ForCausalLM", qwen2.qkv_bias = true, qwen2.kv_heads = 1;
  TinyModelSpec moe = qwen3;
  moe.arch = "Qwen3MoeForCausalLM", moe.tied = false, moe.experts = 8, moe.experts_per_token = 2;
  return {llama, qwen3, qwen2, moe};
}

class EngineConsistency : public ::testing::TestWithParam<TinyModelSpec> {};

TEST_P(EngineConsistency, PrefillEqualsDecodeAndChunkedPrefillOnCpu) {
  TinyModelDir dir(GetParam());
  engine::EngineOptions o;
  o.max_step_tokens = 64;
  engine::Engine eng(dir.path(), o);
  const auto prompt = prompt_of(13, eng.config().vocab_size, 7);
  const size_t V = static_cast<size_t>(eng.config().vocab_size);
  const auto all = eng.step(prompt, /*all_logits=*/true);
  ASSERT_EQ(all.size(), prompt.size() * V);

  eng.reset();
  for (size_t i = 0; i < prompt.size(); ++i) {
    const auto one = eng.step({prompt[i]});
    EXPECT_LE(rel(one, std::vector<float>(all.begin() + i * V, all.begin() + (i + 1) * V)), 1e-5)
        << "position " << i;
  }

  o.max_step_tokens = 4;  // the prompt is prefilled in chunks of 4 (query shorter than the keys)
  engine::Engine chunked(dir.path(), o);
  EXPECT_LE(rel(chunked.step(prompt, true), all), 1e-5);
}

TEST_P(EngineConsistency, CudaBf16MatchesCpu) {
  BRAID_REQUIRE_CUDA();
  TinyModelDir dir(GetParam());
  engine::Engine cpu(dir.path(), {});
  engine::EngineOptions o;
  o.device = Device::cuda();
  engine::Engine gpu(dir.path(), o);
  EXPECT_EQ(gpu.dtype(), DType::bf16);
  const auto prompt = prompt_of(21, cpu.config().vocab_size, 11);
  EXPECT_LE(rel(gpu.step(prompt, true), cpu.step(prompt, true)), 3e-2);
  EXPECT_LE(rel(gpu.step({5}), cpu.step({5})), 3e-2);  // one decode step
}

// head_dim 64 and 128 take the FlashAttention kernel for prefill: a 150-token prompt (three
// 64-row query tiles) whole and in chunks of 64 (queries shorter than the cached keys), bf16 on
// the GPU against the fp32 CPU engine.
TEST(EngineFlashPrefill, CudaHeadDim64And128MatchCpu) {
  BRAID_REQUIRE_CUDA();
  for (int head_dim : {64, 128}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    TinyModelSpec spec;
    spec.head_dim = head_dim;
    TinyModelDir dir(spec);
    engine::EngineOptions big;
    big.max_step_tokens = 256;
    engine::Engine cpu(dir.path(), big);
    const auto prompt = prompt_of(150, cpu.config().vocab_size, 5);
    const auto ref = cpu.step(prompt, true);
    for (int chunk : {256, 64}) {
      engine::EngineOptions o;
      o.device = Device::cuda();
      o.max_step_tokens = chunk;
      engine::Engine gpu(dir.path(), o);
      EXPECT_LE(rel(gpu.step(prompt, true), ref), 3e-2) << "chunks of " << chunk;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, EngineConsistency, ::testing::ValuesIn(specs()),
                         [](const auto& info) {
                           std::string a = info.param.arch;
                           return a.substr(0, a.find("For"));
                         });

TEST(EngineErrors, PromptOverTheContextAndBadTokens) {
  TinyModelDir dir(TinyModelSpec{});
  engine::EngineOptions o;
  o.max_context = 20;
  engine::Engine eng(dir.path(), o);
  expect_error([&] { engine::generate(eng, prompt_of(20, 96, 1), 4, {}, {}); },
               ErrorKind::invalid_argument, {"prompt has 20 tokens", "context holds 20"});
  expect_error([&] { eng.step({5, 96}); }, ErrorKind::invalid_argument,
               {"token id 96", "index 1", "[0, 96)"});
  // Generation stops at the context's end instead of overrunning it.
  auto r = engine::generate(eng, prompt_of(15, 96, 2), 50, {}, {});
  EXPECT_EQ(r.tokens.size(), 5u);
  // Regression (issue 20): and says so, for `generate` to print on stderr.
  EXPECT_TRUE(r.stopped_at_context);
  const std::string note = engine::context_stop_note(r, 50, eng.context());
  for (const char* part : {"stopped after 5 of 50", "15 prompt tokens", "context of 20",
                           "--max-context"})
    EXPECT_NE(note.find(part), std::string::npos) << note;
  // Not when -n fits, nor when an end token came first.
  r = engine::generate(eng, prompt_of(15, 96, 2), 5, {}, {});
  EXPECT_FALSE(r.stopped_at_context);
  EXPECT_EQ(engine::context_stop_note(r, 5, eng.context()), "");
}

// Regression (issue 20): --max-context past max_position_embeddings was accepted silently, while
// the context error says the limit is the model's. Refused before the weights are read.
TEST(EngineErrors, MaxContextPastTheModelsPositionsIsRefused) {
  TinyModelDir dir(TinyModelSpec{});  // max_position_embeddings 256
  engine::EngineOptions o;
  o.max_context = 257;
  expect_error([&] { engine::Engine(dir.path(), o); }, ErrorKind::invalid_argument,
               {"--max-context 257", "max_position_embeddings (256)"});
  o.max_context = 256;
  EXPECT_EQ(engine::Engine(dir.path(), o).context(), 256);
}

// Loader limits (issue 20): a config.json whose sizes are within the limits but far beyond its
// checkpoint (a 2^24 x 2^17 embedding: 8 TB in fp32) fails on the first tensor, before anything
// of that size is allocated: memory while loading follows the real file, not the config's claims.
TEST(EngineErrors, ConfigSizesPastTheCheckpointFailBeforeAllocating) {
  TinyModelDir dir(TinyModelSpec{});
  const std::string config = dir.path() + "/config.json";
  nlohmann::json c;
  std::ifstream(config) >> c;
  c["vocab_size"] = 1 << 24;
  c["hidden_size"] = 1 << 17;
  std::ofstream(config) << c.dump();
  expect_error([&] { engine::Engine(dir.path(), {}); }, ErrorKind::io,
               {"model.embed_tokens.weight", "expected shape [16777216, 131072]", "[96, 64]"});
}

TEST(EngineErrors, MissingOrMistypedTensorsAreNamed) {
  TinyModelSpec missing;
  missing.drop_tensor = "model.layers.1.self_attn.k_proj.weight";
  TinyModelDir a(missing);
  expect_error([&] { engine::Engine(a.path(), {}); }, ErrorKind::io,
               {"model.layers.1.self_attn.k_proj.weight", "missing"});
  TinyModelSpec mistyped;
  mistyped.dtype = "BF16";  // config.json says float32
  TinyModelDir b(mistyped);
  expect_error([&] { engine::Engine(b.path(), {}); }, ErrorKind::io, {"bf16", "config.json", "f32"});
}

TEST(EngineErrors, UnknownArchitectureListsTheSupportedOnes) {
  TinyModelSpec s;
  s.arch = "GPT2LMHeadModel";
  TinyModelDir dir(s);
  try {
    engine::Engine eng(dir.path(), {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("GPT2LMHeadModel"), std::string::npos) << m;
    EXPECT_NE(m.find("LlamaForCausalLM"), std::string::npos) << m;
    EXPECT_NE(m.find("MixtralForCausalLM"), std::string::npos) << m;
  }
}

}  // namespace

void PrintTo(const TinyModelSpec& s, std::ostream* os) { *os << s.arch; }

}  // namespace braid::test

namespace braid::test {
namespace {

// The CUDA graph of a greedy decode step computes exactly what the eager steps compute.
TEST(EngineGraph, GreedyGraphDecodingEqualsEagerSteps) {
  BRAID_REQUIRE_CUDA();
  TinyModelSpec spec;
  spec.arch = "Qwen3ForCausalLM", spec.qk_norm = true, spec.head_dim = 32;
  TinyModelDir dir(spec);
  engine::EngineOptions o;
  o.device = Device::cuda();
  engine::Engine graph(dir.path(), o), eager(dir.path(), o);
  const auto prompt = prompt_of(9, spec.vocab, 3);
  const auto r = engine::generate(graph, prompt, 40, {}, {});
  EXPECT_GT(graph.decode_graph_kernels(), 0);

  std::vector<int32_t> expected;
  auto logits = eager.step(prompt);
  for (int i = 0; i < 40; ++i) {
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    expected.push_back(next);
    if (i + 1 < 40) logits = eager.step({next});
  }
  EXPECT_EQ(r.tokens, expected);
}

}  // namespace
}  // namespace braid::test
