// The algorithm of UAX #15: full canonical decomposition, canonical ordering, canonical
// composition. Characters assigned after Unicode 9.0 have no data here, so they are starters
// that neither decompose nor compose, as in Hugging Face's normalizer (whose tables are 9.0's).
#include "tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "tokenizer/code_point_map.h"
#include "tokenizer/unicode_data.h"
#include "tokenizer/utf8.h"

namespace braid::tokenizer {
namespace {

using namespace unicode;

// Hangul syllables decompose and compose by arithmetic (Unicode chapter 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr uint32_t kSCount = kLCount * kNCount;

uint8_t combining_class_from_runs(uint32_t cp) {
  const CombiningClassRun* end = kCombiningClassRuns + kCombiningClassRunCount;
  const CombiningClassRun* it = std::upper_bound(
      kCombiningClassRuns, end, cp, [](uint32_t c, const CombiningClassRun& r) { return c < r.first; });
  return (it - 1)->combining_class;
}

const Decomposition* find_decomposition(uint32_t cp) {
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* it = std::lower_bound(
      kDecompositions, end, cp, [](const Decomposition& d, uint32_t c) { return d.code_point < c; });
  return it != end && it->code_point == cp ? it : nullptr;
}

// Everything NFC looks up, built once.
struct NfcTables {
  CodePointMap combining_class{combining_class_from_runs};
  std::unordered_map<uint64_t, uint32_t> compose = build_compose();  // first << 32 | second
  // Per code point: kInert (a starter that neither decomposes nor combines with what precedes
  // it: text made only of these is already NFC), kBoundary (NFC never changes anything across
  // the point before it, so text can be normalized in pieces split there).
  static constexpr uint8_t kInert = 1, kBoundary = 2;
  CodePointMap flags = build_flags();

  static std::unordered_map<uint64_t, uint32_t> build_compose() {
    std::unordered_map<uint64_t, uint32_t> out;
    const uint32_t* excluded_end = kCompositionExclusions + kCompositionExclusionCount;
    for (size_t i = 0; i < kDecompositionCount; ++i) {
      const Decomposition& d = kDecompositions[i];
      if (d.second == 0 || std::binary_search(kCompositionExclusions, excluded_end, d.code_point))
        continue;
      out.emplace(uint64_t{d.first} << 32 | d.second, d.code_point);
    }
    return out;
  }

  CodePointMap build_flags() const {
    std::vector<bool> second(0x110000, false);  // combines with a preceding character
    for (const auto& [key, composite] : compose) second[key & 0xFFFFFFFF] = true;
    for (uint32_t v = kVBase; v < kVBase + kVCount; ++v) second[v] = true;
    for (uint32_t t = kTBase + 1; t < kTBase + kTCount; ++t) second[t] = true;
    return CodePointMap([&](uint32_t cp) -> uint8_t {
      if (combining_class[cp] != 0 || second[cp]) return 0;
      const Decomposition* d = find_decomposition(cp);
      if (!d) return kInert | kBoundary;
      // Decomposes: a boundary if what it starts with is a starter nothing combines with.
      uint32_t head = d->first;
      while (const Decomposition* dd = find_decomposition(head)) head = dd->first;
      return combining_class[head] == 0 && !second[head] ? kBoundary : 0;
    });
  }
};

const NfcTables& tables() {
  static const NfcTables t;
  return t;
}

void decompose(const NfcTables& t, uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const Decomposition* d = find_decomposition(cp)) {
    decompose(t, d->first, out);
    if (d->second) decompose(t, d->second, out);
    return;
  }
  out.push_back(cp);
}

uint32_t compose_pair(const NfcTables& t, uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto it = t.compose.find(uint64_t{a} << 32 | b);
  return it == t.compose.end() ? 0 : it->second;
}

// NFC of one piece of text (the code points in `cps`), appended to `out` as UTF-8.
void normalize_piece(const NfcTables& t, const std::vector<uint32_t>& cps, std::string& out) {
  std::vector<uint32_t> d;
  for (uint32_t cp : cps) decompose(t, cp, d);
  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (size_t i = 1; i < d.size(); ++i) {
    const uint8_t cc = t.combining_class[d[i]];
    if (cc == 0) continue;
    for (size_t j = i; j > 0 && t.combining_class[d[j - 1]] > cc; --j) std::swap(d[j - 1], d[j]);
  }
  // Canonical composition: each character joins the last starter unless something between
  // them blocks it (a starter, or a mark of the same or a higher class).
  std::vector<uint32_t> result;
  size_t starter = SIZE_MAX;
  uint8_t last_cc = 0;
  for (uint32_t cp : d) {
    const uint8_t cc = t.combining_class[cp];
    if (starter != SIZE_MAX && (result.size() - 1 == starter || (last_cc != 0 && last_cc < cc))) {
      if (const uint32_t composite = compose_pair(t, result[starter], cp)) {
        result[starter] = composite;
        continue;
      }
    }
    if (cc == 0) starter = result.size();
    last_cc = cc;
    result.push_back(cp);
  }
  for (uint32_t cp : result) append_utf8(cp, out);
}

}  // namespace

std::string nfc(std::string_view text) {
  // Most text (ASCII, CJK, most scripts) is made of inert characters only: return it as it is.
  const NfcTables& t = tables();
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Step step = utf8_step(text, pos);
    if (!(t.flags[step.code_point] & NfcTables::kInert)) break;
    pos += step.length;
  }
  if (pos == text.size()) return std::string(text);

  // Else normalize piece by piece, the pieces split before each boundary character; pieces
  // of inert characters are copied.
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  // Back up to the last boundary before the first character that is not inert.
  size_t start = 0;
  for (size_t p = 0; p < pos;) {
    const Utf8Step step = utf8_step(text, p);
    if (t.flags[step.code_point] & NfcTables::kBoundary) start = p;
    p += step.length;
  }
  out.append(text.substr(0, start));
  std::vector<uint32_t> piece;
  bool inert = true;
  for (size_t p = start; p < text.size();) {
    const Utf8Step step = utf8_step(text, p);
    const uint8_t f = t.flags[step.code_point];
    if ((f & NfcTables::kBoundary) && !piece.empty()) {
      if (inert)
        for (uint32_t cp : piece) append_utf8(cp, out);
      else
        normalize_piece(t, piece, out);
      piece.clear();
      inert = true;
    }
    piece.push_back(step.code_point);
    inert = inert && (f & NfcTables::kInert);
    p += step.length;
  }
  if (inert)
    for (uint32_t cp : piece) append_utf8(cp, out);
  else
    normalize_piece(t, piece, out);
  return out;
}

}  // namespace braid::tokenizer
