// The serving engine on the CPU: a batch of requests gives each the tokens it gets alone (fp32 on
// the CPU is batch-invariant, so exactly), through chunked prefill, the prefix cache, preemption,
// n > 1 and aborts; stop strings, stop tokens, seeds, logprobs; bad requests are errors.
#include <map>
#include <set>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/llm_engine.h"
#include "test_util.h"
#include "tiny_model.h"

namespace braid::test {
namespace {

const std::string kFortunes = std::string(BRAID_SOURCE_DIR) + "/models/tiny-fortunes";

std::vector<int32_t> prompt_of(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(3 + rng() % (vocab - 3));
  return ids;
}

engine::Request greedy_request(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
  engine::Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  return r;
}

struct Result {
  std::map<int, std::vector<int32_t>> tokens;  // by choice index
  std::map<int, std::string> text;
  std::map<int, engine::FinishReason> finish;
  std::map<int, std::string> stop_reason;
  std::map<int, std::vector<engine::TokenLogprob>> logprobs;
  int cached = 0;
};

// Steps the engine until idle, gathering every request's outputs.
std::map<std::string, Result> run_all(engine::LLMEngine& eng, int max_steps = 10000) {
  std::map<std::string, Result> out;
  for (int i = 0; i < max_steps && eng.has_unfinished(); ++i)
    for (engine::SequenceOutput& o : eng.step()) {
      Result& r = out[o.request_id];
      auto& t = r.tokens[o.index];
      t.insert(t.end(), o.tokens.begin(), o.tokens.end());
      r.text[o.index] += o.text;
      auto& lp = r.logprobs[o.index];
      lp.insert(lp.end(), o.logprobs.begin(), o.logprobs.end());
      if (o.finished()) {
        r.finish[o.index] = o.finish;
        r.stop_reason[o.index] = o.stop_reason;
      }
      r.cached = std::max(r.cached, o.cached_prompt_tokens);
    }
  EXPECT_FALSE(eng.has_unfinished()) << "the engine did not drain";
  return out;
}

// The tokens the single-sequence engine's greedy generate() gives.
std::vector<int32_t> solo_greedy(const std::string& dir, const std::vector<int32_t>& prompt, int n) {
  engine::EngineOptions o;
  engine::Engine eng(dir, o);
  return engine::generate(eng, prompt, n, {}, {}).tokens;
}

TEST(LLMEngine, BatchedGreedyEqualsSoloThroughChunksPrefixCacheAndPreemption) {
  TinyModelDir dir(TinyModelSpec{});
  const int V = 96;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(prompt_of(5 + 7 * i, V, 100 + i));
  // Two prompts that share a long prefix with the first.
  prompts.push_back(prompts[5]);
  prompts.back().resize(30);
  prompts.back().push_back(4);
  prompts.push_back(prompts[5]);
  const int new_tokens = 12;
  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : prompts) expected.push_back(solo_greedy(dir.path(), p, new_tokens));

  struct Case {
    const char* name;
    int budget, pages;
    bool prefix;
  };
  for (const Case c : {Case{"roomy", 2048, 0, true}, Case{"chunked", 8, 0, true},
                       Case{"no prefix cache", 16, 0, false},
                       Case{"preempting", 64, 12, true}}) {
    SCOPED_TRACE(c.name);
    engine::EngineConfig cfg;
    cfg.max_num_batched_tokens = c.budget;
    cfg.num_kv_pages = c.pages;
    cfg.enable_prefix_caching = c.prefix;
    cfg.max_model_len = 96;
    engine::LLMEngine eng(dir.path(), cfg);
    for (size_t i = 0; i < prompts.size(); ++i)
      eng.add_request(greedy_request("r" + std::to_string(i), prompts[i], new_tokens));
    auto out = run_all(eng);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Result& r = out["r" + std::to_string(i)];
      EXPECT_EQ(r.tokens.at(0), expected[i]) << "prompt " << i;
      EXPECT_EQ(r.finish.at(0), engine::FinishReason::length);
    }
    EXPECT_EQ(eng.blocks().used_pages(), 0) << "every page came back";
    const auto m = eng.metrics().snapshot();
    EXPECT_EQ(m.generation_tokens, int64_t{new_tokens} * static_cast<int64_t>(prompts.size()));
    if (c.pages) EXPECT_GT(m.preemptions, 0) << "the small pool should have forced preemption";
  }
}

