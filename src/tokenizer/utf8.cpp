#include "tokenizer/utf8.h"

#include "tokenizer/unicode.h"

namespace braid::tokenizer {

Utf8Step utf8_step(std::string_view s, size_t pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) return {Utf8Status::ok, 1, b0};

  // The lead byte fixes the length and the range the second byte may take (which excludes
  // overlong forms, surrogates and code points past U+10FFFF); later bytes are 80..BF.
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  uint32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Status::invalid, 1, 0};  // a stray continuation byte, C0, C1 or F5..FF
  }

  for (size_t k = 1; k < need; ++k) {
    if (pos + k >= s.size()) return {Utf8Status::incomplete, k, 0};
    const auto b = static_cast<unsigned char>(s[pos + k]);
    if (b < lo || b > hi) return {Utf8Status::invalid, k, 0};
    cp = (cp << 6) | (b & 0x3F);
    lo = 0x80, hi = 0xBF;
  }
  return {Utf8Status::ok, need, cp};
}

size_t utf8_first_invalid(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    // ASCII runs are the common case: skip them without decoding.
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Step step = utf8_step(s, pos);
    if (step.status != Utf8Status::ok) return pos;
    pos += step.length;
  }
  return std::string_view::npos;
}

size_t utf8_append_lossy(std::string_view bytes, std::string& out, bool hold_incomplete) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Step step = utf8_step(bytes, pos);
    if (step.status == Utf8Status::ok) {
      out.append(bytes.substr(pos, step.length));
    } else if (step.status == Utf8Status::incomplete && hold_incomplete) {
      return step.length;  // reaches the end: more bytes may complete it
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
    }
    pos += step.length;
  }
  return 0;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_unicode_whitespace(uint32_t cp) {
  // The White_Space property.
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool is_word_char(uint32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;  // joiners count as word characters in \w
  using namespace unicode;
  return in(kLetter | kMark | mask(Nd) | mask(Nl) | mask(Pc), cp);
}

}  // namespace braid::tokenizer
