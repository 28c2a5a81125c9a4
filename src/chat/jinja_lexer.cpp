#include "chat/jinja_lexer.h"

#include <cctype>
#include <cstdlib>

#include "chat/py_text.h"

namespace braid::chat::jinja {

namespace {

[[noreturn]] void error(size_t pos, std::string message) {
  throw SyntaxError{static_cast<uint32_t>(pos), std::move(message)};
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Length of the Python-whitespace run at s[pos].
size_t whitespace_run(std::string_view s, size_t pos) {
  size_t p = pos;
  while (p < s.size()) {
    size_t next = p;
    if (!py::is_space(py::next_code_point(s, next))) break;
    p = next;
  }
  return p - pos;
}

bool all_whitespace(std::string_view s) { return !s.empty() && whitespace_run(s, 0) == s.size(); }

std::string_view rstrip(std::string_view s) { return py::strip(s, std::nullopt, false, true); }

// Digits with single underscores between them ("1_000"); returns the length matched.
size_t digit_run(std::string_view s, size_t pos, bool (*digit)(char)) {
  size_t p = pos;
  if (p >= s.size() || !digit(s[p])) return 0;
  ++p;
  while (p < s.size()) {
    if (digit(s[p])) {
      ++p;
    } else if (s[p] == '_' && p + 1 < s.size() && digit(s[p + 1])) {
      p += 2;
    } else {
      break;
    }
  }
  return p - pos;
}

bool dec(char c) { return is_digit(c); }
bool hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }
bool oct(char c) { return c >= '0' && c <= '7'; }
bool bin(char c) { return c == '0' || c == '1'; }

std::string without_underscores(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '_') out += c;
  return out;
}

// A float literal at s[pos] (jinja2's float_re); 0 when there is none.
size_t match_float(std::string_view s, size_t pos) {
  if (pos > 0 && s[pos - 1] == '.') return 0;
  size_t p = pos + digit_run(s, pos, dec);
  if (p == pos) return 0;
  size_t frac = 0;
  if (p < s.size() && s[p] == '.') frac = digit_run(s, p + 1, dec);
  size_t after_frac = frac ? p + 1 + frac : p;
  if (after_frac < s.size() && (s[after_frac] == 'e' || s[after_frac] == 'E')) {
    size_t q = after_frac + 1;
    if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
    const size_t exp = digit_run(s, q, dec);
    if (exp) return q + exp - pos;
  }
  return frac ? after_frac - pos : 0;
}

// An integer literal at s[pos] (jinja2's integer_re); 0 when there is none.
size_t match_integer(std::string_view s, size_t pos, int& base) {
  if (s[pos] == '0' && pos + 1 < s.size()) {
    const char k = static_cast<char>(std::tolower(static_cast<unsigned char>(s[pos + 1])));
    bool (*digit)(char) = k == 'x' ? hex : k == 'o' ? oct : k == 'b' ? bin : nullptr;
    if (digit) {
      size_t p = pos + 2;
      if (p < s.size() && s[p] == '_') ++p;
      const size_t n = digit_run(s, p, digit);
      if (n) {
        base = k == 'x' ? 16 : k == 'o' ? 8 : 2;
        return p + n - pos;
      }
    }
  }
  base = 10;
  if (pos >= s.size() || !is_digit(s[pos])) return 0;
  if (s[pos] != '0') return digit_run(s, pos, dec);
  // "0", "00", "0_0": zeros only.
  size_t p = pos + 1;
  while (p < s.size() && (s[p] == '0' || (s[p] == '_' && p + 1 < s.size() && s[p + 1] == '0')))
    p += s[p] == '_' ? 2 : 1;
  return p - pos;
}

// Python's "unicode-escape" decoding of a string literal's body, as jinja2 applies it.
std::string unescape(std::string_view body, size_t pos) {
  std::string out;
  for (size_t i = 0; i < body.size();) {
    if (body[i] != '\\') {
      out += body[i++];
      continue;
    }
    if (i + 1 >= body.size()) error(pos, "string literal ends in a backslash");
    const char c = body[i + 1];
    i += 2;
    auto read_hex = [&](size_t digits) -> uint32_t {
      if (i + digits > body.size()) error(pos, "truncated escape in a string literal");
      uint32_t v = 0;
      for (size_t k = 0; k < digits; ++k) {
        const char h = body[i + k];
        if (!hex(h)) error(pos, "truncated escape in a string literal");
        v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                               ? h - '0'
                                               : (std::tolower(h) - 'a' + 10));
      }
      i += digits;
      return v;
    };
    auto put = [&](uint32_t cp) {
      if (cp > 0x10FFFF) error(pos, "illegal Unicode character in a string literal");
      if (cp >= 0xD800 && cp <= 0xDFFF) error(pos, "a lone surrogate in a string literal");
      py::append_utf8(cp, out);
    };
    switch (c) {
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case '\n':
        break;  // line continuation
      case 'x':
        put(read_hex(2));
        break;
      case 'u':
        put(read_hex(4));
        break;
      case 'U':
        put(read_hex(8));
        break;
      case 'N':
        throw SyntaxError{static_cast<uint32_t>(pos), "\\N{...} escapes are not supported",
                          ErrorKind::unsupported};
      default:
        if (oct(c)) {
          uint32_t v = static_cast<uint32_t>(c - '0');
          for (int k = 0; k < 2 && i < body.size() && oct(body[i]); ++k)
            v = v * 8 + static_cast<uint32_t>(body[i++] - '0');
          put(v);
        } else if (static_cast<unsigned char>(c) >= 0x80) {
          // jinja2 first turns non-ASCII text into \x.. / \u.. escapes, so a backslash before
          // one escapes that escape's own backslash: '\é' reads as the four characters \xe9.
          size_t p = i - 1;
          const uint32_t cp = py::next_code_point(body, p);
          i = p;
          char buf[16];
          std::snprintf(buf, sizeof buf,
                        cp <= 0xFF     ? "\\x%02x"
                        : cp <= 0xFFFF ? "\\u%04x"
                                       : "\\U%08x",
                        cp);
          out += buf;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

const char* const kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                  "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                  "=",  ".",  ":",  "|",  ",",  ">",  "<", ";"};

class Lexer {
 public:
  explicit Lexer(const std::string& s) : s_(s) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      const size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_data(s_.substr(pos), pos);
        break;
      }
      const char kind = s_[tag + 1];  // '{', '%' or '#'
      const char sign =
          tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : 0;
      std::string_view text = std::string_view(s_).substr(pos, tag - pos);
      if (sign == '-') {
        text = rstrip(text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: a block or comment tag alone on its line loses its indentation.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && all_whitespace(text.substr(l_pos)))
          text = text.substr(0, l_pos);
      }
      emit_data(std::string(text), pos);
      const size_t body = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = comment(tag, body, line_starting);
      } else if (kind == '%' && raw_begin(tag, body, pos, line_starting)) {
        // pos and line_starting were moved past the raw block
      } else {
        pos = tag_tokens(tag, body, kind == '%', line_starting);
      }
    }
    tokens_.push_back({Tok::eof, static_cast<uint32_t>(s_.size()), {}});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t p = s_.find('{', from); p != std::string::npos; p = s_.find('{', p + 1))
      if (p + 1 < s_.size() && (s_[p + 1] == '{' || s_[p + 1] == '%' || s_[p + 1] == '#')) return p;
    return std::string::npos;
  }

  void emit_data(std::string text, size_t pos) {
    if (!text.empty()) tokens_.push_back({Tok::data, static_cast<uint32_t>(pos), std::move(text)});
  }

  // After a comment: `+#}` keeps what follows, `-#}` strips whitespace, `#}` eats one newline.
  size_t comment(size_t tag, size_t body, bool& line_starting) {
    const size_t close = s_.find("#}", body);
    if (close == std::string::npos) error(tag, "missing end of comment tag");
    size_t end = close + 2;
    if (close > body && s_[close - 1] == '-') {
      end += whitespace_run(s_, end);
    } else if (!(close > body && s_[close - 1] == '+')) {
      if (end < s_.size() && s_[end] == '\n') ++end;
    }
    line_starting = s_[end - 1] == '\n';
    return end;
  }

  // `{% raw %}...{% endraw %}`: the text between is data, tags and all.
  bool raw_begin(size_t tag, size_t body, size_t& pos, bool& line_starting) {
    size_t p = body + whitespace_run(s_, body);
    if (s_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    p += whitespace_run(s_, p);
    if (s_.compare(p, 3, "-%}") == 0) {
      p += 3;
      p += whitespace_run(s_, p);
    } else if (s_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    // Find `{%[-+]? endraw [-+]?%}`.
    for (size_t q = s_.find("{%", p); q != std::string::npos; q = s_.find("{%", q + 1)) {
      const char sign = q + 2 < s_.size() && (s_[q + 2] == '-' || s_[q + 2] == '+') ? s_[q + 2] : 0;
      size_t r = q + 2 + (sign ? 1 : 0);
      r += whitespace_run(s_, r);
      if (s_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      r += whitespace_run(s_, r);
      size_t end;
      if (s_.compare(r, 3, "+%}") == 0) {
        end = r + 3;
      } else if (s_.compare(r, 3, "-%}") == 0) {
        end = r + 3 + whitespace_run(s_, r + 3);
      } else if (s_.compare(r, 2, "%}") == 0) {
        end = r + 2;
        if (end < s_.size() && s_[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string_view text = std::string_view(s_).substr(p, q - p);
      if (sign == '-') {
        text = rstrip(text);
      } else if (sign != '+') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        const bool starting = s_[p - 1] == '\n';  // the raw tag itself ended a line
        if ((l_pos > 0 || starting) && all_whitespace(text.substr(l_pos)))
          text = text.substr(0, l_pos);
      }
      emit_data(std::string(text), p);
      pos = end;
      line_starting = s_[end - 1] == '\n';
      return true;
    }
    error(tag, "missing end of raw directive");
  }

  size_t tag_tokens(size_t tag, size_t pos, bool block, bool& line_starting) {
    tokens_.push_back({block ? Tok::block_begin : Tok::var_begin, static_cast<uint32_t>(tag), {}});
    std::vector<char> brackets;
    while (true) {
      pos += whitespace_run(s_, pos);
      if (pos >= s_.size())
        error(tag, block ? "unclosed '{%' tag (no matching '%}')"
                         : "unclosed '{{' tag (no matching '}}')");
      if (brackets.empty()) {
        if (const size_t end = tag_end(pos, block); end) {
          tokens_.push_back(
              {block ? Tok::block_end : Tok::var_end, static_cast<uint32_t>(pos), {}});
          line_starting = s_[end - 1] == '\n';
          return end;
        }
      }
      pos = one_token(pos, brackets);
    }
  }

  // End of the tag at pos (and what it consumes), or 0 when the tag does not end here.
  size_t tag_end(size_t pos, bool block) const {
    const char* close = block ? "%}" : "}}";
    if (s_.compare(pos, 3, std::string("-") + close) == 0)
      return pos + 3 + whitespace_run(s_, pos + 3);
    if (block && s_.compare(pos, 3, "+%}") == 0) return pos + 3;
    if (s_.compare(pos, 2, close) == 0) {
      size_t end = pos + 2;
      if (block && end < s_.size() && s_[end] == '\n') ++end;  // trim_blocks
      return end;
    }
    return 0;
  }

  size_t one_token(size_t pos, std::vector<char>& brackets) {
    const std::string_view s(s_);
    if (const size_t n = match_float(s, pos)) {
      const std::string text = without_underscores(s.substr(pos, n));
      tokens_.push_back(
          {Tok::floating, static_cast<uint32_t>(pos), text, 0, std::strtod(text.c_str(), nullptr)});
      return pos + n;
    }
    int base = 10;
    if (const size_t n = match_integer(s, pos, base)) {
      std::string digits = without_underscores(s.substr(pos, n));
      if (base != 10) digits = digits.substr(2);
      errno = 0;
      const unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
      if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
        throw SyntaxError{static_cast<uint32_t>(pos), "integer literal past 64 bits",
                          ErrorKind::unsupported};
      tokens_.push_back({Tok::integer, static_cast<uint32_t>(pos), std::string(s.substr(pos, n)),
                         static_cast<int64_t>(v)});
      return pos + n;
    }
    if (is_name_start(s[pos])) {
      size_t p = pos + 1;
      while (p < s.size() && is_name_char(s[p])) ++p;
      tokens_.push_back(
          {Tok::name, static_cast<uint32_t>(pos), std::string(s.substr(pos, p - pos))});
      return p;
    }
    if (s[pos] == '\'' || s[pos] == '"') {
      const char quote = s[pos];
      size_t p = pos + 1;
      while (p < s.size() && s[p] != quote) p += s[p] == '\\' ? 2 : 1;
      if (p >= s.size()) error(pos, "unterminated string literal");
      tokens_.push_back(
          {Tok::string, static_cast<uint32_t>(pos), unescape(s.substr(pos + 1, p - pos - 1), pos)});
      return p + 1;
    }
    for (const char* op : kOperators) {
      const size_t n = std::char_traits<char>::length(op);
      if (s.compare(pos, n, op) != 0) continue;
      if (n == 1 && (op[0] == '(' || op[0] == '[' || op[0] == '{')) {
        brackets.push_back(op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}');
      } else if (n == 1 && (op[0] == ')' || op[0] == ']' || op[0] == '}')) {
        if (brackets.empty()) error(pos, std::string("unexpected '") + op + "'");
        if (brackets.back() != op[0])
          error(pos, std::string("unexpected '") + op + "', expected '" + brackets.back() + "'");
        brackets.pop_back();
      }
      tokens_.push_back({Tok::op, static_cast<uint32_t>(pos), op});
      return pos + n;
    }
    size_t p = pos;
    const uint32_t cp = py::next_code_point(s, p);
    std::string shown;
    py::append_utf8(cp, shown);
    error(pos, "unexpected character '" + shown + "'");
  }

  const std::string& s_;
  std::vector<Token> tokens_;
};

}  // namespace

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

LineCol line_col(std::string_view source, size_t offset) {
  LineCol lc{1, 1};
  for (size_t i = 0; i < offset && i < source.size();) {
    if (source[i] == '\n') {
      ++lc.line;
      lc.column = 1;
      ++i;
      continue;
    }
    py::next_code_point(source, i);
    ++lc.column;
  }
  return lc;
}

}  // namespace braid::chat::jinja
