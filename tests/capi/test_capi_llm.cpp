// braid_llm_*: offline inference through the C API on the embedded model, on the CPU. Its greedy
// output must be the serving engine's own (and the transformers golden), its seeded sampling
// repeatable, and every bad option, request or NULL pointer a status with a message that names
// what was wrong.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "braid/braid.h"
#include "engine/llm_engine.h"
#include "engine/tiny_model.h"

namespace {

using json = nlohmann::json;

const std::string kFortunes = std::string(BRAID_SOURCE_DIR) + "/models/tiny-fortunes";
// A small KV pool (64 pages = 1024 tokens, two full contexts) keeps start-up cheap.
const char* kCpuOptions = R"({"device": "cpu", "num_kv_pages": 64})";

std::string last_error() { return braid_last_error_message(); }

void expect_message_has(const std::vector<std::string>& fragments) {
  const std::string msg = last_error();
  for (const auto& f : fragments)
    EXPECT_NE(msg.find(f), std::string::npos) << "message \"" << msg << "\" lacks \"" << f << "\"";
}

// Owns a C string the library returned.
struct CString {
  char* s = nullptr;
  ~CString() { braid_free_string(s); }
  std::string str() const { return s ? std::string(s) : std::string(); }
};

json golden_case(int i) {
  std::ifstream f(kFortunes + "/golden.json");
  return json::parse(f)["cases"][i];
}

class CApiLlm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(braid_llm_create(kFortunes.c_str(), kCpuOptions, &llm_), BRAID_OK) << last_error();
  }
  static void TearDownTestSuite() {
    braid_llm_destroy(llm_);
    llm_ = nullptr;
  }

  static json generate(const json& requests) {
    CString out;
    const braid_status st = braid_llm_generate(llm_, requests.dump().c_str(), &out.s);
    EXPECT_EQ(st, BRAID_OK) << last_error();
    return out.s ? json::parse(out.str()) : json();
  }

  // Expects `requests` to fail with `status`, the message holding every fragment, and no output.
  static void expect_generate_error(const std::string& requests, braid_status status,
                                    const std::vector<std::string>& fragments) {
    SCOPED_TRACE(requests);
    char* out = reinterpret_cast<char*>(0x1);  // must come back NULL
    EXPECT_EQ(braid_llm_generate(llm_, requests.c_str(), &out), status) << last_error();
    EXPECT_EQ(out, nullptr);
    expect_message_has(fragments);
  }

  static braid_llm* llm_;
};

braid_llm* CApiLlm::llm_ = nullptr;

// The serving engine driven directly: greedy until end-of-text, as the golden was made.
struct Direct {
  std::vector<int32_t> tokens;
  std::string text;
};
Direct engine_greedy(const std::vector<int32_t>& prompt, int max_tokens) {
  braid::engine::EngineConfig cfg;
  cfg.num_kv_pages = 64;
  braid::engine::LLMEngine eng(kFortunes, cfg);
  braid::engine::Request r;
  r.id = "direct";
  r.prompt = prompt;
  r.stop.max_tokens = max_tokens;
  eng.add_request(r);
  Direct d;
  while (eng.has_unfinished())
    for (const auto& o : eng.step()) {
      d.tokens.insert(d.tokens.end(), o.tokens.begin(), o.tokens.end());
      d.text += o.text;
    }
  return d;
}

TEST_F(CApiLlm, GreedyTextPromptEqualsTheEngineAndTheGolden) {
  const json g = golden_case(0);
  const json out = generate(json::array(
      {{{"prompt", g["prompt"]}, {"temperature", 0}, {"max_tokens", 48}}}));
  ASSERT_EQ(out.size(), 1u);
  const json& r = out[0];
  EXPECT_EQ(r["prompt"], g["prompt"]);
  EXPECT_EQ(r["prompt_token_ids"], g["prompt_ids"]);
  ASSERT_EQ(r["outputs"].size(), 1u);
  const json& o = r["outputs"][0];
  EXPECT_EQ(o["index"], 0);
  EXPECT_EQ(o["token_ids"], g["tokens"]);
  EXPECT_EQ(o["text"], g["text"]);
  EXPECT_EQ(o["finish_reason"], "stop");
  EXPECT_TRUE(o["stop_reason"].is_null()) << "end-of-text has no stop reason";
  EXPECT_TRUE(o["logprobs"].is_null());
  EXPECT_TRUE(o["cumulative_logprob"].is_null());

  const Direct d = engine_greedy(g["prompt_ids"].get<std::vector<int32_t>>(), 48);
  EXPECT_EQ(o["token_ids"].get<std::vector<int32_t>>(), d.tokens);
  EXPECT_EQ(o["text"].get<std::string>(), d.text);
}

