// Python's str semantics over UTF-8: code points, whitespace, case, split/strip, repr, float repr.
//
// Chat templates are Jinja, and Jinja is Python: `s[1:]`, `s|length`, `s.strip()`, `'%s' % x`
// and `{{ 1.0 }}` all follow Python's rules, which count code points (not bytes) and print floats
// in their shortest round-trip form. Every function here expects valid UTF-8 (checked where text
// enters: the template source and the messages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace braid::chat::py {

// ---- UTF-8 ----
bool valid_utf8(std::string_view s);
// The code point at s[pos] (valid UTF-8 assumed); pos moves past it.
uint32_t next_code_point(std::string_view s, size_t& pos);
void append_utf8(uint32_t code_point, std::string& out);
std::vector<uint32_t> code_points(std::string_view s);
std::string from_code_points(const std::vector<uint32_t>& cps, size_t begin, size_t end);
size_t length(std::string_view s);  // in code points
bool is_ascii(std::string_view s);

// ---- character classes (Python's str.isspace / isprintable / isalpha / isdigit / ...) ----
bool is_space(uint32_t cp);
bool is_printable(uint32_t cp);
bool is_alpha(uint32_t cp);
bool is_decimal(uint32_t cp);  // str.isdigit for the cases templates meet (category Nd)
bool is_cased(uint32_t cp);
bool is_upper(uint32_t cp);
bool is_lower(uint32_t cp);
// Python's str.isupper/islower on a whole string: some cased character, none of the other case.
bool str_is_upper(std::string_view s);
bool str_is_lower(std::string_view s);

// ---- case (ASCII exactly as Python; other letters by Unicode's simple case mapping, plus
// 'ß'.upper() == 'SS'; Python applies the full SpecialCasing table) ----
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()
std::string swapcase(std::string_view s);

// ---- strip / split (chars == nullopt: Python's whitespace) ----
std::string_view strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                       bool right);
// str.split(sep, maxsplit) / str.rsplit; sep must not be empty (the caller raises ValueError).
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
// str.replace(old, new, count); false when the result would pass max_bytes.
bool replace(std::string_view s, std::string_view old, std::string_view with, int64_t count,
             size_t max_bytes, std::string& out);
// str.find / str.count over code points (-1 when absent).
int64_t find(std::string_view s, std::string_view sub, bool reverse);
int64_t count(std::string_view s, std::string_view sub);

// ---- printing ----
std::string repr(std::string_view s);  // repr(str): quotes chosen and escapes as Python does
std::string float_repr(double v);      // repr(float): '1.0', '0.1', '1e+16', 'inf', 'nan'

}  // namespace braid::chat::py
