// --prompt-ids parsing: the ids, and every malformed or out-of-range item refused by name.
#include <gtest/gtest.h>

#include "braid/error.h"
#include "engine/prompt_ids.h"

namespace braid::test {
namespace {

using engine::parse_prompt_ids;

void expect_refused(const std::string& text, const std::string& names) {
  try {
    parse_prompt_ids(text);
    ADD_FAILURE() << "'" << text << "' was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << text;
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
  }
}

TEST(PromptIds, Parses) {
  EXPECT_EQ(parse_prompt_ids("1,2,3"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_prompt_ids("0"), (std::vector<int32_t>{0}));
  EXPECT_EQ(parse_prompt_ids("2147483647"), (std::vector<int32_t>{2147483647}));
  EXPECT_TRUE(parse_prompt_ids("").empty());
}

// Regression (issue 20): 4294967313 = 2^32 + 17 was narrowed to token 17.
TEST(PromptIds, RefusesIdsPastInt32) {
  expect_refused("4294967313", "'4294967313'");
  expect_refused("1,2147483648", "'2147483648'");
  expect_refused("99999999999999999999999", "'99999999999999999999999'");
}

TEST(PromptIds, RefusesNegativeAndMalformed) {
  expect_refused("-1", "'-1'");
  expect_refused("1,,2", "''");
  expect_refused("1,2,", "''");
  expect_refused("1;2", "'1;2'");
  expect_refused("0x10", "'0x10'");
  expect_refused("+5", "'+5'");
  expect_refused(" 5", "' 5'");
  expect_refused("5 ", "'5 '");
}

}  // namespace
}  // namespace braid::test
