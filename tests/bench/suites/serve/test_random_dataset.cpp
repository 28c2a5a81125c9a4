// The random dataset (CPU only, runs in CI): seeded lengths in range, ids from [V/10, V), the
// text forms, and refusals of bad options.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include "bench/suites/serve/random_dataset.h"
#include "braid/error.h"
#include "tokenizer/tokenizer.h"

namespace braid::bench::serve {
namespace {

RandomDatasetOptions options() {
  RandomDatasetOptions o;
  o.num_prompts = 200;
  o.input_len = 100;
  o.output_len = 20;
  o.range_ratio = 0.5;
  o.vocab_size = 1000;
  o.seed = 3;
  return o;
}

TEST(ServeDataset, LengthsAndIdsStayInTheirRanges) {
  const auto prompts = random_dataset(options());
  ASSERT_EQ(prompts.size(), 200u);
  std::set<int> in_lens;
  for (const Prompt& p : prompts) {
    EXPECT_GE(p.input_len, 50);
    EXPECT_LE(p.input_len, 150);
    EXPECT_GE(p.output_len, 10);
    EXPECT_LE(p.output_len, 30);
    EXPECT_EQ(p.ids.size(), static_cast<size_t>(p.input_len));
    EXPECT_TRUE(p.text.empty());
    for (int32_t id : p.ids) {
      ASSERT_GE(id, 100);
      ASSERT_LT(id, 1000);
    }
    in_lens.insert(p.input_len);
  }
  EXPECT_GT(in_lens.size(), 20u);  // the lengths do vary
}

TEST(ServeDataset, RangeRatioZeroGivesExactLengths) {
  RandomDatasetOptions o = options();
  o.range_ratio = 0;
  for (const Prompt& p : random_dataset(o)) {
    EXPECT_EQ(p.input_len, 100);
    EXPECT_EQ(p.output_len, 20);
  }
}

TEST(ServeDataset, TheSameSeedGivesTheSamePrompts) {
  const auto a = random_dataset(options()), b = random_dataset(options());
  RandomDatasetOptions o = options();
  o.seed = 4;
  const auto c = random_dataset(o);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].ids, b[i].ids);
    EXPECT_EQ(a[i].output_len, b[i].output_len);
  }
  EXPECT_NE(a[0].ids, c[0].ids);
}

TEST(ServeDataset, RandomWordsHaveOneWordPerInputToken) {
  RandomDatasetOptions o = options();
  o.form = PromptForm::random_words;
  o.vocab_size = 0;  // unused by words
  for (const Prompt& p : random_dataset(o)) {
    EXPECT_TRUE(p.ids.empty());
    std::istringstream words(p.text);
    int n = 0;
    for (std::string w; words >> w;) ++n;
    EXPECT_EQ(n, p.input_len);
  }
}

TEST(ServeDataset, TokenizerTextIsTheDecodedIds) {
  const auto tok = tokenizer::Tokenizer::from_dir(std::string(BRAID_SOURCE_DIR) +
                                                  "/models/tiny-fortunes");
  RandomDatasetOptions o = options();
  o.form = PromptForm::tokenizer_text;
  o.vocab_size = tok.vocab_size();
  o.num_prompts = 5;
  const auto prompts = random_dataset(o, &tok);
  for (const Prompt& p : prompts) {
    EXPECT_TRUE(p.ids.empty());
    EXPECT_FALSE(p.text.empty());
    // Re-encoded it is about as long as asked (merges across the random pieces may shorten it).
    const auto ids = tok.encode(p.text, /*add_special_tokens=*/false);
    EXPECT_GT(static_cast<int>(ids.size()), p.input_len / 3);
    EXPECT_LE(static_cast<int>(ids.size()), p.input_len * 3);
  }
  EXPECT_THROW(random_dataset(o, nullptr), Error);  // the form needs a tokenizer
}

TEST(ServeDataset, BadOptionsAreRefused) {
  auto with = [](auto change) {
    RandomDatasetOptions o = options();
    change(o);
    return o;
  };
  EXPECT_THROW(random_dataset(with([](auto& o) { o.num_prompts = 0; })), Error);
  EXPECT_THROW(random_dataset(with([](auto& o) { o.input_len = 0; })), Error);
  EXPECT_THROW(random_dataset(with([](auto& o) { o.output_len = -1; })), Error);
  EXPECT_THROW(random_dataset(with([](auto& o) { o.range_ratio = 1.0; })), Error);
  EXPECT_THROW(random_dataset(with([](auto& o) { o.vocab_size = 1; })), Error);
}

}  // namespace
}  // namespace braid::bench::serve
