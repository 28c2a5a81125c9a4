#include "chat/py_text.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace braid::chat::py {

// ---------------------------------------------------------------------------------- UTF-8
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

uint32_t next_code_point(std::string_view s, size_t& pos) {
  const auto c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) {
    ++pos;
    return c;
  }
  size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  uint32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len && pos + k < s.size(); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[pos + k]) & 0x3F);
  pos += len;
  return cp;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) out.push_back(next_code_point(s, pos));
  return out;
}

std::string from_code_points(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) append_utf8(cps[i], out);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// ------------------------------------------------------------------------ character classes
namespace {
utf8proc_category_t category(uint32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}
}  // namespace

bool is_space(uint32_t cp) {
  // Python's str.isspace(): bidirectional class WS, B or S, or category Zs.
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_printable(uint32_t cp) {
  if (cp == 0x20) return true;
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x7F) return true;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool is_alpha(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}

bool is_decimal(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return category(cp) == UTF8PROC_CATEGORY_ND;
}

bool is_upper(uint32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
  return utf8proc_isupper(static_cast<utf8proc_int32_t>(cp)) != 0;
}

bool is_lower(uint32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z';
  return utf8proc_islower(static_cast<utf8proc_int32_t>(cp)) != 0;
}

bool is_cased(uint32_t cp) {
  if (cp < 0x80) return is_alpha(cp);
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         is_upper(cp) || is_lower(cp);
}

bool str_is_upper(std::string_view s) {
  bool cased = false;
  for (size_t pos = 0; pos < s.size();) {
    const uint32_t cp = next_code_point(s, pos);
    if (is_lower(cp) || category(cp) == UTF8PROC_CATEGORY_LT) return false;
    cased = cased || is_upper(cp);
  }
  return cased;
}

bool str_is_lower(std::string_view s) {
  bool cased = false;
  for (size_t pos = 0; pos < s.size();) {
    const uint32_t cp = next_code_point(s, pos);
    if (is_upper(cp) || category(cp) == UTF8PROC_CATEGORY_LT) return false;
    cased = cased || is_lower(cp);
  }
  return cased;
}

// ------------------------------------------------------------------------------------ case
namespace {
uint32_t to_upper_cp(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  return static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
uint32_t to_lower_cp(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
uint32_t to_title_cp(uint32_t cp) {
  if (cp < 0x80) return to_upper_cp(cp);
  return static_cast<uint32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}
void append_upper(uint32_t cp, std::string& out) {
  if (cp == 0xDF) {  // 'ß'.upper() == 'SS' in Python (SpecialCasing)
    out += "SS";
    return;
  }
  append_utf8(to_upper_cp(cp), out);
}
}  // namespace

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) append_upper(next_code_point(s, pos), out);
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) append_utf8(to_lower_cp(next_code_point(s, pos)), out);
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for (size_t pos = 0; pos < s.size();) {
    const uint32_t cp = next_code_point(s, pos);
    append_utf8(previous_cased ? to_lower_cp(cp) : to_title_cp(cp), out);
    previous_cased = is_cased(cp);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (size_t pos = 0; pos < s.size();) {
    const uint32_t cp = next_code_point(s, pos);
    append_utf8(first ? to_title_cp(cp) : to_lower_cp(cp), out);
    first = false;
  }
  return out;
}

std::string swapcase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const uint32_t cp = next_code_point(s, pos);
    if (is_upper(cp))
      append_utf8(to_lower_cp(cp), out);
    else if (is_lower(cp))
      append_upper(cp, out);
    else
      append_utf8(cp, out);
  }
  return out;
}

// ------------------------------------------------------------------------------ strip/split
std::string_view strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                       bool right) {
  std::vector<uint32_t> set;
  if (chars) set = code_points(*chars);
  auto strippable = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_space(cp);
  };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!strippable(next_code_point(s, next))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t probe = start;
      if (!strippable(next_code_point(s, probe))) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

