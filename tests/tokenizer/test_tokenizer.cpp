// The tokenizer on small synthetic tokenizer.json files: BPE merge order, both merge spellings,
// ignore_merges, added tokens and their options, templates, NFC, UTF-8 handling, bad input.
// (tests/tokenizer/test_tokenizer_goldens.cpp compares the real Qwen3 / Llama-3 files with
// Hugging Face.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/error.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace braid::test {
namespace {

using nlohmann::json;
using tokenizer::StreamDecoder;
using tokenizer::Tokenizer;
using Ids = std::vector<int32_t>;

// A byte-level BPE over a tiny alphabet. "Ġ" is the byte-level symbol of a space, "Ã" and "©"
// those of the two bytes of "é" (C3 A9).
json base_tokenizer() {
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab",
         {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"Ġ", 6}, {"d", 7},
          {"abcd", 8}, {"z", 9}, {"Ã", 16}, {"©", 17}, {"Ã©", 18}, {"e", 19}}},
        {"merges", {"b c", "a b", "a bc", "Ã ©"}}}}};
}

json added_token(int id, const std::string& content, bool special) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false}, {"special", special}};
}

// Writes JSON text into a fresh temporary folder, removed when the test ends.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("braid_tokenizer_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string file = (path_ / name).string();
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

Tokenizer load(const json& j) {
  TempDir dir;
  return Tokenizer::from_file(dir.write("tokenizer.json", j.dump()));
}

TEST(Tokenizer, MergesApplyInRankOrder) {
  // "b c" outranks "a b", so "abc" merges b+c first, then a+bc.
  const Tokenizer tok = load(base_tokenizer());
  EXPECT_EQ(tok.encode("abc"), (Ids{5}));
  EXPECT_EQ(tok.encode("abc abc"), (Ids{5, 6, 5}));  // " abc" is a pre-token: Ġ has no merge

  // With "a b" first, "ab" forms and nothing merges "ab" with "c".
  json j = base_tokenizer();
  j["model"]["merges"] = {"a b", "b c", "a bc", "Ã ©"};
  EXPECT_EQ(load(j).encode("abc"), (Ids{3, 2}));
}

TEST(Tokenizer, MergesInPairFormMatchStringForm) {
  json j = base_tokenizer();
  j["model"]["merges"] = json::array({{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"Ã", "©"}});
  const Tokenizer pairs = load(j);
  const Tokenizer strings = load(base_tokenizer());
  for (const char* text : {"abc", "ab", "bcab", "abcabc cab", "é"})
    EXPECT_EQ(pairs.encode(text), strings.encode(text)) << text;
  EXPECT_EQ(pairs.encode("bcab"), (Ids{4, 3}));
}

TEST(Tokenizer, IgnoreMergesEmitsWholeVocabWords) {
  // "abcd" is in the vocab but no merge builds it.
  json j = base_tokenizer();
  EXPECT_EQ(load(j).encode("abcd"), (Ids{5, 7}));
  j["model"]["ignore_merges"] = true;
  const Tokenizer tok = load(j);
  EXPECT_EQ(tok.encode("abcd"), (Ids{8}));
  EXPECT_EQ(tok.encode("abc"), (Ids{5}));  // a vocab word anyway
  EXPECT_EQ(tok.encode("cab"), (Ids{2, 3}));  // not in the vocab: merged as usual
}

TEST(Tokenizer, BytesWithoutSymbolAreDroppedWithoutUnk) {
  // As in Hugging Face: no unk_token, so "x" (not in the vocab) produces nothing, and the
  // symbols on either side become neighbours that merge.
  const Tokenizer tok = load(base_tokenizer());
  EXPECT_EQ(tok.encode("axb"), (Ids{3}));
  EXPECT_EQ(tok.encode("xx"), (Ids{}));
}

