// The "random" dataset of a serving benchmark: prompts of random tokens with seeded lengths, as
// `vllm bench serve --dataset-name random` builds them. Random ids defeat prefix caching and make
// every prompt cost a full prefill, so what is measured is the server, not its cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace braid::bench::serve {

// How a prompt travels in the request.
enum class PromptForm {
  token_ids,       // a JSON array of ids (/v1/completions accepts one, as OpenAI's API does)
  tokenizer_text,  // the random ids decoded by the model's tokenizer
  random_words,    // common English words, about one token each, for chat without a tokenizer
};

struct RandomDatasetOptions {
  int num_prompts = 0;
  int input_len = 0;
  int output_len = 0;
  // Lengths are uniform integers in [floor(L (1 - r)), ceil(L (1 + r))], at least 1.
  double range_ratio = 0;
  // Ids are drawn uniformly from [vocab_size / 10, vocab_size): the lowest tenth of Llama and
  // SentencePiece vocabularies holds <unk>, <s>, </s> and the byte-fallback tokens <0x00>..,
  // which real prompts hardly contain and some servers refuse.
  int vocab_size = 0;
  uint64_t seed = 0;
  PromptForm form = PromptForm::token_ids;
};

struct Prompt {
  std::vector<int32_t> ids;  // token_ids form only
  std::string text;          // the other forms
  int input_len = 0;         // tokens asked for (ids, or words); the server may count differently
  int output_len = 0;        // max_tokens
};

// `tokenizer` is required for PromptForm::tokenizer_text (its special tokens and ids without a
// token are drawn again) and unused otherwise. The same options and seed give the same prompts.
// Throws braid::Error (invalid_argument) naming the option that is out of range.
std::vector<Prompt> random_dataset(const RandomDatasetOptions& opts,
                                   const tokenizer::Tokenizer* tokenizer = nullptr);

}  // namespace braid::bench::serve
