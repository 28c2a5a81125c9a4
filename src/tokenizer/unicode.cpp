#include "tokenizer/unicode.h"

#include <algorithm>

#include "tokenizer/code_point_map.h"

namespace braid::tokenizer::unicode {
namespace {

// The category of `cp` from the generated runs (a binary search: used to build the map).
GeneralCategory category_from_runs(uint32_t cp) {
  const CategoryRun* end = kCategoryRuns + kCategoryRunCount;
  const CategoryRun* it = std::upper_bound(kCategoryRuns, end, cp,
                                           [](uint32_t c, const CategoryRun& r) { return c < r.first; });
  return (it - 1)->category;
}

const CodePointMap& categories() {
  static const CodePointMap map([](uint32_t cp) { return category_from_runs(cp); });
  return map;
}

}  // namespace

GeneralCategory category(uint32_t code_point) {
  if (code_point > 0x10FFFF) return Cn;
  return static_cast<GeneralCategory>(categories()[code_point]);
}

bool is_space(uint32_t code_point) {
  if (code_point < 0x80) return (code_point >= 0x09 && code_point <= 0x0D) || code_point == 0x20;
  return code_point == 0x85 || in(kSeparator, code_point);
}

std::vector<Range> category_ranges(CategoryMask m) {
  std::vector<Range> out;
  for (size_t i = 0; i < kCategoryRunCount; ++i) {
    if (!((m >> kCategoryRuns[i].category) & 1)) continue;
    const uint32_t first = kCategoryRuns[i].first;
    const uint32_t last = i + 1 < kCategoryRunCount ? kCategoryRuns[i + 1].first - 1 : 0x10FFFF;
    if (!out.empty() && out.back().second + 1 == first)
      out.back().second = last;
    else
      out.emplace_back(first, last);
  }
  return out;
}

std::vector<Range> space_ranges() {
  std::vector<Range> out{{0x09, 0x0D}, {0x20, 0x20}, {0x85, 0x85}};
  for (const Range& r : category_ranges(kSeparator))
    if (r.first > 0x85) out.push_back(r);
  return out;  // Zs below U+0085 is only U+0020, already in
}

std::vector<Range> complement(const std::vector<Range>& ranges) {
  std::vector<Range> out;
  uint32_t next = 0;
  for (const Range& r : ranges) {
    if (r.first > next) out.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

}  // namespace braid::tokenizer::unicode