TEST(Tokenizer, AddedTokensSplitBeforePreTokenizing) {
  json j = base_tokenizer();
  j["added_tokens"] = {added_token(20, "<s>", true), added_token(21, "<s><s>", true),
                       added_token(22, "c<t>", false)};
  const Tokenizer tok = load(j);
  EXPECT_EQ(tok.encode("ab<s>c"), (Ids{3, 20, 2}));
  EXPECT_EQ(tok.encode("<s><s><s>"), (Ids{21, 20}));  // longest match first
  EXPECT_EQ(tok.encode("abc<t>"), (Ids{3, 22}));     // found before BPE could take the "c"
  EXPECT_EQ(tok.encode("<s"), (Ids{}));              // '<' and 's' have no symbol: dropped
  EXPECT_EQ(tok.token_to_id("<s>"), 20);
  EXPECT_EQ(tok.token_to_id("abc"), 5);
  EXPECT_EQ(tok.token_to_id("nope"), std::nullopt);
  EXPECT_EQ(tok.id_to_token(21), "<s><s>");
  EXPECT_EQ(tok.id_to_token(1000), "");
  EXPECT_TRUE(tok.is_special(20));
  EXPECT_FALSE(tok.is_special(22));
  EXPECT_FALSE(tok.is_special(5));
  EXPECT_EQ(tok.vocab_size(), 23);

  EXPECT_EQ(tok.decode({3, 20, 2}), "ab<s>c");
  EXPECT_EQ(tok.decode({3, 20, 22}, /*skip_special_tokens=*/true), "abc<t>");
}

TEST(Tokenizer, AddedTokenStripAndSingleWordOptions) {
  json j = base_tokenizer();
  json m = added_token(30, "<m>", true);
  m["lstrip"] = true;
  m["rstrip"] = true;
  json w = added_token(31, "zz", false);
  w["single_word"] = true;
  j["added_tokens"] = {m, w};
  const Tokenizer tok = load(j);
  EXPECT_EQ(tok.encode("a  <m>  b"), (Ids{0, 30, 1}));  // the spaces go with the token
  EXPECT_EQ(tok.encode("a zz b"), (Ids{0, 6, 31, 6, 1}));
  EXPECT_EQ(tok.encode("azz b"), (Ids{0, 9, 9, 6, 1}));  // inside a word: not matched
}

TEST(Tokenizer, NormalizedAddedTokensMatchAfterNfc) {
  json j = base_tokenizer();
  j["normalizer"] = {{"type", "NFC"}};
  json t = added_token(40, "\xC3\xA9!", false);  // "é!" written precomposed
  t["normalized"] = true;
  j["added_tokens"] = json::array({t});  // not {t}: clang reads that as a copy of t
  const Tokenizer tok = load(j);
  EXPECT_EQ(tok.encode("e\xCC\x81!"), (Ids{40}));  // e + combining acute composes to é
}

TEST(Tokenizer, NfcNormalizerComposes) {
  json j = base_tokenizer();
  const Tokenizer raw = load(j);
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  const Tokenizer composed = load(j);
  EXPECT_EQ(composed.encode("e\xCC\x81"), (Ids{18}));  // é = C3 A9 = "Ã©"
  EXPECT_EQ(composed.decode({18}), "\xC3\xA9");
  EXPECT_EQ(raw.encode("e\xCC\x81"), (Ids{19}));  // CC 81 have no symbol here: dropped
}

TEST(Tokenizer, TemplateProcessingAddsTokensOnRequest) {
  json j = base_tokenizer();
  j["added_tokens"] = json::array({added_token(20, "<s>", true)});
  j["post_processor"] = json::parse(R"({
    "type": "Sequence",
    "processors": [
      {"type": "ByteLevel"},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [],
       "special_tokens": {"<s>": {"id": "<s>", "ids": [20], "tokens": ["<s>"]}}}
    ]})");
  const Tokenizer tok = load(j);
  EXPECT_EQ(tok.encode("ab"), (Ids{20, 3}));
  EXPECT_EQ(tok.encode("ab", /*add_special_tokens=*/false), (Ids{3}));
  EXPECT_EQ(tok.encode(""), (Ids{20}));
}

TEST(Tokenizer, SplitPreTokenizerIsolatesMatches) {
  // Qwen/Llama-3 shape: a Split regex, then ByteLevel without its own regex.
  json j = base_tokenizer();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "b"}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  const Tokenizer tok = load(j);
  EXPECT_EQ(tok.encode("abc"), (Ids{0, 1, 2}));  // "a" | "b" | "c": no merge crosses a split
  EXPECT_EQ(tok.encode("ac ac"), (Ids{0, 2, 6, 0, 2}));  // no regex split at spaces
}

TEST(Tokenizer, ByteLevelAddPrefixSpace) {
  json j = base_tokenizer();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  const Tokenizer tok = load(j);
  EXPECT_EQ(tok.encode("abc"), (Ids{6, 5}));
  EXPECT_EQ(tok.encode(" abc"), (Ids{6, 5}));
}

TEST(Tokenizer, EncodeRejectsInvalidUtf8) {
  const Tokenizer tok = load(base_tokenizer());
  expect_error([&] { tok.encode("ab\xC3"); }, ErrorKind::invalid_argument,
               {"tokenizer: encode", "UTF-8", "offset 2"});
  expect_error([&] { tok.encode("\xED\xA0\x80"); }, ErrorKind::invalid_argument, {"offset 0"});
}

