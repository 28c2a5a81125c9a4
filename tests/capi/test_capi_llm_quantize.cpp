// braid_llm_create's "quantize" option (--quantize on the command line): "fp8" loads a 16-bit
// checkpoint's linear layers as 128 x 128 block fp8, braid_llm_info says so, and a bad value is
// refused naming the key.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "braid/braid.h"
#include "engine/tiny_model.h"
#include "llm_test_util.h"

namespace {

using json = nlohmann::json;

braid::test::TinyModelSpec spec(const std::string& fp8) {
  braid::test::TinyModelSpec s;  // rows in whole 128-row blocks, as fp8 blocks need
  s.vocab = 96, s.hidden = 256, s.layers = 2, s.heads = 8, s.kv_heads = 4, s.head_dim = 32;
  s.intermediate = 256;
  s.fp8 = fp8;
  return s;
}

// Greedy token ids of one request, and the engine's info.
std::pair<std::vector<int32_t>, json> run(const std::string& dir, const std::string& options) {
  const auto [tokens, info] = braid_capi_test::run_llm(
      dir, options,
      R"([{"prompt_token_ids": [5, 9, 17], "temperature": 0, "max_tokens": 5, "ignore_eos": true}])");
  return {tokens.empty() ? std::vector<int32_t>{} : tokens[0], info};
}

TEST(CApiLlmQuantize, Fp8QuantizesA16BitCheckpointAsTheFp8OneHoldsIt) {
  braid::test::TinyModelDir dense(spec("")), fp8(spec("blocks"));
  const auto [quantized, qi] = run(dense.path(), R"({"device": "cpu", "quantize": "fp8", "max_model_len": 64})");
  const auto [plain, pi] = run(dense.path(), R"({"device": "cpu", "quantize": "none", "max_model_len": 64})");
  const auto [stored, si] = run(fp8.path(), R"({"device": "cpu", "max_model_len": 64})");
  EXPECT_EQ(qi["weights"], "fp8_blocks");
  EXPECT_EQ(pi["weights"], "dense");
  EXPECT_EQ(si["weights"], "fp8_blocks");
  EXPECT_EQ(quantized.size(), 5u);
  EXPECT_EQ(quantized, stored);
}

TEST(CApiLlmQuantize, ABadValueNamesTheKey) {
  braid::test::TinyModelDir dense(spec(""));
  for (const char* options : {R"({"quantize": "int4"})", R"({"quantize": true})"}) {
    SCOPED_TRACE(options);
    braid_llm* llm = nullptr;
    EXPECT_EQ(braid_llm_create(dense.path().c_str(), options, &llm), BRAID_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(llm, nullptr);
    const std::string msg = braid_last_error_message();
    for (const char* f : {"options.quantize", "\"none\" or \"fp8\""})
      EXPECT_NE(msg.find(f), std::string::npos) << msg;
  }
}

}  // namespace
