#include "tokenizer/regex_classes.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <vector>

#include "braid/error.h"
#include "tokenizer/unicode.h"

namespace braid::tokenizer {
namespace {

using unicode::Range;

// General category names as \p{..} accepts them (Oniguruma also accepts the long names).
std::optional<unicode::CategoryMask> category_by_name(const std::string& name) {
  using namespace unicode;
  static const std::map<std::string, CategoryMask> names = [] {
    static const char* const two[] = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl",
                                      "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc",
                                      "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};
    std::map<std::string, CategoryMask> m;
    for (int c = 0; c < kCategoryCount; ++c) m[two[c]] = mask(static_cast<GeneralCategory>(c));
    m["L"] = m["Letter"] = kLetter;
    m["M"] = m["Mark"] = m["Combining_Mark"] = kMark;
    m["N"] = m["Number"] = kNumber;
    m["P"] = m["Punctuation"] = kPunctuation;
    m["S"] = m["Symbol"] = kSymbol;
    m["Z"] = m["Separator"] = kSeparator;
    m["C"] = m["Other"] = kOther;
    m["L&"] = m["LC"] = m["Cased_Letter"] = mask(Lu) | mask(Ll) | mask(Lt);
    return m;
  }();
  const auto it = names.find(name);
  if (it == names.end()) return std::nullopt;
  return it->second;
}

// Ranges as the body of a PCRE2 class. Surrogates cannot be written in a UTF pattern, so ranges
// that touch them are cut around them (no valid UTF-8 text contains one).
std::string class_body(std::vector<Range> ranges) {
  // PCRE2 tries a class's ranges above U+00FF one after the other, in the order written: the
  // widest first (CJK ideographs, Hangul) makes the common characters cheap to find.
  std::stable_sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.second - a.first > b.second - b.first;
  });
  std::string out;
  char buf[40];
  auto put = [&](uint32_t a, uint32_t b) {
    if (a == b)
      std::snprintf(buf, sizeof(buf), "\\x{%X}", a);
    else
      std::snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", a, b);
    out += buf;
  };
  for (const auto& [a, b] : ranges) {
    if (b < 0xD800 || a > 0xDFFF) {
      put(a, b);
      continue;
    }
    if (a < 0xD800) put(a, 0xD7FF);
    if (b > 0xDFFF) put(0xE000, b);
  }
  return out;
}

// The ranges a class escape stands for (`letter` after the backslash), or nullopt for an escape
// this rewrite leaves to PCRE2.
std::optional<std::vector<Range>> escape_ranges(char letter) {
  using namespace unicode;
  switch (letter) {
    case 's': return space_ranges();
    case 'S': return complement(space_ranges());
    case 'd': return category_ranges(mask(Nd));
    case 'D': return complement(category_ranges(mask(Nd)));
    case 'w': return category_ranges(kLetter | kMark | mask(Nd) | mask(Pc));
    case 'W': return complement(category_ranges(kLetter | kMark | mask(Nd) | mask(Pc)));
    case 'h': return std::vector<Range>{{'0', '9'}, {'A', 'F'}, {'a', 'f'}};
    case 'H': return complement({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
    default: return std::nullopt;
  }
}

}  // namespace

std::string expand_unicode_classes(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size());
  bool in_class = false;  // inside [...]
  size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      ++i;
      // A ']' or '^]' right after '[' is a literal ']'.
      if (i < pattern.size() && pattern[i] == '^') out += pattern[i++];
      if (i < pattern.size() && pattern[i] == ']') out += pattern[i++];
      continue;
    }
    if (c == ']' && in_class) {
      in_class = false;
      out += c;
      ++i;
      continue;
    }
    if (c != '\\' || i + 1 >= pattern.size()) {
      out += c;
      ++i;
      continue;
    }
    const char e = pattern[i + 1];
    std::optional<std::vector<Range>> ranges;
    size_t consumed = 2;
    if (e == 'p' || e == 'P') {
      // \pL or \p{Name} or \p{^Name}
      std::string name;
      if (i + 2 < pattern.size() && pattern[i + 2] == '{') {
        const size_t close = pattern.find('}', i + 3);
        if (close == std::string::npos)
          throw Error(ErrorKind::unsupported, "tokenizer: unterminated \\p{ in regex: " + pattern);
        name = pattern.substr(i + 3, close - i - 3);
        consumed = close + 1 - i;
      } else if (i + 2 < pattern.size()) {
        name = pattern.substr(i + 2, 1);
        consumed = 3;
      }
      bool negated = e == 'P';
      if (!name.empty() && name[0] == '^') {
        negated = !negated;
        name.erase(0, 1);
      }
      if (const auto m = category_by_name(name)) {
        ranges = unicode::category_ranges(*m);
        if (negated) ranges = unicode::complement(*ranges);
      }
      // Other properties (scripts, say) are left to PCRE2, which knows them in UTF mode.
    } else {
      ranges = escape_ranges(e);
    }
    if (!ranges) {
      out.append(pattern, i, consumed);  // any other escape, with the character it escapes
    } else if (in_class) {
      out += class_body(*ranges);
    } else if (ranges->empty()) {
      out += "(?!)";  // a class with no members (\p{Cs} in UTF-8 text) never matches
    } else {
      out += '[';
      out += class_body(*ranges);
      out += ']';
    }
    i += consumed;
  }
  return out;
}

}  // namespace braid::tokenizer