TEST_F(CApiLlm, ABatchGivesEachRequestItsOwnResultInInputOrder) {
  const json g1 = golden_case(1), g2 = golden_case(2);
  const json a = {{"prompt", g1["prompt"]}, {"temperature", 0}, {"max_tokens", 20}};
  const json b = {{"prompt_token_ids", g2["prompt_ids"]}, {"temperature", 0}, {"max_tokens", 10},
                  {"ignore_eos", true}};
  const json c = {{"prompt", "A fool"}, {"temperature", 0.0}, {"max_tokens", 5}};
  const json batch = generate(json::array({a, b, c}));
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0]["outputs"], generate(json::array({a}))[0]["outputs"]);
  EXPECT_EQ(batch[1]["outputs"], generate(json::array({b}))[0]["outputs"]);
  EXPECT_EQ(batch[2]["outputs"], generate(json::array({c}))[0]["outputs"]);
  EXPECT_EQ(batch[0]["prompt_token_ids"], g1["prompt_ids"]);
  EXPECT_TRUE(batch[1]["prompt"].is_null()) << "a token-id prompt has no text";
  EXPECT_EQ(batch[1]["outputs"][0]["token_ids"].size(), 10u);
  EXPECT_EQ(batch[1]["outputs"][0]["finish_reason"], "length");
  EXPECT_EQ(batch[2]["outputs"][0]["token_ids"], json(std::vector<int>(
      g1["tokens"].begin(), g1["tokens"].begin() + 5)));
  EXPECT_EQ(generate(json::array()), json::array()) << "no requests, no results";
}

TEST_F(CApiLlm, NChoicesWithASeedRepeatAndDiffer) {
  const json r = {{"prompt", "Love"}, {"n", 2}, {"temperature", 1.0}, {"top_p", 0.95},
                  {"seed", 1234}, {"max_tokens", 16}, {"ignore_eos", true}};
  const json first = generate(json::array({r}));
  const json again = generate(json::array({r}));
  ASSERT_EQ(first[0]["outputs"].size(), 2u);
  EXPECT_EQ(first[0]["outputs"], again[0]["outputs"]);
  EXPECT_EQ(first[0]["outputs"][0]["index"], 0);
  EXPECT_EQ(first[0]["outputs"][1]["index"], 1);
  EXPECT_NE(first[0]["outputs"][0]["token_ids"], first[0]["outputs"][1]["token_ids"]);
  json other = r;
  other["seed"] = 99;
  EXPECT_NE(generate(json::array({other}))[0]["outputs"], first[0]["outputs"]);
}

TEST(CApiLlmSeed, TheOptionsSeedMakesUnseededRequestsRepeat) {
  const char* options = R"({"device": "cpu", "num_kv_pages": 40, "seed": 7})";
  const std::string req = R"([{"prompt": "Love", "max_tokens": 12, "ignore_eos": true}])";
  std::string runs[2];
  for (std::string& run : runs) {
    braid_llm* llm = nullptr;
    ASSERT_EQ(braid_llm_create(kFortunes.c_str(), options, &llm), BRAID_OK) << last_error();
    CString out;
    EXPECT_EQ(braid_llm_generate(llm, req.c_str(), &out.s), BRAID_OK) << last_error();
    run = out.str();
    braid_llm_destroy(llm);
  }
  EXPECT_FALSE(runs[0].empty());
  EXPECT_EQ(runs[0], runs[1]);
}