// bench throughput --profile-steps names a step's kernels through forward()'s probe: an eager
// step calls it for each component of each layer, and a step after the probe is unset does not.
TEST(LLMEngine, ForwardProbeSeesTheComponentsOfEachLayerOfAStep) {
  TinyModelDir dir(TinyModelSpec{});
  engine::EngineConfig cfg;
  cfg.max_model_len = 64;
  engine::LLMEngine eng(dir.path(), cfg);
  eng.add_request(greedy_request("a", prompt_of(9, 96, 3), 3));
  std::vector<std::pair<std::string, int>> calls;
  const model::ForwardProbe probe = [&](const char* component, int layer) {
    calls.emplace_back(component, layer);
  };
  eng.runner().set_forward_probe(&probe);
  eng.step();  // the prompt
  eng.runner().set_forward_probe(nullptr);
  std::set<int> layers;
  for (const auto& [component, layer] : calls) layers.insert(layer);
  EXPECT_EQ(layers.count(0) + layers.count(eng.model_config().num_layers - 1), 2u)
      << "the first and the last layer report their components";
  std::set<std::string> names;
  for (const auto& [component, layer] : calls) names.insert(component);
  EXPECT_GE(names.size(), 4u) << "attention, projections, the MLP and the LM head at least";
  const size_t after_prompt = calls.size();
  eng.step();
  EXPECT_EQ(calls.size(), after_prompt) << "an unset probe is not called";
  run_all(eng);
}

TEST(LLMEngine, SecondRequestWithTheSamePrefixPrefillsOnlyWhatIsNew) {
  TinyModelDir dir(TinyModelSpec{});
  engine::EngineConfig cfg;
  cfg.max_model_len = 128;
  engine::LLMEngine eng(dir.path(), cfg);
  auto system = prompt_of(70, 96, 5);
  auto a = system, b = system;
  a.push_back(10), b.push_back(11), b.push_back(12);
  eng.add_request(greedy_request("a", a, 4));
  auto first = run_all(eng);
  eng.add_request(greedy_request("b", b, 4));
  auto second = run_all(eng);
  EXPECT_EQ(first["a"].cached, 0);
  EXPECT_EQ(second["b"].cached, 64) << "the 4 full pages of the shared 70 tokens";
  EXPECT_EQ(second["b"].tokens[0], solo_greedy(dir.path(), b, 4));
  const auto m = eng.metrics().snapshot();
  EXPECT_EQ(m.prefix_hit_tokens, 64);
  EXPECT_EQ(m.prefix_queried_tokens, static_cast<int64_t>(a.size() + b.size()));
}

TEST(LLMEngine, SeededSamplingIsTheSameWhateverShareTheBatch) {
  TinyModelDir dir(TinyModelSpec{});
  engine::EngineConfig cfg;
  cfg.max_model_len = 96;
  auto sampled = [](const std::string& id, std::vector<int32_t> prompt) {
    engine::Request r = greedy_request(id, std::move(prompt), 10);
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.top_k = 40;
    r.sampling.min_p = 0.01f;
    r.sampling.seed = 1234;
    r.seeded = true;
    return r;
  };
  const auto p = prompt_of(9, 96, 77);
  engine::LLMEngine alone(dir.path(), cfg);
  alone.add_request(sampled("x", p));
  const auto solo = run_all(alone)["x"].tokens[0];

  engine::LLMEngine busy(dir.path(), cfg);
  for (int i = 0; i < 5; ++i) busy.add_request(greedy_request("g" + std::to_string(i), prompt_of(4 + i, 96, i), 7));
  busy.add_request(sampled("x", p));
  auto other = sampled("y", p);
  other.sampling.seed = 99;
  busy.add_request(other);
  auto out = run_all(busy);
  EXPECT_EQ(out["x"].tokens[0], solo);
  EXPECT_NE(out["y"].tokens[0], solo) << "another seed should draw other tokens";
}