TEST(Tokenizer, DecodeReplacesIllFormedBytesLikeHuggingFace) {
  const Tokenizer tok = load(base_tokenizer());
  EXPECT_EQ(tok.decode({16, 17}), "\xC3\xA9");
  EXPECT_EQ(tok.decode({17}), "\xEF\xBF\xBD");        // a lone continuation byte
  EXPECT_EQ(tok.decode({16}), "\xEF\xBF\xBD");        // a cut-off sequence at the end
  EXPECT_EQ(tok.decode({16, 0}), "\xEF\xBF\xBD" "a");  // interrupted by another character
  EXPECT_EQ(tok.decode({0, 999, -1, 1}), "ab");       // unknown ids decode to nothing
}

TEST(Utf8, LossyConversionReplacesMaximalSubparts) {
  // One U+FFFD per maximal ill-formed subpart (Unicode §3.9; what Rust's from_utf8_lossy does).
  const std::string r = "\xEF\xBF\xBD";
  auto lossy = [](std::string_view s) {
    std::string out;
    tokenizer::utf8_append_lossy(s, out, false);
    return out;
  };
  EXPECT_EQ(lossy("a\xF0\x9F\x98"), "a" + r);          // cut-off 4-byte sequence: one
  EXPECT_EQ(lossy("\xE0\x80\xBF"), r + r + r);         // E0 needs A0..BF next: three
  EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);         // a surrogate: three
  EXPECT_EQ(lossy("\xC0\xAF"), r + r);                 // overlong: two
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), r + r + r + r); // past U+10FFFF: four
  EXPECT_EQ(lossy("\xE2\x82x"), r + "x");              // truncated then ASCII: one
  EXPECT_EQ(lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");

  std::string out;
  EXPECT_EQ(tokenizer::utf8_append_lossy("a\xF0\x9F\x98", out, /*hold_incomplete=*/true), 3u);
  EXPECT_EQ(out, "a");
}

