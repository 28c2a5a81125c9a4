// A compiled PCRE2 pattern (UTF, JIT when available) that lists its matches. Its Unicode classes
// come from the pinned tables (regex_classes.h), not from PCRE2's.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace braid::tokenizer {

class Regex {
 public:
  // literal: the pattern is plain text to find (tokenizer.json's {"String": ...} form).
  // Throws ErrorKind::unsupported with PCRE2's message when the pattern does not compile.
  Regex(const std::string& pattern, bool literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // [begin, end) byte ranges of the successive non-empty matches in `text` (valid UTF-8).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

}  // namespace braid::tokenizer
