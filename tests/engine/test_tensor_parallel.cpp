// Tensor parallelism simulated on the CPU (issue 21): N engines, one per thread, each loading its
// shard of the checkpoint and exchanging partial sums through a ThreadComm, must compute the
// logits of the unsharded engine. In fp32 the only difference is the order of the sums (a row-
// parallel product's k split across ranks, then added in rank order), so 1e-5 relative; a wrong
// slice, a missing all-reduce or a bias added twice fails by far more.
#include <filesystem>
#include <set>
#include <thread>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/llm_engine.h"
#include "model/shard.h"
#include "model/weights.h"
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

// A group of `size` CPU engines stepped together, one thread per rank (with expert_parallel the
// routed experts whole over the ranks; `comm`: another communicator in place of the group's own;
// `base`: the options of every rank but its place in the group).
class Group {
 public:
  Group(const std::string& dir, int size, bool expert_parallel = false,
        parallel::Comm* comm = nullptr, const engine::EngineOptions& base = {})
      : comm_(size) {
    for (int r = 0; r < size; ++r) {
      engine::EngineOptions o = base;
      o.tensor_parallel = {r, size, expert_parallel};
      o.comm = comm ? comm : &comm_;
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

// A prompt (all logits), then decode steps, against the unsharded engine (both with `base`).
void expect_matches_unsharded(const std::string& dir, int size, bool expert_parallel = false,
                              const engine::EngineOptions& base = {}) {
  SCOPED_TRACE(dir + " at tensor-parallel size " + std::to_string(size) +
               (expert_parallel ? ", expert parallel" : ""));
  engine::Engine whole(dir, base);
  Group group(dir, size, expert_parallel, nullptr, base);
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
                                                         std::vector<double>* logprobs,
                                                         bool expert_parallel = false) {
  engine::EngineConfig cfg;
  cfg.tensor_parallel = ranks;
  cfg.expert_parallel = expert_parallel;
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

// The serving engine at 2 and 4 ranks gives the one-rank engine's tokens, log-probabilities
// within 1e-4.
void expect_unsplit_tokens(std::initializer_list<const char*> families, bool expert_parallel) {
  for (const char* family : families) {
    const std::string dir = (kGoldens / family).string();
    SCOPED_TRACE(family);
    std::vector<double> whole_lp;
    const auto whole = serve_tokens(dir, 1, &whole_lp);
    for (int ranks : {2, 4}) {
      SCOPED_TRACE("ranks " + std::to_string(ranks));
      std::vector<double> split_lp;
      EXPECT_EQ(serve_tokens(dir, ranks, &split_lp, expert_parallel), whole);
      ASSERT_EQ(split_lp.size(), whole_lp.size());
      for (size_t i = 0; i < whole_lp.size(); ++i) EXPECT_NEAR(split_lp[i], whole_lp[i], 1e-4) << i;
    }
  }
}

TEST(TensorParallelCpu, ServingEngineGivesTheUnsplitTokens) {
  expect_unsplit_tokens({"llama", "qwen3_moe", "deepseek_v3"}, false);
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
  // An fp8 checkpoint whose k_proj (4 KV heads of 32) would split into 64-row halves: each half
  // would hold half of a 128 x 128 scale block. The same checkpoint in 16 bits splits.
  TinyModelSpec fp8 = s;
  fp8.hidden = 256, fp8.heads = 8, fp8.kv_heads = 4, fp8.head_dim = 32, fp8.intermediate = 256;
  fp8.fp8 = "blocks";
  TinyModelDir fp8_dir(fp8);
  expect_error([&] { engine::Engine(fp8_dir.path(), with(0, 2, &two)); }, ErrorKind::invalid_argument,
               {"'model.layers.0.self_attn.k_proj.weight'", "rank 0 of 2", "rows [0, 64)",
                "128 x 128 scale blocks"});
  engine::EngineOptions quantized = with(0, 2, &two);
  quantized.quantize = model::Quantize::fp8;
  TinyModelSpec dense16 = fp8;
  dense16.fp8 = "";
  TinyModelDir dense16_dir(dense16);
  expect_error([&] { engine::Engine(dense16_dir.path(), quantized); }, ErrorKind::invalid_argument,
               {"k_proj", "rows [0, 64)"});
  // Per-row scales split with their rows, whatever the widths.
  TinyModelSpec channel = fp8;
  channel.fp8 = "channel";
  TinyModelDir channel_dir(channel);
  expect_matches_unsharded(channel_dir.path(), 2);
}

// fp8 checkpoints split like 16-bit ones, each scale with the rows or columns it scales
// (model/shard.h). Widths whose every split falls on 128 x 128 blocks at 2 and 4 ranks: q 512
// rows (4 heads of 128), k and v 256 (split at 2, a whole head each at 4), the MLP 512 wide; per-row
// and per-matrix scales (compressed-tensors) need no such widths. On the
// CPU an fp8 product is exact (value x scale in f32), so the split differs from the whole only
// in the order of its sums; a rank given another part's scales moves the logits by far more.
TinyModelSpec fp8_split_spec(const std::string& format) {
  TinyModelSpec s;
  s.hidden = 256, s.heads = 4, s.kv_heads = 2, s.head_dim = 128, s.intermediate = 512;
  s.fp8 = format;
  return s;
}

TEST(TensorParallelCpu, Fp8CheckpointsMatchTheUnshardedForward) {
  for (const char* format : {"blocks", "channel", "tensor", "ct_block"}) {
    TinyModelDir dir(fp8_split_spec(format));
    expect_matches_unsharded(dir.path(), 2);
    expect_matches_unsharded(dir.path(), 4);
  }
}

// The published fp8 checkpoints split where docs/perf/tensor_parallel.md says they do: whole
// 128 x 128 scale blocks per rank, or a refusal naming the tensor (and expert parallelism, which
// keeps the experts whole, where the experts are what does not split).
TEST(TensorParallelCpu, PublishedFp8ShapesSplitOnWholeBlocks) {
  auto dense = [](int hidden, int heads, int kv_heads, int intermediate, int vocab) {
    model::ModelConfig c;
    c.weights = model::WeightFormat::fp8_blocks;
    c.num_layers = 4, c.hidden_size = hidden, c.num_heads = heads, c.num_kv_heads = kv_heads;
    c.head_dim = 128, c.intermediate_size = intermediate, c.vocab_size = vocab;
    return c;
  };
  const model::ModelConfig llama70b = dense(8192, 64, 8, 28672, 128256);
  const model::ModelConfig qwen3_32b = dense(5120, 64, 8, 25600, 151936);
  model::ModelConfig qwen3_30b = dense(2048, 32, 4, 6144, 151936);
  qwen3_30b.arch = model::Arch::qwen3_moe;
  qwen3_30b.num_experts = 128, qwen3_30b.experts_per_token = 8, qwen3_30b.moe_intermediate_size = 768;
  model::ModelConfig v3 = dense(7168, 128, 1, 18432, 129280);
  v3.arch = model::Arch::deepseek_v3;
  v3.q_lora_rank = 1536, v3.kv_lora_rank = 512, v3.qk_nope_head_dim = 128;
  v3.qk_rope_head_dim = 64, v3.v_head_dim = 128, v3.head_dim = 64;
  v3.num_experts = 256, v3.experts_per_token = 8, v3.moe_intermediate_size = 2048;
  v3.n_shared_experts = 1, v3.first_k_dense_replace = 3;
  for (int size : {2, 4, 8}) {
    SCOPED_TRACE("size " + std::to_string(size));
    EXPECT_NO_THROW(model::shard_config(llama70b, size));
    EXPECT_NO_THROW(model::shard_config(qwen3_32b, size));
    EXPECT_NO_THROW(model::shard_config(qwen3_30b, size, /*expert_parallel=*/true));
  }
  EXPECT_NO_THROW(model::shard_config(qwen3_30b, 2));  // 384 columns of each expert a rank
  for (int size : {4, 8})
    expect_error([&] { model::shard_config(qwen3_30b, size); }, ErrorKind::invalid_argument,
                 {"'model.layers.0.mlp.experts.0.gate_proj.weight'", "--expert-parallel"});
  EXPECT_NO_THROW(model::shard_config(v3, 8));  // q_b 3072 rows, kv_b 4096, o_proj 2048 columns
  EXPECT_NO_THROW(model::shard_config(v3, 8, /*expert_parallel=*/true));
}

// --quantize fp8 on a rank quantizes the rank's part of each 16-bit matrix. Split on the blocks,
// that part is exactly the rank's part of the whole matrix's quantization: the same bytes and
// scales as the unsplit load's (row and column splits, and gate|up stacked), and so the unsplit
// quantized engine's logits.
TEST(TensorParallelCpu, QuantizedAtLoadEachRankHoldsItsPartOfTheWholeQuantization) {
  TinyModelDir dir(fp8_split_spec(""));  // an f32 checkpoint
  const model::ModelConfig full =
      model::quantized_config(model::load_config(dir.path()), model::Quantize::fp8);
  const model::Checkpoint ckpt = model::Checkpoint::open(dir.path());
  const model::Weights whole =
      model::load_weights(full, ckpt, Device::cpu(), DType::f32, model::Quantize::fp8);
  const model::Weights half =
      model::load_weights(full, ckpt, Device::cpu(), DType::f32, model::Quantize::fp8, {1, 2});
  for (size_t l = 0; l < whole.layers.size(); ++l) {
    const model::LayerWeights &w = whole.layers[l], &h = half.layers[l];
    SCOPED_TRACE("layer " + std::to_string(l));
    ASSERT_EQ(h.o_proj.dtype, DType::f8e4m3);
    // o_proj [256, 512] by columns: rank 1's [256, 512), its scales' block columns [2, 4).
    EXPECT_EQ(to_floats(h.o_proj), to_floats(w.o_proj.slice(1, 256, 512)));
    EXPECT_EQ(to_floats(h.o_proj_scale), to_floats(w.o_proj_scale.slice(1, 2, 4)));
    EXPECT_EQ(to_floats(h.down), to_floats(w.down.slice(1, 256, 512)));
    EXPECT_EQ(to_floats(h.down_scale), to_floats(w.down_scale.slice(1, 2, 4)));
    // gate|up [1024, 256] by rows of each: rank 1's gate rows [256, 512), then its up rows
    // [768, 1024) of the stack; the scales' block rows [2, 4) and [6, 8).
    EXPECT_EQ(to_floats(h.gate_up.slice(0, 0, 256)), to_floats(w.gate_up.slice(0, 256, 512)));
    EXPECT_EQ(to_floats(h.gate_up.slice(0, 256, 512)), to_floats(w.gate_up.slice(0, 768, 1024)));
    EXPECT_EQ(to_floats(h.gate_up_scale.slice(0, 0, 2)), to_floats(w.gate_up_scale.slice(0, 2, 4)));
    EXPECT_EQ(to_floats(h.gate_up_scale.slice(0, 2, 4)), to_floats(w.gate_up_scale.slice(0, 6, 8)));
  }
  engine::EngineOptions o;
  o.quantize = model::Quantize::fp8;
  expect_matches_unsharded(dir.path(), 2, false, o);
  expect_matches_unsharded(dir.path(), 4, false, o);
}

// fp8 routed experts (Qwen3-*-FP8's and DeepSeek-V3's layout, and compressed-tensors' per-channel
// one, at 2 ranks) split along their width (512 wide:
// 256 or 128 columns a rank, whole blocks) or whole (expert parallelism); DeepSeek's multi-head
// latent attention (8 heads: q_b_proj and kv_b_proj 1024 rows, o_proj 512 columns) and its shared
// expert split too. The prompt stays within moe_gemv_max_tokens: the experts' GEMV, exact on the
// CPU like the dense fp8 products (a longer one quantizes the activations per 128 columns).
TEST(TensorParallelCpu, Fp8ExpertsMatchTheUnshardedForward) {
  TinyModelSpec qwen3 = fp8_split_spec("blocks");
  qwen3.arch = "Qwen3MoeForCausalLM";
  qwen3.qk_norm = true;
  qwen3.mlp_only_layers = {0};
  qwen3.fp8_experts = true;
  qwen3.experts = 8, qwen3.experts_per_token = 2, qwen3.moe_intermediate = 512;
  TinyModelSpec deepseek = qwen3;
  deepseek.arch = "DeepseekV3ForCausalLM";
  deepseek.deepseek = true;
  deepseek.qk_norm = false;
  deepseek.heads = 8, deepseek.q_lora = 128, deepseek.kv_lora = 128;
  deepseek.nope = 64, deepseek.rope = 64, deepseek.v_head = 64;
  // Per-channel experts (compressed-tensors), requantized to blocks by each rank from its slice:
  // the slices split on whole 128-blocks, so every rank gets the blocks of the whole matrix's.
  TinyModelSpec qwen3_channel = qwen3;
  qwen3_channel.fp8 = "channel";
  for (const TinyModelSpec& spec : {qwen3, deepseek, qwen3_channel}) {
    SCOPED_TRACE(spec.arch + " " + spec.fp8);
    TinyModelDir dir(spec);
    EXPECT_TRUE(model::load_config(dir.path()).fp8_experts());
    // (The per-channel model at 2 ranks only: its splits are the block-scaled one's, and CI's
    // time is short.)
    for (int size : spec.fp8 == "channel" ? std::vector<int>{2} : std::vector<int>{2, 4})
      for (bool expert_parallel : {false, true})
        expect_matches_unsharded(dir.path(), size, expert_parallel);
  }
  // 128-wide experts would split into 64-column halves of their scale blocks: refused, naming the
  // first MoE layer's expert and the split that keeps them whole, which then runs.
  TinyModelSpec narrow = qwen3;
  narrow.moe_intermediate = 128;
  TinyModelDir narrow_dir(narrow);
  parallel::ThreadComm two(2);
  engine::EngineOptions o;
  o.tensor_parallel = {0, 2};
  o.comm = &two;
  expect_error([&] { engine::Engine(narrow_dir.path(), o); }, ErrorKind::invalid_argument,
               {"'model.layers.1.mlp.experts.0.gate_proj.weight'", "rows [0, 64)",
                "--expert-parallel"});
  expect_matches_unsharded(narrow_dir.path(), 2, /*expert_parallel=*/true);
}

// Expert parallelism (model/shard.h): the same ranks, each holding whole routed experts
// [r E / N, (r + 1) E / N) instead of a slice of every one; everything else split as above. Every
// golden has 8 experts; mixtral's 6 heads do not split over 4 ranks.
TEST(ExpertParallelCpu, MoeGoldensMatchTheUnshardedForward) {
  for (const char* family : {"qwen3_moe", "deepseek_v2", "deepseek_v2_lora", "deepseek_v3",
                             "deepseek_ocr_lm"}) {
    expect_matches_unsharded((kGoldens / family).string(), 2, /*expert_parallel=*/true);
    expect_matches_unsharded((kGoldens / family).string(), 4, /*expert_parallel=*/true);
  }
  expect_matches_unsharded((kGoldens / "mixtral").string(), 2, /*expert_parallel=*/true);
}

// In fp32 every MoE step takes the GEMV path (moe_experts); in bf16 a prompt longer than
// moe_gemv_max_tokens takes the grouped path (moe_permute, where the other ranks' pairs sort last,
// the grouped GEMMs, moe_combine). Against the unsplit engine in bf16: each rank rounds its part
// of the layer to bf16 before the all-reduce, so a few bf16 roundings apart, not 1e-5 (measured:
// 0.008-0.011, as tensor parallelism's split gives; the wrong experts on a rank give 0.16-0.38).
TEST(ExpertParallelCpu, GroupedPathInBf16) {
  for (const char* family : {"qwen3_moe", "deepseek_v3"}) {
    const std::string dir = (kGoldens / family).string();
    SCOPED_TRACE(family);
    engine::EngineOptions o;
    o.dtype = DType::bf16;
    o.moe_gemv_max_tokens = 4;
    engine::Engine whole(dir, o);
    const auto prompt = tokens_of(11, whole.config().vocab_size, 5);
    const std::vector<float> want = whole.step(prompt, true);
    for (int size : {2, 4}) {
      Group group(dir, size, /*expert_parallel=*/true, nullptr, o);
      EXPECT_LE(rel_error(group.step(prompt, true), want), 2e-2) << size << " ranks";
    }
  }
}

// The ThreadComm of a group, but the all-reduce after every MoE layer (the experts' combine) is
// left out by every rank (so that none waits): a step's collectives come in a fixed order (the
// embedding's, then o_proj's and the MLP's or MoE's of each layer, then the LM head's gather).
class NoMoeCombine : public parallel::Comm {
 public:
  NoMoeCombine(int size, model::ModelConfig config)
      : inner_(size), config_(std::move(config)), calls_(static_cast<size_t>(size), 0) {}
  int size() const override { return inner_.size(); }
  void all_reduce_sum(int rank, const Tensor& x, Stream stream) override {
    // Call 0: the embedding's; 1 + 2 l: layer l's o_proj; 2 + 2 l: its MLP or experts.
    const int i = calls_[static_cast<size_t>(rank)]++;
    if (i >= 2 && i % 2 == 0 && config_.layer_is_moe((i - 2) / 2)) return;
    inner_.all_reduce_sum(rank, x, stream);
  }
  void all_gather_columns(int rank, const Tensor& x, const Tensor& out, Stream stream) override {
    calls_[static_cast<size_t>(rank)] = 0;  // the step's last collective
    inner_.all_gather_columns(rank, x, out, stream);
  }
  void abort() override { inner_.abort(); }

 private:
  parallel::ThreadComm inner_;
  model::ModelConfig config_;
  std::vector<int> calls_;  // each rank's own entry, on its own thread
};

TEST(ExpertParallelCpu, AMissingCombineIsSeen) {
  for (const char* family : {"qwen3_moe", "deepseek_v3"}) {
    const std::string dir = (kGoldens / family).string();
    SCOPED_TRACE(family);
    engine::Engine whole(dir, {});
    NoMoeCombine comm(2, whole.config());
    Group group(dir, 2, /*expert_parallel=*/true, &comm);
    const auto prompt = tokens_of(11, whole.config().vocab_size, 5);
    EXPECT_GT(rel_error(group.step(prompt, true), whole.step(prompt, true)), 1e-2);
  }
}

// The loader asks only for the rank's own experts, and packs them from local id 0.
TEST(ExpertParallelCpu, EachRankReadsOnlyItsExperts) {
  const std::string dir = (kGoldens / "qwen3_moe").string();
  const model::ModelConfig full = model::load_config(dir);
  const model::ModelConfig rank = model::shard_config(full, 4, /*expert_parallel=*/true);
  EXPECT_EQ(rank.expert_parallel, 4);
  EXPECT_EQ(rank.held_experts(), 2);
  EXPECT_EQ(rank.num_experts, 8);  // the router still chooses among all of them
  EXPECT_EQ(rank.moe_intermediate_size, full.moe_intermediate_size);  // experts whole
  EXPECT_EQ(model::experts_of(full, {3, 4, true}).first, 6);
  EXPECT_EQ(model::experts_of(full, {3, 4, false}).count, 8);
  EXPECT_EQ(model::tensor_slice("model.layers.0.mlp.experts.6.down_proj.weight", full, {3, 4, true}).dim, -1);
  EXPECT_EQ(model::tensor_slice("model.layers.0.mlp.experts.6.down_proj.weight", full, {3, 4}).dim, 1);
  std::set<std::string> experts_read;
  const model::Weights w = model::build_weights(
      rank, Device::cpu(), DType::f32,
      [&](const std::string& name, const std::vector<int64_t>&, const Tensor& dst) {
        fill_bytes(dst, 0);
        if (name.find(".experts.") != std::string::npos)
          experts_read.insert(name.substr(0, name.find(".", name.find(".experts.") + 9)));
      },
      {}, /*first_expert=*/6);
  // (Layer 1 is dense: mlp_only_layers.)
  EXPECT_EQ(experts_read, (std::set<std::string>{"model.layers.0.mlp.experts.6",
                                                 "model.layers.0.mlp.experts.7",
                                                 "model.layers.2.mlp.experts.6",
                                                 "model.layers.2.mlp.experts.7"}));
  EXPECT_EQ(w.layers[0].experts_gate_up.shape[0], 2);
  // From the checkpoint: rank 1 of 2 holds the unsplit model's experts 4..7, bit for bit.
  const model::Checkpoint ckpt = model::Checkpoint::open(dir);
  const model::Weights whole = model::load_weights(full, ckpt, Device::cpu(), DType::f32);
  const model::Weights half =
      model::load_weights(full, ckpt, Device::cpu(), DType::f32, model::Quantize::none, {1, 2, true});
  EXPECT_EQ(to_floats(half.layers[2].experts_gate_up), to_floats(whole.layers[2].experts_gate_up.slice(0, 4, 8)));
  EXPECT_EQ(to_floats(half.layers[2].experts_down), to_floats(whole.layers[2].experts_down.slice(0, 4, 8)));
}

// With one rank, expert parallelism is a no-op (one rank holds every expert either way).
TEST(ExpertParallelCpu, OneRankIsANoOp) {
  const std::string dir = (kGoldens / "qwen3_moe").string();
  engine::Engine whole(dir, {});
  engine::EngineOptions o;
  o.tensor_parallel.expert_parallel = true;
  engine::Engine one(dir, o);
  const auto prompt = tokens_of(7, whole.config().vocab_size, 2);
  EXPECT_EQ(one.step(prompt, true), whole.step(prompt, true));
}

TEST(ExpertParallelCpu, WhatDoesNotSplitIsRefusedBeforeLoading) {
  const std::string moe = (kGoldens / "qwen3_moe").string();
  auto with = [](int rank, int size, parallel::Comm* comm) {
    engine::EngineOptions o;
    o.tensor_parallel = {rank, size, true};
    o.comm = comm;
    return o;
  };
  parallel::ThreadComm three(3), two(2);
  // 8 experts over 3 ranks: refused for the experts (checked before the heads, which do not
  // split over 3 either).
  expect_error([&] { engine::Engine(moe, with(0, 3, &three)); }, ErrorKind::invalid_argument,
               {"num_experts 8", "--tensor-parallel 3"});
  TinyModelSpec s;  // a dense Llama
  TinyModelDir dense(s);
  expect_error([&] { engine::Engine(dense.path(), with(0, 2, &two)); }, ErrorKind::invalid_argument,
               {"num_experts 0", "--expert-parallel"});
  expect_error([&] { engine::Engine(dense.path(), with(0, 1, nullptr)); }, ErrorKind::invalid_argument,
               {"num_experts 0"});
  engine::EngineConfig cfg;
  cfg.tensor_parallel = 2;
  cfg.expert_parallel = true;
  expect_error([&] { engine::LLMEngine(dense.path(), cfg); }, ErrorKind::invalid_argument,
               {"num_experts 0"});
  cfg.tensor_parallel = 3;
  expect_error([&] { engine::LLMEngine(moe, cfg); }, ErrorKind::invalid_argument,
               {"num_experts 8", "--tensor-parallel 3"});
}

TEST(ExpertParallelCpu, ServingEngineGivesTheUnsplitTokens) {
  expect_unsplit_tokens({"qwen3_moe", "deepseek_v3"}, true);
}

}  // namespace
}  // namespace braid::test