TEST(LLMEngine, ASeededRequestDrawsTheSameTokensWithOrWithoutLogprobs) {
  // Without logprobs the rows are drawn by ops::sample_tokens over the step's logits; with them
  // the logits come to the host sampler, which calls the same op: one rule, the same tokens.
  TinyModelDir dir(TinyModelSpec{});
  engine::EngineConfig cfg;
  cfg.max_model_len = 96;
  engine::LLMEngine eng(dir.path(), cfg);
  auto sampled = [](const std::string& id, int logprobs) {
    engine::Request r = greedy_request(id, prompt_of(11, 96, 21), 12);
    r.sampling.temperature = 1.3f, r.sampling.top_k = 30, r.sampling.top_p = 0.8f;
    r.sampling.seed = 77, r.seeded = true, r.sampling.logprobs = logprobs;
    return r;
  };
  // One at a time: a step with any logprobs row brings every row to the host.
  eng.add_request(sampled("plain", -1));
  auto plain = run_all(eng)["plain"];
  eng.add_request(sampled("with_logprobs", 2));
  auto with_logprobs = run_all(eng)["with_logprobs"];
  EXPECT_EQ(plain.tokens[0], with_logprobs.tokens[0]);
  EXPECT_EQ(with_logprobs.logprobs[0].size(), 12u);
}

TEST(LLMEngine, NChoicesShareThePromptPagesAndDifferBySeed) {
  TinyModelDir dir(TinyModelSpec{});
  engine::EngineConfig cfg;
  cfg.max_model_len = 96;
  engine::LLMEngine eng(dir.path(), cfg);
  engine::Request r = greedy_request("n", prompt_of(40, 96, 3), 8);
  r.n = 3;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 5;
  r.seeded = true;
  eng.add_request(r);
  std::map<int, int> cached;
  std::map<int, std::vector<int32_t>> tokens;
  while (eng.has_unfinished())
    for (auto& o : eng.step()) {
      cached[o.index] = std::max(cached[o.index], o.cached_prompt_tokens);
      tokens[o.index].insert(tokens[o.index].end(), o.tokens.begin(), o.tokens.end());
    }
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(cached[0], 0);
  EXPECT_EQ(cached[1], 32) << "choices 1 and 2 reuse choice 0's full prompt pages";
  EXPECT_EQ(cached[2], 32);
  for (auto& [i, t] : tokens) EXPECT_EQ(t.size(), 8u);
  EXPECT_TRUE(tokens[0] != tokens[1] || tokens[1] != tokens[2]);
  EXPECT_EQ(eng.blocks().used_pages(), 0);
}

TEST(LLMEngine, AbortEndsARequestAndFreesItsPages) {
  TinyModelDir dir(TinyModelSpec{});
  engine::EngineConfig cfg;
  cfg.max_model_len = 96;
  engine::LLMEngine eng(dir.path(), cfg);
  eng.add_request(greedy_request("keep", prompt_of(10, 96, 1), 6));
  eng.add_request(greedy_request("drop", prompt_of(10, 96, 2), 50));
  size_t early = 0;
  for (int i = 0; i < 2; ++i)
    for (const auto& o : eng.step()) early += o.request_id == "keep" ? o.tokens.size() : 0;
  EXPECT_TRUE(eng.abort_request("drop"));
  EXPECT_FALSE(eng.abort_request("nobody"));
  auto out = run_all(eng);
  EXPECT_EQ(out["drop"].finish.at(0), engine::FinishReason::abort);
  EXPECT_EQ(early + out["keep"].tokens[0].size(), 6u);
  EXPECT_EQ(eng.blocks().used_pages(), 0);
}

