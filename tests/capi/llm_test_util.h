// What the braid_llm tests of options share: an engine made with some options, a batch of
// requests run to completion on it, its results' token ids and the engine's info.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "braid/braid.h"

namespace braid_capi_test {

// Each request's token ids (requests_json: a braid_llm_generate request list) and the info of an
// engine on `dir` made with `options`; a failing call fails the test and gives nothing.
inline std::pair<std::vector<std::vector<int32_t>>, nlohmann::json> run_llm(
    const std::string& dir, const std::string& options, const char* requests_json) {
  braid_llm* llm = nullptr;
  EXPECT_EQ(braid_llm_create(dir.c_str(), options.c_str(), &llm), BRAID_OK)
      << braid_last_error_message();
  if (!llm) return {};
  char* info = nullptr;
  EXPECT_EQ(braid_llm_info(llm, &info), BRAID_OK);
  const nlohmann::json i = info ? nlohmann::json::parse(info) : nlohmann::json();
  braid_free_string(info);
  char* out = nullptr;
  EXPECT_EQ(braid_llm_generate(llm, requests_json, &out), BRAID_OK) << braid_last_error_message();
  const nlohmann::json r = out ? nlohmann::json::parse(out) : nlohmann::json::array();
  braid_free_string(out);
  braid_llm_destroy(llm);
  std::vector<std::vector<int32_t>> tokens;
  for (const nlohmann::json& request : r)
    tokens.push_back(request["outputs"][0]["token_ids"].get<std::vector<int32_t>>());
  return {tokens, i};
}

}  // namespace braid_capi_test
