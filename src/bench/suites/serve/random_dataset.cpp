#include "bench/suites/serve/random_dataset.h"

#include <array>
#include <cmath>
#include <random>
#include <string_view>

#include <fmt/core.h>

#include "braid/error.h"

namespace braid::bench::serve {

namespace {

// Short, frequent words: each is one token (with its leading space) in GPT-2, Llama and Qwen
// style vocabularies, so N words make a prompt of about N tokens.
constexpr std::array<std::string_view, 96> kWords = {
    "the",   "of",    "and",   "to",    "in",    "is",    "you",   "that",  "it",    "he",
    "was",   "for",   "on",    "are",   "as",    "with",  "his",   "they",  "at",    "be",
    "this",  "have",  "from",  "or",    "one",   "had",   "by",    "word",  "but",   "not",
    "what",  "all",   "were",  "we",    "when",  "your",  "can",   "said",  "there", "use",
    "an",    "each",  "which", "she",   "do",    "how",   "their", "if",    "will",  "up",
    "other", "about", "out",   "many",  "then",  "them",  "these", "so",    "some",  "her",
    "would", "make",  "like",  "him",   "into",  "time",  "has",   "look",  "two",   "more",
    "write", "go",    "see",   "number", "no",   "way",   "could", "people", "my",   "than",
    "first", "water", "been",  "call",  "who",   "oil",   "its",   "now",   "find",  "long",
    "down",  "day",   "did",   "get",   "come",  "made"};

// Uniform in [lo, hi] by rejection, the same on every standard library (unlike
// std::uniform_int_distribution), so a seed names the same dataset everywhere.
int64_t uniform_int(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  uint64_t x;
  do x = rng();
  while (x >= limit);
  return lo + static_cast<int64_t>(x % span);
}

void check(bool ok, const char* option, const std::string& expected, const std::string& got) {
  if (!ok)
    throw Error(ErrorKind::invalid_argument,
                fmt::format("serve random dataset: {}: expected {}, got {}", option, expected,
                            got));
}

struct LengthRange {
  int lo, hi;
};

LengthRange length_range(int len, double ratio) {
  const int lo = static_cast<int>(std::floor(len * (1.0 - ratio)));
  const int hi = static_cast<int>(std::ceil(len * (1.0 + ratio)));
  return {std::max(lo, 1), std::max(hi, 1)};
}

bool usable(const tokenizer::Tokenizer& tok, int32_t id) {
  return !tok.is_special(id) && !tok.token_bytes(id).empty();
}

}  // namespace

std::vector<Prompt> random_dataset(const RandomDatasetOptions& opts,
                                   const tokenizer::Tokenizer* tokenizer) {
  check(opts.num_prompts >= 1, "num_prompts", ">= 1", std::to_string(opts.num_prompts));
  check(opts.input_len >= 1, "input_len", ">= 1", std::to_string(opts.input_len));
  check(opts.output_len >= 1, "output_len", ">= 1", std::to_string(opts.output_len));
  check(opts.range_ratio >= 0 && opts.range_ratio < 1, "range_ratio", "a value in [0, 1)",
        fmt::format("{}", opts.range_ratio));
  const bool need_ids = opts.form != PromptForm::random_words;
  if (need_ids)
    check(opts.vocab_size >= 2, "vocab_size", ">= 2", std::to_string(opts.vocab_size));
  if (opts.form == PromptForm::tokenizer_text)
    check(tokenizer != nullptr, "tokenizer", "a tokenizer for text prompts", "none");

  std::mt19937_64 rng(opts.seed);
  const LengthRange in = length_range(opts.input_len, opts.range_ratio);
  const LengthRange out = length_range(opts.output_len, opts.range_ratio);
  const int32_t id_lo = opts.vocab_size / 10, id_hi = opts.vocab_size - 1;
  auto draw_id = [&] {
    // A tokenizer's special tokens would end or restructure the prompt; draw again (bounded, so
    // a range with nothing usable fails instead of spinning).
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const auto id = static_cast<int32_t>(uniform_int(rng, id_lo, id_hi));
      if (!tokenizer || usable(*tokenizer, id)) return id;
    }
    throw Error(ErrorKind::invalid_argument,
                fmt::format("serve random dataset: vocab_size {}: ids [{}, {}) are almost all "
                            "special tokens or holes in the tokenizer's vocabulary",
                            opts.vocab_size, id_lo, opts.vocab_size));
  };

  std::vector<Prompt> prompts(static_cast<size_t>(opts.num_prompts));
  for (Prompt& p : prompts) {
    p.input_len = static_cast<int>(uniform_int(rng, in.lo, in.hi));
    p.output_len = static_cast<int>(uniform_int(rng, out.lo, out.hi));
  }
  for (Prompt& p : prompts) {
    if (opts.form == PromptForm::random_words) {
      for (int i = 0; i < p.input_len; ++i) {
        if (i > 0) p.text += ' ';
        p.text += kWords[static_cast<size_t>(uniform_int(rng, 0, kWords.size() - 1))];
      }
      continue;
    }
    p.ids.reserve(static_cast<size_t>(p.input_len));
    for (int i = 0; i < p.input_len; ++i) p.ids.push_back(draw_id());
    if (opts.form == PromptForm::tokenizer_text) {
      p.text = tokenizer->decode(p.ids);
      p.ids.clear();
    }
  }
  return prompts;
}

}  // namespace braid::bench::serve