TEST(LLMEngine, StopStringsStopTokensEosAndMinTokensOnTheEmbeddedModel) {
  engine::EngineConfig cfg;
  engine::LLMEngine eng(kFortunes, cfg);
  ASSERT_NE(eng.tokenizer(), nullptr);
  const auto prompt = eng.tokenizer()->encode("The meaning of life is", false);
  engine::Request r = greedy_request("free", prompt, 40);
  r.stop.ignore_eos = false;
  eng.add_request(r);
  auto free_run = run_all(eng)["free"];
  const std::string text = free_run.text[0];
  const auto& toks = free_run.tokens[0];
  ASSERT_GE(toks.size(), 4u) << text;
  EXPECT_EQ(text, eng.tokenizer()->decode(toks, true));

  // A stop string from the middle of that text: the output ends right before it.
  const std::string stop = text.substr(text.size() / 2, 3);
  engine::Request s = greedy_request("stop", prompt, 40);
  s.stop.stop = {"zzzz-never", stop};
  eng.add_request(s);
  auto stopped = run_all(eng)["stop"];
  EXPECT_EQ(stopped.finish[0], engine::FinishReason::stop);
  EXPECT_EQ(stopped.stop_reason[0], stop);
  EXPECT_EQ(stopped.text[0], text.substr(0, text.find(stop)));
  s.id = "stop2";
  s.stop.include_stop_str_in_output = true;
  eng.add_request(s);
  EXPECT_EQ(run_all(eng)["stop2"].text[0], text.substr(0, text.find(stop) + stop.size()));

  // A stop token: the third generated token ends it.
  engine::Request t = greedy_request("tok", prompt, 40);
  t.stop.stop_token_ids = {toks[2]};
  eng.add_request(t);
  auto by_token = run_all(eng)["tok"];
  EXPECT_EQ(by_token.tokens[0].size(), 3u);
  EXPECT_EQ(by_token.stop_reason[0], std::to_string(toks[2]));

  // min_tokens past the end-of-text the free run stopped at: the sequence goes on.
  if (free_run.finish[0] == engine::FinishReason::stop) {
    engine::Request m = greedy_request("min", prompt, 60);
    m.stop.ignore_eos = false;
    m.stop.min_tokens = static_cast<int>(toks.size()) + 2;
    eng.add_request(m);
    EXPECT_GE(run_all(eng)["min"].tokens[0].size(), toks.size() + 3);
  }
}

TEST(LLMEngine, LogprobsAreTheModelsDistribution) {
  TinyModelDir dir(TinyModelSpec{});
  engine::EngineConfig cfg;
  cfg.max_model_len = 96;
  engine::LLMEngine eng(dir.path(), cfg);
  engine::Request r = greedy_request("lp", prompt_of(6, 96, 8), 5);
  r.sampling.logprobs = 3;
  eng.add_request(r);
  auto out = run_all(eng)["lp"];
  ASSERT_EQ(out.logprobs[0].size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const auto& lp = out.logprobs[0][i];
    EXPECT_EQ(lp.token, out.tokens[0][i]);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].first, lp.token) << "greedy picks the most likely token";
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
    EXPECT_LE(lp.logprob, 0.0f);
    EXPECT_GE(lp.top[0].second, lp.top[1].second);
    EXPECT_GE(lp.top[1].second, lp.top[2].second);
  }
  EXPECT_EQ(out.tokens[0], solo_greedy(dir.path(), r.prompt, 5)) << "asking for logprobs changes nothing";
}

TEST(LLMEngine, BadRequestsAreErrorsAndTheEngineGoesOn) {
  TinyModelDir dir(TinyModelSpec{});
  engine::EngineConfig cfg;
  cfg.max_model_len = 64;
  engine::LLMEngine eng(dir.path(), cfg);
  expect_error([&] { eng.add_request(greedy_request("a", {}, 4)); }, ErrorKind::invalid_argument, {"empty"});
  expect_error([&] { eng.add_request(greedy_request("a", {1, 96}, 4)); }, ErrorKind::invalid_argument,
               {"96", "vocabulary"});
  expect_error([&] { eng.add_request(greedy_request("a", prompt_of(60, 96, 1), 10)); },
               ErrorKind::invalid_argument, {"60", "64"});
  expect_error([&] { eng.add_request(greedy_request("a", {1, 2}, 0)); }, ErrorKind::invalid_argument,
               {"max_tokens"});
  auto bad_temp = greedy_request("a", {1, 2}, 3);
  bad_temp.sampling.temperature = -1;
  expect_error([&] { eng.add_request(bad_temp); }, ErrorKind::invalid_argument, {"temperature"});
  auto stops = greedy_request("a", {1, 2}, 3);
  stops.stop.stop = {"x"};
  expect_error([&] { eng.add_request(stops); }, ErrorKind::invalid_argument, {"tokenizer"});
  eng.add_request(greedy_request("a", {1, 2}, 3));
  expect_error([&] { eng.add_request(greedy_request("a", {1, 2}, 3)); }, ErrorKind::invalid_argument,
               {"already"});
  auto out = run_all(eng);
  EXPECT_EQ(out["a"].tokens[0].size(), 3u);
  EXPECT_FALSE(eng.has_unfinished());
}

}  // namespace
}  // namespace braid::test