TEST_F(CApiLlm, StopStringsAndStopTokens) {
  const json base = {{"prompt", "The meaning of life is"}, {"temperature", 0}, {"max_tokens", 40}};
  const json free = generate(json::array({base}))[0]["outputs"][0];
  const std::string text = free["text"];
  ASSERT_GE(text.size(), 10u);
  const std::string stop = text.substr(text.size() / 2, 3);

  json s = base;
  s["stop"] = json::array({"zzzz-never", stop});
  const json stopped = generate(json::array({s}))[0]["outputs"][0];
  EXPECT_EQ(stopped["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(stopped["finish_reason"], "stop");
  EXPECT_EQ(stopped["stop_reason"], stop);

  s["stop"] = stop;  // a single string works too
  s["include_stop_str_in_output"] = true;
  EXPECT_EQ(generate(json::array({s}))[0]["outputs"][0]["text"],
            text.substr(0, text.find(stop) + stop.size()));

  json t = base;
  const int32_t third = free["token_ids"][2];
  t["stop_token_ids"] = {third};
  const json by_token = generate(json::array({t}))[0]["outputs"][0];
  EXPECT_EQ(by_token["token_ids"].size(), 3u);
  EXPECT_EQ(by_token["finish_reason"], "stop");
  EXPECT_EQ(by_token["stop_reason"], third) << "a stop token is reported as its id (a number)";
}

TEST_F(CApiLlm, LogprobsHaveOneEntryPerTokenAndTheirSum) {
  const json out = generate(json::array({{{"prompt", "A fool"}, {"temperature", 0},
                                          {"max_tokens", 6}, {"logprobs", 3},
                                          {"ignore_eos", true}}}))[0]["outputs"][0];
  ASSERT_EQ(out["logprobs"].size(), 6u);
  double sum = 0;
  for (size_t i = 0; i < 6; ++i) {
    const json& lp = out["logprobs"][i];
    EXPECT_EQ(lp["token_id"], out["token_ids"][i]);
    ASSERT_EQ(lp["top"].size(), 3u);
    EXPECT_EQ(lp["top"][0]["token_id"], lp["token_id"]) << "greedy takes the most likely token";
    EXPECT_LE(lp["logprob"].get<double>(), 0.0);
    EXPECT_TRUE(lp["top"][0]["decoded_token"].is_string());
    EXPECT_EQ(lp["decoded_token"], lp["top"][0]["decoded_token"]);
    sum += lp["logprob"].get<double>();
  }
  EXPECT_NEAR(out["cumulative_logprob"].get<double>(), sum, 1e-4);
}

TEST_F(CApiLlm, BadRequestsNameTheFieldAndRunNothing) {
  const auto INVALID = BRAID_ERR_INVALID_ARGUMENT;
  expect_generate_error("[{\"prompt\": ", INVALID, {"braid_llm_generate", "requests_json", "not valid JSON"});
  expect_generate_error("{\"prompt\": \"x\"}", INVALID, {"must be a JSON list"});
  expect_generate_error(R"([{"prompt": "x", "max_tokens": 1e400}])", INVALID, {"not valid JSON", "1e400"});
  // Nested a million deep: parsed, reported and freed without deep recursion.
  expect_generate_error("[" + std::string(1000000, '[') + std::string(1000000, ']') + "]", INVALID,
                        {"requests[0] must be a JSON object", "a list of 1 item"});
  expect_generate_error("[3]", INVALID, {"requests[0]", "JSON object"});
  expect_generate_error(R"([{"prompt": "x"}, {"prompt": "y", "temprature": 0}])", INVALID,
                        {"requests[1]", "'temprature'", "known keys", "temperature"});
  expect_generate_error(R"([{"prompt": "x", "temperature": "hot"}])", INVALID,
                        {"requests[0].temperature", "number", "\"hot\""});
  expect_generate_error(R"([{"prompt": "x", "temperature": -1}])", INVALID,
                        {"requests[0]", "temperature", ">= 0"});
  expect_generate_error(R"([{"prompt": "x", "max_tokens": 0}])", INVALID, {"requests[0].max_tokens"});
  expect_generate_error(R"([{"prompt": "x", "n": 0}])", INVALID, {"requests[0].n"});
  expect_generate_error(R"([{"prompt": "x", "stop": [1]}])", INVALID, {"requests[0].stop"});
  expect_generate_error(R"([{"prompt": "x", "ignore_eos": 1}])", INVALID, {"requests[0].ignore_eos", "true or false"});
  expect_generate_error(R"([{"temperature": 0}])", INVALID, {"requests[0]", "prompt_token_ids"});
  expect_generate_error(R"([{"prompt": "x", "prompt_token_ids": [1]}])", INVALID, {"both"});
  expect_generate_error(R"([{"prompt": [1, 2]}])", INVALID, {"requests[0].prompt", "must be a string"});
  expect_generate_error(R"([{"prompt_token_ids": [1, "a"]}])", INVALID, {"prompt_token_ids[1]"});
  expect_generate_error(R"([{"prompt_token_ids": [1, 5000]}])", INVALID, {"requests[0]", "5000", "vocabulary"});
  expect_generate_error(R"([{"prompt_token_ids": []}])", INVALID, {"requests[0]", "empty"});
  expect_generate_error(R"([{"prompt": ""}])", INVALID, {"requests[0]", "empty"});
  expect_generate_error(R"([{"prompt": "x", "logprobs": 21}])", INVALID, {"requests[0].logprobs"});
  // Too long for the 512-token context: by itself, and with max_tokens.
  json long_prompt = {{"prompt_token_ids", std::vector<int>(512, 300)}};
  expect_generate_error(json::array({long_prompt}).dump(), INVALID, {"requests[0]", "512 tokens", "context"});
  json long_total = {{"prompt_token_ids", std::vector<int>(500, 300)}, {"max_tokens", 20}};
  expect_generate_error(json::array({json{{"prompt", "ok"}}, long_total}).dump(), INVALID,
                        {"requests[1]", "500", "520", "512"});
  // After all that the engine is idle and serves the next call.
  EXPECT_EQ(generate(json::array({{{"prompt", "A fool"}, {"temperature", 0}, {"max_tokens", 3}}}))[0]
                ["outputs"][0]["token_ids"].size(), 3u);
}

TEST_F(CApiLlm, MaxTokensNullRunsToTheEndOfTheContext) {
  json r = {{"prompt_token_ids", std::vector<int>(500, 300)}, {"max_tokens", nullptr},
            {"temperature", 0}, {"ignore_eos", true}};
  const json o = generate(json::array({r}))[0]["outputs"][0];
  EXPECT_EQ(o["token_ids"].size(), 12u);
  EXPECT_EQ(o["finish_reason"], "length");
}

TEST_F(CApiLlm, CallsFromSeveralThreadsAreSerialised) {
  const std::string req = R"([{"prompt": "A fool", "temperature": 0, "max_tokens": 12}])";
  std::string results[3];
  std::vector<std::thread> threads;
  for (std::string& r : results)
    threads.emplace_back([&r, &req] {
      CString out;
      if (braid_llm_generate(llm_, req.c_str(), &out.s) == BRAID_OK) r = out.str();
    });
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(results[0].empty());
  EXPECT_EQ(json::parse(results[0])[0]["outputs"], json::parse(results[1])[0]["outputs"]);
  EXPECT_EQ(json::parse(results[0])[0]["outputs"], json::parse(results[2])[0]["outputs"]);
}

TEST_F(CApiLlm, TokenizeDetokenizeAndInfo) {
  const json g = golden_case(0);
  CString ids;
  ASSERT_EQ(braid_llm_tokenize(llm_, "The meaning of life is", 1, &ids.s), BRAID_OK) << last_error();
  EXPECT_EQ(json::parse(ids.str()), g["prompt_ids"]);
  const std::vector<int32_t> toks = g["tokens"];
  CString text, with_special;
  ASSERT_EQ(braid_llm_detokenize(llm_, toks.data(), static_cast<int64_t>(toks.size()), 1, &text.s), BRAID_OK);
  EXPECT_EQ(text.str(), g["text"]);
  ASSERT_EQ(braid_llm_detokenize(llm_, toks.data(), static_cast<int64_t>(toks.size()), 0, &with_special.s), BRAID_OK);
  EXPECT_EQ(with_special.str(), g["text"].get<std::string>() + "<|endoftext|>");
  CString empty;
  ASSERT_EQ(braid_llm_detokenize(llm_, nullptr, 0, 1, &empty.s), BRAID_OK);
  EXPECT_EQ(empty.str(), "");

  CString info;
  ASSERT_EQ(braid_llm_info(llm_, &info.s), BRAID_OK) << last_error();
  const json i = json::parse(info.str());
  EXPECT_EQ(i["device"], "cpu");
  EXPECT_EQ(i["dtype"], "f32");
  EXPECT_EQ(i["max_model_len"], 512);
  EXPECT_EQ(i["vocab_size"], 4096);
  EXPECT_EQ(i["num_kv_pages"], 64);
  EXPECT_EQ(i["eos_token_ids"], json::array({0}));
  EXPECT_EQ(i["has_tokenizer"], true);
}

TEST(CApiLlmErrors, BadOptionsNameTheKeyAndReturnNoHandle) {
  const char* dir = kFortunes.c_str();
  auto expect_create_error = [&](const char* model_dir, const char* options, braid_status status,
                                 const std::vector<std::string>& fragments) {
    SCOPED_TRACE(options ? options : "(NULL)");
    braid_llm* llm = reinterpret_cast<braid_llm*>(0x1);  // must come back NULL
    EXPECT_EQ(braid_llm_create(model_dir, options, &llm), status) << last_error();
    EXPECT_EQ(llm, nullptr);
    expect_message_has(fragments);
  };
  const auto INVALID = BRAID_ERR_INVALID_ARGUMENT;
  expect_create_error(dir, "{\"device\": ", INVALID, {"braid_llm_create", "options_json", "not valid JSON"});
  expect_create_error(dir, "[1]", INVALID, {"JSON object"});
  expect_create_error(dir, R"({"device": "cpu", "max_seqs": 4, "colour": 1})", INVALID,
                      {"'max_seqs'", "'colour'", "known keys", "max_num_seqs"});
  expect_create_error(dir, R"({"device": "tpu"})", INVALID, {"options.device", "\"tpu\""});
  expect_create_error(dir, R"({"device": 0})", INVALID, {"options.device", "string"});
  expect_create_error(dir, R"({"dtype": "int8"})", INVALID, {"options.dtype", "int8"});
  expect_create_error(dir, R"({"max_model_len": "long"})", INVALID, {"options.max_model_len", "integer"});
  expect_create_error(dir, R"({"max_num_seqs": 0})", INVALID, {"options.max_num_seqs"});
  expect_create_error(dir, R"({"gpu_memory_utilization": 1.5})", INVALID, {"options.gpu_memory_utilization"});
  expect_create_error(dir, R"({"enable_prefix_caching": "yes"})", INVALID, {"options.enable_prefix_caching"});
  expect_create_error(dir, R"({"seed": 1.5})", INVALID, {"options.seed"});
  expect_create_error(dir, R"({"device": "cpu", "max_model_len": 4096})", INVALID,
                      {"max_model_len", "4096", "max_position_embeddings", "512"});
  expect_create_error(dir, R"({"device": "cpu", "num_kv_pages": 4})", INVALID,
                      {"options.num_kv_pages", "64 tokens", "512", "at least 32"});
  if (braid_cuda_device_count() == 0)
    expect_create_error(dir, R"({"device": "cuda"})", BRAID_ERR_UNSUPPORTED, {"options.device", "cuda"});
  expect_create_error(dir, R"({"device": "cuda:7x"})", INVALID, {"options.device"});
  expect_create_error("/nonexistent/model", kCpuOptions, BRAID_ERR_IO,
                      {"braid_llm_create", "/nonexistent/model"});
  expect_create_error(nullptr, kCpuOptions, INVALID, {"model_dir"});
  expect_create_error("", kCpuOptions, INVALID, {"model_dir"});
}

TEST(CApiLlmErrors, NullPointersAreErrorsNotCrashes) {
  EXPECT_EQ(braid_llm_create(kFortunes.c_str(), kCpuOptions, nullptr), BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"out", "NULL"});
  char* out = nullptr;
  EXPECT_EQ(braid_llm_generate(nullptr, "[]", &out), BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"braid_llm_generate", "llm is NULL"});
  EXPECT_EQ(braid_llm_tokenize(nullptr, "x", 1, &out), BRAID_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(braid_llm_detokenize(nullptr, nullptr, 0, 1, &out), BRAID_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(braid_llm_info(nullptr, &out), BRAID_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
  braid_llm_destroy(nullptr);
  braid_free_string(nullptr);

  braid_llm* llm = nullptr;
  if (braid_cuda_device_count() == 0) {  // the defaults would take 90% of a GPU's memory
    braid::test::TinyModelDir tiny(braid::test::TinyModelSpec{});
    EXPECT_EQ(braid_llm_create(tiny.path().c_str(), nullptr, &llm), BRAID_OK) << last_error();
    braid_llm_destroy(llm);
    llm = nullptr;
    EXPECT_EQ(braid_llm_create(tiny.path().c_str(), " ", &llm), BRAID_OK) << last_error();
    braid_llm_destroy(llm);
    llm = nullptr;
  }
  ASSERT_EQ(braid_llm_create(kFortunes.c_str(), kCpuOptions, &llm), BRAID_OK) << last_error();
  EXPECT_EQ(braid_llm_generate(llm, nullptr, &out), BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"requests_json is NULL"});
  EXPECT_EQ(braid_llm_generate(llm, "[]", nullptr), BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"results_json is NULL"});
  EXPECT_EQ(braid_llm_tokenize(llm, nullptr, 1, &out), BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"text is NULL"});
  EXPECT_EQ(braid_llm_tokenize(llm, "x", 1, nullptr), BRAID_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(braid_llm_detokenize(llm, nullptr, 2, 1, &out), BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"ids is NULL"});
  const int32_t bad[] = {5, -3};
  EXPECT_EQ(braid_llm_detokenize(llm, bad, 2, 1, &out), BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"ids[1]", "-3"});
  EXPECT_EQ(braid_llm_detokenize(llm, bad, -1, 1, &out), BRAID_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(braid_llm_tokenize(llm, "\xff\xfe", 1, &out), BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"braid_llm_tokenize", "UTF-8"});
  EXPECT_EQ(braid_llm_info(llm, nullptr), BRAID_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
  braid_llm_destroy(llm);
}