namespace {
// Runs of whitespace as [begin, end) byte ranges of the words between them.
std::vector<std::pair<size_t, size_t>> whitespace_words(std::string_view s) {
  std::vector<std::pair<size_t, size_t>> words;
  size_t pos = 0;
  size_t word_start = std::string_view::npos;
  while (pos < s.size()) {
    const size_t at = pos;
    const uint32_t cp = next_code_point(s, pos);
    if (is_space(cp)) {
      if (word_start != std::string_view::npos) words.emplace_back(word_start, at);
      word_start = std::string_view::npos;
    } else if (word_start == std::string_view::npos) {
      word_start = at;
    }
  }
  if (word_start != std::string_view::npos) words.emplace_back(word_start, s.size());
  return words;
}
}  // namespace

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep) {
    const auto words = whitespace_words(s);
    for (size_t i = 0; i < words.size(); ++i) {
      if (maxsplit >= 0 && static_cast<int64_t>(i) == maxsplit) {
        // The rest, from this word on, stays whole (its trailing whitespace too).
        out.emplace_back(s.substr(words[i].first));
        return out;
      }
      out.emplace_back(s.substr(words[i].first, words[i].second - words[i].first));
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (maxsplit < 0 || done < maxsplit) {
    const size_t hit = s.find(*sep, start);
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(start, hit - start));
    start = hit + sep->size();
    ++done;
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (!sep) {
    const auto words = whitespace_words(s);
    const int64_t n = static_cast<int64_t>(words.size());
    const int64_t first_split = std::max<int64_t>(0, n - maxsplit);
    if (n == 0) return out;
    if (first_split > 0) out.emplace_back(s.substr(0, words[first_split - 1].second));
    for (int64_t i = first_split; i < n; ++i)
      out.emplace_back(s.substr(words[i].first, words[i].second - words[i].first));
    return out;
  }
  std::vector<std::string> reversed;
  size_t end = s.size();
  int64_t done = 0;
  while (done < maxsplit && end >= sep->size()) {
    const size_t hit = s.rfind(*sep, end - sep->size());
    if (hit == std::string_view::npos) break;
    reversed.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
    end = hit;
    ++done;
  }
  out.emplace_back(s.substr(0, end));
  out.insert(out.end(), reversed.rbegin(), reversed.rend());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  size_t line_start = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t at = pos;
    const uint32_t cp = next_code_point(s, pos);
    const bool is_break = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
                          cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!is_break) continue;
    if (cp == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
    out.emplace_back(s.substr(line_start, (keepends ? pos : at) - line_start));
    line_start = pos;
  }
  if (line_start < s.size()) out.emplace_back(s.substr(line_start));
  return out;
}

bool replace(std::string_view s, std::string_view old, std::string_view with, int64_t count,
             size_t max_bytes, std::string& out) {
  out.clear();
  auto room = [&](size_t more) { return out.size() + more <= max_bytes; };
  if (old.empty()) {
    // Python inserts `with` before every character and at the end.
    int64_t done = 0;
    size_t pos = 0;
    while (pos <= s.size()) {
      if (count < 0 || done < count) {
        if (!room(with.size())) return false;
        out += with;
        ++done;
      }
      if (pos == s.size()) break;
      const size_t at = pos;
      next_code_point(s, pos);
      if (!room(pos - at)) return false;
      out.append(s.substr(at, pos - at));
    }
    return true;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, start);
    if (hit == std::string_view::npos) break;
    if (!room(hit - start + with.size())) return false;
    out.append(s.substr(start, hit - start));
    out += with;
    start = hit + old.size();
    ++done;
  }
  if (!room(s.size() - start)) return false;
  out.append(s.substr(start));
  return true;
}

int64_t find(std::string_view s, std::string_view sub, bool reverse) {
  const size_t hit = reverse ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(length(s.substr(0, hit)));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size()))
    ++n;
  return n;
}

// -------------------------------------------------------------------------------- printing
std::string repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (size_t pos = 0; pos < s.size();) {
    const size_t at = pos;
    const uint32_t cp = next_code_point(s, pos);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      out += buf;
    } else if (cp < 0x7F || is_printable(cp)) {
      out.append(s.substr(at, pos - at));
    } else {
      if (cp <= 0xFF)
        std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      else if (cp <= 0xFFFF)
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", cp);
      out += buf;
    }
  }
  out += quote;
  return out;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // The shortest digits that round-trip (what Python's repr picks), then Python's layout:
  // positional when the decimal exponent is in (-4, 16], scientific otherwise.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits += c;
  int exponent = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+'), sci.data() + sci.size(), exponent);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exponent + 1;  // value = 0.DIGITS x 10^decpt
  if (decpt > -4 && decpt <= 16) {
    std::string out = sign;
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits;
      out.append(static_cast<size_t>(decpt) - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt));
      out += '.';
      out += digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  std::string out = sign + digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  char exp[16];
  std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp;
}

}  // namespace braid::chat::py
