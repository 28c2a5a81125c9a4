// A sequence's generated text as it grows: incremental detokenization and stop strings.
//
// The text ends before the first stop string found (or after it, with include_stop_str_in_output);
// while generating, text that could still be the start of a stop string is held back, so a
// client never sees part of a stop string.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace braid::engine {

class TextStream {
 public:
  TextStream(const tokenizer::Tokenizer& tokenizer, bool skip_special_tokens,
             std::vector<std::string> stop, bool include_stop_str);

  // Adds one token's text. Returns the stop string if one now appears (the text is then final).
  std::optional<std::string> push(int32_t token);
  // Text not yet handed out that can be: all of it once `final`, else what cannot be part of a
  // stop string still forming.
  std::string take(bool final);

 private:
  tokenizer::StreamDecoder decoder_;
  std::vector<std::string> stop_;
  bool include_stop_;
  size_t max_stop_ = 0;
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

}  // namespace braid::engine
