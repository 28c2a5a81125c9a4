// Builds the statement tree from tokens, following jinja2's grammar and operator precedence
// (`or` < `and` < `not` < comparisons < `+ -` < `~` < `* / // %` < `**` < unary, filters and
// tests; `**` is left-associative as in jinja2). Filter and test names are resolved here.
// Nesting is bounded so hostile templates cannot exhaust the stack.
#pragma once

#include <string>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace braid::chat::jinja {

inline constexpr int kMaxParseDepth = 100;      // nested brackets, blocks, unary operators
inline constexpr uint32_t kMaxExprDepth = 200;  // height of one expression's tree (chains too)

// The template's statements. Throws SyntaxError.
Body parse(const std::string& normalized_source);

}  // namespace braid::chat::jinja
