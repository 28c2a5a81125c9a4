// The tokenizer's pinned Unicode data against what Hugging Face `tokenizers` was measured to do
// (tests/data/tokenizer/hf_unicode_probe.json, by tools/hf_unicode_probe.py): the regex classes
// over every code point, NFC of every code point and of every composition, and the three defects
// of issue 20 as plain regression tests.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/nfc.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace braid::test {
namespace {

using nlohmann::json;
using tokenizer::Regex;

std::string utf8(const std::vector<uint32_t>& cps) {
  std::string s;
  for (uint32_t c : cps) tokenizer::append_utf8(c, s);
  return s;
}

const json& probe() {
  static const json j = [] {
    std::ifstream in(std::string(BRAID_SOURCE_DIR) + "/tests/data/tokenizer/hf_unicode_probe.json");
    return in ? json::parse(in) : json();
  }();
  return j;
}

// The code points `pattern` matches, one character at a time, over all of Unicode.
std::vector<std::pair<uint32_t, uint32_t>> matched_ranges(const std::string& pattern) {
  std::string text;
  std::vector<uint32_t> at;  // code point starting at each byte offset
  for (uint32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    at.resize(text.size() + 1, 0);
    at[text.size()] = c;
    tokenizer::append_utf8(c, text);
  }
  std::vector<std::pair<uint32_t, uint32_t>> out;
  Regex re(pattern, false);
  for (const auto& [begin, end] : re.find_all(text)) {
    // A match of "\p{L}" is one character, but a run is fine too: walk its characters.
    for (size_t p = begin; p < end;) {
      const uint32_t c = at[p];
      if (!out.empty() && out.back().second + 1 == c)
        out.back().second = c;
      else
        out.emplace_back(c, c);
      p += tokenizer::utf8_step(text, p).length;
    }
  }
  return out;
}

TEST(UnicodeClasses, RegexClassesMatchHuggingFaceOnEveryCodePoint) {
  ASSERT_FALSE(probe().is_null()) << "missing tests/data/tokenizer/hf_unicode_probe.json";
  for (const auto& [pattern, ranges] : probe().at("classes").items()) {
    const auto expected = ranges.get<std::vector<std::pair<uint32_t, uint32_t>>>();
    const auto got = matched_ranges(pattern + "+");
    EXPECT_EQ(got, expected) << pattern << ": " << got.size() << " ranges here, " << expected.size()
                             << " in Hugging Face";
  }
}

TEST(UnicodeClasses, CaselessContractionsMatchHuggingFace) {
  ASSERT_FALSE(probe().is_null());
  // "'c" for every c, each followed by a NUL (which no alternative starts or ends with).
  std::string text;
  std::vector<uint32_t> at;  // the c of each "'c" by the offset of its quote
  for (uint32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    at.resize(text.size() + 1, 0);
    at[text.size()] = c;
    text += utf8({'\'', c, 0});
  }
  std::vector<uint32_t> got;
  for (const auto& [begin, end] : Regex("(?i:'s|'t|'m|'d)", false).find_all(text))
    if (text[end] == '\0') got.push_back(at[begin]);
  EXPECT_EQ(got, probe().at("caseless").get<std::vector<uint32_t>>());  // s S t T m M d D and ſ
}

// Defect 1 of issue 20: PCRE2's \s (UCP) takes U+180E MONGOLIAN VOWEL SEPARATOR; Oniguruma's,
// and so Hugging Face's, does not (it is a format character since Unicode 6.3).
TEST(UnicodeClasses, MongolianVowelSeparatorIsNotWhitespace) {
  EXPECT_FALSE(tokenizer::unicode::is_space(0x180E));
  EXPECT_TRUE(Regex("\\s", false).find_all("a\u180Eb").empty());
  EXPECT_EQ(Regex("\\S+", false).find_all("a\u180Eb").size(), 1u);
  EXPECT_EQ(Regex("[^\\s\\p{L}]", false).find_all("\u180E").size(), 1u);
}

// Defect 2: letters, digits and emoji of Unicode 15.0, 15.1 and 16.0 (unassigned in PCRE2 10.42's
// Unicode 14 tables) are in their classes.
TEST(UnicodeClasses, CharactersOfUnicode15And16HaveTheirClasses) {
  const auto whole = [](const char* pattern, const std::string& s) {
    const auto m = Regex(pattern, false).find_all(s);
    return m.size() == 1 && m[0].first == 0 && m[0].second == s.size();
  };
  EXPECT_TRUE(whole("\\p{L}+", utf8({0x11F04, 0x31350})));  // Kawi 15.0, CJK Extension H 15.0
  EXPECT_TRUE(whole("\\p{L}+", utf8({0x2EBF0})));           // CJK Extension I, 15.1
  EXPECT_TRUE(whole("\\p{L}+", utf8({0x1C89, 0x1C8A, 0x10D50})));  // Cyrillic, Garay: 16.0
  EXPECT_TRUE(whole("\\p{N}+", utf8({0x11F50, 0x10D40, 0x1CCF0})));  // digits of 15.0, 16.0
  EXPECT_TRUE(whole("\\p{S}+", utf8({0x1FAE8, 0x1FAE9})));  // emoji of 15.0, 16.0
  EXPECT_FALSE(whole("\\p{S}", utf8({0x1FAEF})));            // still unassigned in 16.0
}

// Defect 3: U+11938 = U+11935 U+11930 is a composition of Unicode 13; Hugging Face's NFC tables
// are Unicode 9.0's, so it leaves the pair alone (and decomposes nothing of 10.0 or later).
TEST(UnicodeNfc, CompositionsNewerThanUnicode9AreLeftAlone) {
  EXPECT_EQ(tokenizer::nfc(utf8({0x11935, 0x11930})), utf8({0x11935, 0x11930}));
  EXPECT_EQ(tokenizer::nfc(utf8({0x11938})), utf8({0x11938}));
  // Wancho's tone mark (Unicode 12, class 230) is a starter to a 9.0 normalizer: no reordering.
  EXPECT_EQ(tokenizer::nfc(utf8({0x20, 0x1E2EC, 0x334})), utf8({0x20, 0x1E2EC, 0x334}));
  // What Unicode 9.0 knows still composes and reorders.
  EXPECT_EQ(tokenizer::nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(tokenizer::nfc("a\u0301\u0316"), "\u00e1\u0316");
  EXPECT_EQ(tokenizer::nfc("\u1100\u1161\u11a8"), "\uac01");  // Hangul L V T
  EXPECT_EQ(tokenizer::nfc("\u212b"), "\u00c5");                // a singleton
}

TEST(UnicodeNfc, EveryCodePointAloneMatchesHuggingFace) {
  ASSERT_FALSE(probe().is_null());
  const json& single = probe().at("nfc_single");
  int bad = 0;
  for (uint32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    const auto it = single.find(std::to_string(c));
    const std::string expected = it == single.end() ? utf8({c}) : utf8(it->get<std::vector<uint32_t>>());
    if (tokenizer::nfc(utf8({c})) != expected && bad++ < 5) ADD_FAILURE() << "U+" << std::hex << c;
  }
  EXPECT_EQ(bad, 0);
}

TEST(UnicodeNfc, CompositionsAndReorderingMatchHuggingFace) {
  ASSERT_FALSE(probe().is_null());
  int bad = 0;
  for (const auto& [key, composite] : probe().at("nfc_pairs").items()) {
    const uint32_t a = std::stoul(key, nullptr, 16), b = std::stoul(key.substr(key.find(' ')), nullptr, 16);
    if (tokenizer::nfc(utf8({a, b})) != utf8({composite.get<uint32_t>()}) && bad++ < 5)
      ADD_FAILURE() << key;
  }
  // Around U+0334 (class 1) and U+0345 (class 240): the classes it knows, for every code point.
  const json& reorder = probe().at("nfc_reorder");
  for (uint32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    const std::vector<uint32_t> inputs[2] = {{0x20, c, 0x334}, {0x20, 0x345, c}};
    std::string expected[2] = {utf8(inputs[0]), utf8(inputs[1])};
    char hex[8];
    std::snprintf(hex, sizeof(hex), "%X", c);
    if (const auto it = reorder.find(hex); it != reorder.end())
      for (const json& changed : *it) expected[changed[0].get<int>()] = utf8(changed[1].get<std::vector<uint32_t>>());
    for (int w = 0; w < 2; ++w)
      if (tokenizer::nfc(utf8(inputs[w])) != expected[w] && bad++ < 5)
        ADD_FAILURE() << "U+" << hex << " in probe " << w;
  }
  EXPECT_EQ(bad, 0);
}

TEST(UnicodeNfc, LongTextIsNormalizedInPieces) {
  // Inert text is returned as it is; a change far into a long text is still found.
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "日本語 text ";
  EXPECT_EQ(tokenizer::nfc(text), text);
  EXPECT_EQ(tokenizer::nfc(text + "e\u0301" + text), text + "\u00e9" + text);
  EXPECT_EQ(tokenizer::nfc("\u00e9\u0301x"), "\u00e9\u0301x");  // é + acute: nothing composes
  EXPECT_EQ(tokenizer::nfc("x\u0301\u0300\u0323y"), "x\u0323\u0301\u0300y");
}

}  // namespace
}  // namespace braid::test
