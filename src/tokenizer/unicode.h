// Character classes of the pinned Unicode version (unicode_data.h), as the pre-tokenizer regexes
// and added tokens' options ask for them. Nothing here reads a library's own Unicode tables.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tokenizer/unicode_data.h"

namespace braid::tokenizer::unicode {

GeneralCategory category(uint32_t code_point);

// A set of categories: bit c stands for GeneralCategory c.
using CategoryMask = uint32_t;
constexpr CategoryMask mask(GeneralCategory c) { return CategoryMask{1} << c; }
inline constexpr CategoryMask kLetter = mask(Lu) | mask(Ll) | mask(Lt) | mask(Lm) | mask(Lo);
inline constexpr CategoryMask kMark = mask(Mn) | mask(Mc) | mask(Me);
inline constexpr CategoryMask kNumber = mask(Nd) | mask(Nl) | mask(No);
inline constexpr CategoryMask kPunctuation =
    mask(Pc) | mask(Pd) | mask(Ps) | mask(Pe) | mask(Pi) | mask(Pf) | mask(Po);
inline constexpr CategoryMask kSymbol = mask(Sm) | mask(Sc) | mask(Sk) | mask(So);
inline constexpr CategoryMask kSeparator = mask(Zs) | mask(Zl) | mask(Zp);
inline constexpr CategoryMask kOther = mask(Cc) | mask(Cf) | mask(Cs) | mask(Co) | mask(Cn);

inline bool in(CategoryMask m, uint32_t code_point) { return (m >> category(code_point)) & 1; }

// Oniguruma's \s for Unicode text, which Hugging Face's regexes use: U+0009..U+000D, U+0085 and
// the separators (Zs, Zl, Zp). Unlike PCRE2's \s it leaves out U+180E (a format character since
// Unicode 6.3).
bool is_space(uint32_t code_point);

using Range = std::pair<uint32_t, uint32_t>;  // [first, last]
// The code points whose category is in `m`, as sorted, disjoint ranges.
std::vector<Range> category_ranges(CategoryMask m);
std::vector<Range> space_ranges();
// The code points (0..0x10FFFF, surrogates included) outside sorted disjoint `ranges`.
std::vector<Range> complement(const std::vector<Range>& ranges);

}  // namespace braid::tokenizer::unicode