TEST(StreamDecoder, HoldsBackIncompleteCharacters) {
  const Tokenizer tok = load(base_tokenizer());
  StreamDecoder s(tok);
  EXPECT_EQ(s.push(0), "a");
  EXPECT_EQ(s.push(16), "");  // first byte of é
  EXPECT_EQ(s.push(17), "\xC3\xA9");
  EXPECT_EQ(s.push(17), "\xEF\xBF\xBD");  // cannot start a character: replaced at once
  EXPECT_EQ(s.push(16), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");  // never completed
  EXPECT_EQ(s.finish(), "");
}

TEST(StreamDecoder, SkipsSpecialTokensOnRequest) {
  json j = base_tokenizer();
  j["added_tokens"] = json::array({added_token(20, "<s>", true)});
  const Tokenizer tok = load(j);
  StreamDecoder keep(tok), skip(tok, /*skip_special_tokens=*/true);
  std::string kept, skipped;
  for (int32_t id : {20, 16, 20, 17, 0}) {
    kept += keep.push(id);
    skipped += skip.push(id);
  }
  kept += keep.finish();
  skipped += skip.finish();
  EXPECT_EQ(kept, tok.decode({20, 16, 20, 17, 0}));
  EXPECT_EQ(skipped, "\xC3\xA9" "a");
  EXPECT_EQ(skipped, tok.decode({20, 16, 20, 17, 0}, true));
}

// ---- Bad input ----

TEST(TokenizerBadInput, MissingFile) {
  expect_error([] { Tokenizer::from_file("/nonexistent/braid/tokenizer.json"); }, ErrorKind::io,
               {"/nonexistent/braid/tokenizer.json", "cannot open"});
  TempDir dir;
  expect_error([&] { Tokenizer::from_dir(dir.path()); }, ErrorKind::io,
               {dir.path() + "/tokenizer.json", "cannot open"});
}

TEST(TokenizerBadInput, BrokenJson) {
  TempDir dir;
  const std::string truncated = base_tokenizer().dump().substr(0, 200);
  const std::string file = dir.write("tokenizer.json", truncated);
  expect_error([&] { Tokenizer::from_file(file); }, ErrorKind::io, {file, "not valid JSON"});
  const std::string array = dir.write("array.json", "[1, 2]");
  expect_error([&] { Tokenizer::from_file(array); }, ErrorKind::io, {array, "not an object"});
}

TEST(TokenizerBadInput, NoMerges) {
  json j = base_tokenizer();
  j["model"]["merges"] = json::array();
  expect_error([&] { load(j); }, ErrorKind::io, {"tokenizer.json", "no merges"});
  j["model"].erase("merges");
  expect_error([&] { load(j); }, ErrorKind::io, {"no merges"});
}

TEST(TokenizerBadInput, BadMerges) {
  json j = base_tokenizer();
  j["model"]["merges"] = {"a q"};
  expect_error([&] { load(j); }, ErrorKind::io, {"merge 0", "missing from the vocab"});
  j["model"]["merges"] = {"b c", "abc"};
  expect_error([&] { load(j); }, ErrorKind::io, {"merge 1", "one space"});
  j["model"]["merges"] = json::array({json::array({"a", "b", "c"})});
  expect_error([&] { load(j); }, ErrorKind::io, {"merge 0"});
}

TEST(TokenizerBadInput, UnsupportedModelType) {
  json j = base_tokenizer();
  j["model"]["type"] = "Unigram";
  expect_error([&] { load(j); }, ErrorKind::unsupported, {"model type 'Unigram'", "BPE"});
  j = base_tokenizer();
  j["model"]["byte_fallback"] = true;
  expect_error([&] { load(j); }, ErrorKind::unsupported, {"byte_fallback"});
  j = base_tokenizer();
  j.erase("model");
  expect_error([&] { load(j); }, ErrorKind::io, {"model"});
}

TEST(TokenizerBadInput, UnsupportedPipelineParts) {
  json j = base_tokenizer();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  expect_error([&] { load(j); }, ErrorKind::unsupported, {"pre-tokenizer type 'Metaspace'"});
  j["pre_tokenizer"] = nullptr;
  expect_error([&] { load(j); }, ErrorKind::unsupported, {"no pre-tokenizer"});
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Isolated"}};
  expect_error([&] { load(j); }, ErrorKind::unsupported, {"no ByteLevel"});
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Removed"}};
  expect_error([&] { load(j); }, ErrorKind::unsupported, {"behavior 'Removed'"});
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}};
  expect_error([&] { load(j); }, ErrorKind::unsupported, {"does not compile"});

  j = base_tokenizer();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_error([&] { load(j); }, ErrorKind::unsupported, {"normalizer type 'NFKC'"});
  j = base_tokenizer();
  j["decoder"] = nullptr;
  expect_error([&] { load(j); }, ErrorKind::unsupported, {"decoder"});
  j = base_tokenizer();
  j["post_processor"] = {{"type", "BertProcessing"}};
  expect_error([&] { load(j); }, ErrorKind::unsupported, {"post-processor type 'BertProcessing'"});
}

// Found by fuzz_tokenizer_load in CI (2026-11-28): an added token's id 1.51618e+25 went through
// get<int32_t>, a float-to-int conversion out of range (UBSan: undefined behaviour). Token ids,
// there and in TemplateProcessing's special tokens, must be integers in [0, 2^31).
TEST(TokenizerBadInput, TokenIdsOutsideInt32AreRefused) {
  for (const json& id : {json(1.51618e25), json(4294967313LL), json(-1), json(2.5), json("7")}) {
    SCOPED_TRACE(id.dump());
    json j = base_tokenizer();
    json t = added_token(20, "<s>", true);
    t["id"] = id;
    j["added_tokens"] = json::array({t});
    expect_error([&] { load(j); }, ErrorKind::io, {"added token", "id"});
    j = base_tokenizer();
    j["added_tokens"] = json::array({added_token(20, "<s>", true)});
    j["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}], "pair": [],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}})");
    j["post_processor"]["special_tokens"]["<s>"]["ids"][0] = id;
    expect_error([&] { load(j); }, ErrorKind::io, {"'<s>'", "id"});
  }
}

// Found by fuzz_tokenizer_load in CI (2026-12-06): an added token's id of about 1.3e9 in a file of
// a few dozen tokens sized the id tables by it (41 GB; ASan: out of memory). Ids far beyond the
// token count are refused, naming the id; a few reserved holes are not.
TEST(TokenizerBadInput, SparseTokenIdsAreRefused) {
  json j = base_tokenizer();
  j["added_tokens"] = json::array({added_token(1300000000, "<s>", true)});
  expect_error([&] { load(j); }, ErrorKind::io, {"token id 1300000000", "densely"});
  j["added_tokens"] = json::array({added_token(500, "<s>", true)});
  EXPECT_NO_THROW(load(j));
}

}  // namespace
}  // namespace braid::test