TEST(CApiLlmErrors, AModelWithoutATokenizerTakesTokenIdsOnly) {
  braid::test::TinyModelDir dir(braid::test::TinyModelSpec{});
  braid_llm* llm = nullptr;
  ASSERT_EQ(braid_llm_create(dir.path().c_str(), R"({"device": "cpu", "max_model_len": 64})", &llm),
            BRAID_OK) << last_error();
  char* out = nullptr;
  EXPECT_EQ(braid_llm_generate(llm, R"([{"prompt": "hello"}])", &out), BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"requests[0].prompt", "tokenizer.json", "prompt_token_ids"});
  EXPECT_EQ(braid_llm_generate(llm, R"([{"prompt_token_ids": [5, 6], "stop": "x"}])", &out),
            BRAID_ERR_INVALID_ARGUMENT);
  expect_message_has({"requests[0].stop", "tokenizer"});
  EXPECT_EQ(braid_llm_tokenize(llm, "x", 1, &out), BRAID_ERR_UNSUPPORTED);
  expect_message_has({"tokenizer.json"});
  CString res;
  ASSERT_EQ(braid_llm_generate(llm, R"([{"prompt_token_ids": [5, 6, 7], "temperature": 0,
                                        "max_tokens": 4, "ignore_eos": true, "logprobs": 1}])",
                               &res.s), BRAID_OK) << last_error();
  const json o = json::parse(res.str())[0]["outputs"][0];
  EXPECT_EQ(o["token_ids"].size(), 4u);
  EXPECT_EQ(o["text"], "") << "no tokenizer, no text";
  EXPECT_TRUE(o["logprobs"][0]["top"][0]["decoded_token"].is_null());
  braid_llm_destroy(llm);
}

}  // namespace
