// The real tokenizers the tests compare with Hugging Face (.cache/tokenizers/NAME/tokenizer.json,
// fetched by scripts/fetch-tokenizers.sh), each loaded once per test process: a load takes about
// a second, ~19 s under the sanitizers, and ctest runs the tests a few processes in all.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace braid::test {

// Its tokenizer.json's path.
std::string real_tokenizer_file(const std::string& name);

// The loaded tokenizer, or null when the file is absent (npm offline): the caller skips, saying
// so. Not thread-safe: the tests of one process run one after another.
const tokenizer::Tokenizer* real_tokenizer(const std::string& name);

}  // namespace braid::test
