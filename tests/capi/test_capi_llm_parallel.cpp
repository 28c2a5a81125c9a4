// braid_llm_create's "tensor_parallel_size" and "enable_expert_parallel" options (vLLM's
// spellings; --tensor-parallel and --expert-parallel on the command line): on the CPU the ranks
// are threads, and the split engine must give the unsplit engine's greedy tokens; braid_llm_info
// says what runs; bad values and models that do not split are refused naming the key or field.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "engine/tiny_model.h"
#include "llm_test_util.h"

namespace {

using json = nlohmann::json;

const std::filesystem::path kGoldens =
    std::filesystem::path(BRAID_SOURCE_DIR) / "tests/data/goldens";

// Greedy token ids of two requests batched together, and the engine's info.
std::pair<std::vector<std::vector<int32_t>>, json> run(const std::string& dir,
                                                       const std::string& options) {
  return braid_capi_test::run_llm(dir, options, R"([
      {"prompt_token_ids": [5, 9, 17], "temperature": 0, "max_tokens": 6, "ignore_eos": true},
      {"prompt_token_ids": [31, 4, 8, 12, 60, 7], "temperature": 0, "max_tokens": 6,
       "ignore_eos": true}])");
}

TEST(CApiLlmParallel, SplitRanksGiveTheUnsplitTokens) {
  braid::test::TinyModelSpec s;  // 4 heads over 2 KV heads: split at 2, replicated at 4
  braid::test::TinyModelDir dir(s);
  const auto [whole, wi] = run(dir.path(), R"({"device": "cpu", "max_model_len": 64})");
  EXPECT_EQ(wi["tensor_parallel_size"], 1);
  EXPECT_EQ(wi["expert_parallel"], false);
  ASSERT_EQ(whole.size(), 2u);
  for (int n : {2, 4}) {
    SCOPED_TRACE("tensor_parallel_size " + std::to_string(n));
    const auto [split, si] = run(dir.path(), R"({"device": "cpu", "max_model_len": 64,
        "tensor_parallel_size": )" + std::to_string(n) + "}");
    EXPECT_EQ(split, whole);
    EXPECT_EQ(si["tensor_parallel_size"], n);
  }
  // Expert parallelism on a MoE model: whole experts per rank, the same tokens.
  const std::string moe = (kGoldens / "qwen3_moe").string();
  const auto [moe_whole, mwi] = run(moe, R"({"device": "cpu", "max_model_len": 64})");
  const auto [moe_split, msi] = run(moe, R"({"device": "cpu", "max_model_len": 64,
      "tensor_parallel_size": 2, "enable_expert_parallel": true})");
  EXPECT_EQ(moe_split, moe_whole);
  EXPECT_EQ(msi["tensor_parallel_size"], 2);
  EXPECT_EQ(msi["expert_parallel"], true);
}

TEST(CApiLlmParallel, BadValuesAndModelsThatDoNotSplitAreNamed) {
  braid::test::TinyModelSpec s;
  braid::test::TinyModelDir dense(s);
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {R"({"device": "cpu", "tensor_parallel_size": 0})", {"options.tensor_parallel_size"}},
      {R"({"device": "cpu", "tensor_parallel_size": 65})", {"options.tensor_parallel_size"}},
      {R"({"device": "cpu", "tensor_parallel_size": "2"})", {"options.tensor_parallel_size"}},
      {R"({"device": "cpu", "enable_expert_parallel": "yes"})", {"options.enable_expert_parallel"}},
      // 4 heads do not split over 3 ranks; a dense model has no experts to place.
      {R"({"device": "cpu", "tensor_parallel_size": 3})", {"num_attention_heads 4", "3"}},
      {R"({"device": "cpu", "tensor_parallel_size": 2, "enable_expert_parallel": true})",
       {"num_experts 0"}}};
  for (const auto& [options, words] : cases) {
    SCOPED_TRACE(options);
    braid_llm* llm = nullptr;
    EXPECT_EQ(braid_llm_create(dense.path().c_str(), options.c_str(), &llm),
              BRAID_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(llm, nullptr);
    const std::string msg = braid_last_error_message();
    for (const std::string& w : words) EXPECT_NE(msg.find(w), std::string::npos) << msg;
  }
}

}  // namespace
