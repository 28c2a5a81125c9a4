// Tensor parallelism simulated on the CPU (issue 21): N engines, one per thread, each loading its
// shard of the checkpoint and exchanging partial sums through a ThreadComm, must compute the
// logits of the unsharded engine. In fp32 the only difference is the order of the sums (a row-
// parallel product's k split across ranks, then added in rank order), so 1e-5 relative; a wrong
// slice, a missing all-reduce or a bias added twice fails by far more.
#include <filesystem>
#include <thread>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/llm_engine.h"
#include "model/shard.h"
#include "parallel/comm.h"
#include "test_util.h"
#include "tiny_model.h"

namespace braid::test {
namespace {

const std::filesystem::path kGoldens = std::filesystem::path(BRAID_SOURCE_DIR) / "tests/data/goldens";

std::vector<int32_t> tokens_of(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(3 + rng() % static_cast<uint64_t>(vocab - 3));
  return ids;
}

// A group of `size` CPU engines stepped together, one thread per rank.
class Group {
 public:
  Group(const std::string& dir, int size) : comm_(size) {
    for (int r = 0; r < size; ++r) {
      engine::EngineOptions o;
      o.tensor_parallel = {r, size};
      o.comm = &comm_;
      ranks_.push_back(std::make_unique<engine::Engine>(dir, o));
    }
  }
  // Every rank steps with the same tokens; every rank must return the same logits.
  std::vector<float> step(const std::vector<int32_t>& tokens, bool all_logits = false) {
    std::vector<std::vector<float>> out(ranks_.size());
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(ranks_.size());
    for (size_t r = 0; r < ranks_.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          out[r] = ranks_[r]->step(tokens, all_logits);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    for (size_t r = 1; r < out.size(); ++r) EXPECT_EQ(out[r], out[0]) << "rank " << r;
    return out[0];
  }

 private:
  parallel::ThreadComm comm_;
  std::vector<std::unique_ptr<engine::Engine>> ranks_;
};

// A prompt (all logits), then decode steps, against the unsharded engine.
void expect_matches_unsharded(const std::string& dir, int size) {
  SCOPED_TRACE(dir + " at tensor-parallel size " + std::to_string(size));
  engine::Engine whole(dir, {});
  Group group(dir, size);
  const int vocab = whole.config().vocab_size;
  const auto prompt = tokens_of(11, vocab, 5);
  EXPECT_LE(rel_error(group.step(prompt, true), whole.step(prompt, true)), 1e-5);
  for (int32_t t : tokens_of(4, vocab, 9)) EXPECT_LE(rel_error(group.step({t}), whole.step({t})), 1e-5);
}

TEST(TensorParallelCpu, DenseGoldensMatchTheUnshardedForward) {
  // llama: tied embeddings, 2 KV heads (split at 2, replicated at 4); qwen2: q/k/v biases, 6
  // heads over 2 KV heads; qwen3: q/k norms.
  for (const char* family : {"llama", "qwen2", "qwen3"})
    expect_matches_unsharded((kGoldens / family).string(), 2);
  expect_matches_unsharded((kGoldens / "llama").string(), 4);
  expect_matches_unsharded((kGoldens / "qwen3").string(), 4);
}

TEST(TensorParallelCpu, MoeGoldensMatchTheUnshardedForward) {
  // Experts split along their intermediate width; qwen3_moe's one KV head is replicated.
  expect_matches_unsharded((kGoldens / "qwen3_moe").string(), 2);
  expect_matches_unsharded((kGoldens / "qwen3_moe").string(), 4);
  expect_matches_unsharded((kGoldens / "mixtral").string(), 2);
}

// DeepSeek: multi-head latent attention (heads split, the latent whole on every rank; with and
// without the q LoRA), sigmoid and softmax group routing, shared experts split like the routed
// ones, dense first layers; DeepSeek-OCR's language model with plain attention.
TEST(TensorParallelCpu, DeepseekGoldensMatchTheUnshardedForward) {
  for (const char* family : {"deepseek_v2", "deepseek_v2_lora", "deepseek_v3", "deepseek_ocr_lm"}) {
    expect_matches_unsharded((kGoldens / family).string(), 2);
    expect_matches_unsharded((kGoldens / family).string(), 4);
  }
}

TEST(TensorParallelCpu, FewerKvHeadsThanRanksAndTiedEmbeddings) {
  TinyModelSpec s;  // 4 heads over 2 KV heads
  s.tied = true;
  TinyModelDir dir(s);
  expect_matches_unsharded(dir.path(), 4);
}

// Llama's attention_bias: q/k/v biases split with their rows, o_proj's bias added once (rank 0)
// to the all-reduced sum; added by every rank it would count size times.
TEST(TensorParallelCpu, AttentionBiases) {
  TinyModelSpec s;
  s.attention_bias = true;
  TinyModelDir dir(s);
  expect_matches_unsharded(dir.path(), 2);
}

// The front engine (tensor_parallel without a communicator) builds and steps its own ranks:
// generate() on it gives the unsharded engine's tokens, greedy and sampled.
TEST(TensorParallelCpu, FrontEngineGeneratesTheUnshardedTokens) {
  const std::string dir = (kGoldens / "qwen3_moe").string();
  engine::Engine whole(dir, {});
  engine::EngineOptions o;
  o.tensor_parallel.size = 2;
  engine::Engine front(dir, o);
  const auto prompt = tokens_of(9, whole.config().vocab_size, 3);
  EXPECT_EQ(engine::generate(front, prompt, 12, {}, {}).tokens,
            engine::generate(whole, prompt, 12, {}, {}).tokens);
  const engine::SamplingParams sampled{0.8f, 20, 0.9f, 7};
  EXPECT_EQ(engine::generate(front, prompt, 12, sampled, {}).tokens,
            engine::generate(whole, prompt, 12, sampled, {}).tokens);
  // A bad token is refused before any rank starts (no rank left waiting at a collective).
  expect_error([&] { front.step({whole.config().vocab_size}); }, ErrorKind::invalid_argument,
               {"outside the vocabulary"});
  EXPECT_EQ(front.step({5}).size(), static_cast<size_t>(whole.config().vocab_size));
}

TEST(TensorParallelCpu, ShardConfigDividesAndReplicates) {
  model::ModelConfig c;
  c.num_layers = 2, c.hidden_size = 64, c.num_heads = 8, c.num_kv_heads = 2, c.head_dim = 8;
  c.intermediate_size = 96, c.vocab_size = 128;
  const model::ModelConfig r4 = model::shard_config(c, 4);
  EXPECT_EQ(r4.num_heads, 2);
  EXPECT_EQ(r4.num_kv_heads, 1);  // replicated: ranks 0, 1 read KV head 0, ranks 2, 3 head 1
  EXPECT_EQ(r4.intermediate_size, 24);
  EXPECT_EQ(r4.vocab_size, 32);
  EXPECT_EQ(model::kv_heads_of(c, {1, 4}).first, 0);
  EXPECT_EQ(model::kv_heads_of(c, {2, 4}).first, 1);
  const model::TensorSlice k = model::tensor_slice("model.layers.0.self_attn.k_proj.weight", c, {3, 4});
  EXPECT_EQ(k.dim, 0);
  EXPECT_EQ(k.begin, 8);
  EXPECT_EQ(k.end, 16);
  const model::TensorSlice o = model::tensor_slice("model.layers.1.self_attn.o_proj.weight", c, {1, 4});
  EXPECT_EQ(o.dim, 1);
  EXPECT_EQ(o.begin, 16);
  EXPECT_EQ(o.end, 32);
  EXPECT_EQ(model::tensor_slice("model.layers.1.mlp.gate.weight", c, {1, 4}).dim, -1);  // a router
  EXPECT_EQ(model::tensor_slice("model.norm.weight", c, {1, 4}).dim, -1);
}

// The serving engine split over simulated ranks: requests batched, chunked and sampled must get
// the tokens (and log-probabilities) of the unsplit engine. Greedy rows take the argmax of the
// gathered logits, seeded rows draw from them (on the host here), so any difference in the
// gathered logits beyond rounding shows as a different token.
std::map<std::string, std::vector<int32_t>> serve_tokens(const std::string& dir, int ranks,
                                                         std::vector<double>* logprobs) {
  engine::EngineConfig cfg;
  cfg.tensor_parallel = ranks;
  cfg.max_model_len = 64;
  cfg.max_num_batched_tokens = 24;  // the prompts in chunks, beside the decode rows
  engine::LLMEngine eng(dir, cfg);
  const int vocab = eng.model_config().vocab_size;
  for (int i = 0; i < 5; ++i) {
    engine::Request r;
    r.id = "r" + std::to_string(i);
    r.prompt = tokens_of(7 + 5 * i, vocab, 100 + static_cast<uint64_t>(i));
    r.stop.max_tokens = 6;
    r.stop.ignore_eos = true;
    if (i % 2 == 1) {  // seeded sampling, with log-probabilities
      r.sampling.temperature = 0.9f, r.sampling.top_p = 0.95f, r.sampling.seed = 11 + i;
      r.seeded = true;
      r.sampling.logprobs = 2;
    }
    eng.add_request(r);
  }
  std::map<std::string, std::vector<int32_t>> out;
  for (int step = 0; step < 1000 && eng.has_unfinished(); ++step)
    for (const engine::SequenceOutput& o : eng.step()) {
      auto& t = out[o.request_id];
      t.insert(t.end(), o.tokens.begin(), o.tokens.end());
      for (const engine::TokenLogprob& lp : o.logprobs) logprobs->push_back(lp.logprob);
    }
  EXPECT_FALSE(eng.has_unfinished());
  EXPECT_EQ(eng.tensor_parallel(), ranks);
  return out;
}

TEST(TensorParallelCpu, ServingEngineGivesTheUnsplitTokens) {
  for (const char* family : {"llama", "qwen3_moe", "deepseek_v3"}) {
    const std::string dir = (kGoldens / family).string();
    SCOPED_TRACE(family);
    std::vector<double> whole_lp;
    const auto whole = serve_tokens(dir, 1, &whole_lp);
    for (int ranks : {2, 4}) {
      SCOPED_TRACE("ranks " + std::to_string(ranks));
      std::vector<double> split_lp;
      EXPECT_EQ(serve_tokens(dir, ranks, &split_lp), whole);
      ASSERT_EQ(split_lp.size(), whole_lp.size());
      for (size_t i = 0; i < whole_lp.size(); ++i) EXPECT_NEAR(split_lp[i], whole_lp[i], 1e-4) << i;
    }
  }
}

TEST(TensorParallelCpu, WhatDoesNotSplitIsRefusedBeforeLoading) {
  TinyModelSpec s;  // 4 heads, 2 KV heads, intermediate 96, vocab 96
  TinyModelDir dir(s);
  auto with = [&](int rank, int size, parallel::Comm* comm, Device device = Device::cpu()) {
    engine::EngineOptions o;
    o.tensor_parallel = {rank, size};
    o.comm = comm;
    o.device = device;
    return o;
  };
  parallel::ThreadComm three(3), two(2);
  expect_error([&] { engine::Engine(dir.path(), with(0, 3, &three)); }, ErrorKind::invalid_argument,
               {"num_attention_heads 4", "--tensor-parallel 3"});
  expect_error([&] { engine::Engine(dir.path(), with(0, 2, &three)); }, ErrorKind::invalid_argument,
               {"communicator of that size"});
  expect_error([&] { engine::Engine(dir.path(), with(2, 2, &two)); }, ErrorKind::invalid_argument,
               {"rank 2 of 2"});
  // A CUDA group larger than the GPUs present (none on CI's machines): refused before the
  // checkpoint is read.
  const int gpus = cuda_device_count(), size = std::max(2, gpus + 1);
#if BRAID_WITH_CUDA
  expect_error([&] { engine::Engine(dir.path(), with(0, size, nullptr, Device::cuda())); },
               ErrorKind::invalid_argument,
               {"over " + std::to_string(size) + " GPUs", std::to_string(gpus) + " are present"});
#else
  expect_error([&] { engine::Engine(dir.path(), with(0, size, nullptr, Device::cuda())); },
               ErrorKind::unsupported, {"no CUDA support"});
#endif
  TinyModelSpec kv = s;
  kv.heads = 6, kv.kv_heads = 2, kv.hidden = 96;  // 6 heads split in 3; 2 KV heads do not
  TinyModelDir kv_dir(kv);
  expect_error([&] { engine::Engine(kv_dir.path(), with(0, 3, &three)); }, ErrorKind::invalid_argument,
               {"num_key_value_heads 2", "--tensor-parallel 3"});
  TinyModelSpec fp8 = s;
  fp8.hidden = 256, fp8.heads = 8, fp8.kv_heads = 4, fp8.head_dim = 32, fp8.intermediate = 256;
  fp8.fp8 = "blocks";
  TinyModelDir fp8_dir(fp8);
  expect_error([&] { engine::Engine(fp8_dir.path(), with(0, 2, &two)); }, ErrorKind::unsupported,
               {"fp8"});
}

}  // namespace
}  // namespace braid::test
