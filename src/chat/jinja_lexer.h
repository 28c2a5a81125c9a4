// Splits a template into text and tag tokens the way jinja2's lexer does with transformers'
// settings (trim_blocks, lstrip_blocks, keep_trailing_newline off): newlines normalised to \n,
// one trailing newline dropped, `{%-`/`-%}` stripping all whitespace, `{%+` keeping it,
// lstrip_blocks removing a block or comment tag's indentation, trim_blocks the newline after it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "braid/error.h"

namespace braid::chat::jinja {

enum class Tok : uint8_t {
  data,         // template text to print as is
  var_begin,    // {{
  var_end,      // }}
  block_begin,  // {%
  block_end,    // %}
  name,
  string,    // text: the literal's value, escapes decoded
  integer,   // number
  floating,  // real
  op,        // text: + - * / // % ** ~ [ ] ( ) { } == != > >= < <= = . : | , ;
  eof,
};

struct Token {
  Tok type;
  uint32_t pos;  // byte offset into the normalised source
  std::string text;
  int64_t number = 0;
  double real = 0;
};

// The source as jinja2 reads it: \r\n and \r become \n, one final newline goes.
std::string normalize_source(std::string_view source);

// A template the lexer or parser rejects: where (byte offset) and why. ChatTemplate turns it
// into braid::Error with the line and column.
struct SyntaxError {
  uint32_t pos;
  std::string message;
  ErrorKind kind = ErrorKind::invalid_argument;  // unsupported: valid jinja2 we do not run
};

// Tokens of a normalised source, ending with eof. Throws SyntaxError on an unclosed tag or
// comment, a bad literal or a stray character.
std::vector<Token> tokenize(const std::string& source);

// 1-based line and column (in characters) of a byte offset, for messages.
struct LineCol {
  int line;
  int column;
};
LineCol line_col(std::string_view source, size_t offset);

}  // namespace braid::chat::jinja
