// Rewrites a pre-tokenizer regex so that its Unicode classes come from the pinned tables
// (unicode.h) instead of PCRE2's: \p{..} / \P{..} of general categories, \s \S \d \D \w \W
// (with Oniguruma's meanings, as Hugging Face compiles these patterns with Oniguruma) and
// Oniguruma's \h \H (hexadecimal digits) become explicit ranges of code points. The result is
// compiled without PCRE2_UCP, so nothing in it depends on PCRE2's Unicode version.
#pragma once

#include <string>

namespace braid::tokenizer {

// Throws braid::Error (unsupported) for a malformed \p{...}.
std::string expand_unicode_classes(const std::string& pattern);

}  // namespace braid::tokenizer
