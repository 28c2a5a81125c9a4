// Python's operators and conversions on template values: ==, <, +, -, *, /, //, %, **, `in`,
// str(), repr(), len(), iteration, attribute and item access as jinja2's sandbox does them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

namespace braid::chat::jinja {

// Upper bound on any one string or list a template builds (`'x' * n`, replace, join...).
inline constexpr size_t kMaxStringBytes = size_t{64} << 20;

bool py_equal(const Value& a, const Value& b, int depth = 0);
// a < b; TypeError for types Python cannot order.
bool py_less(const Value& a, const Value& b, int depth = 0);
// Three-way version of py_less for sorting: -1, 0, 1.
int py_compare(const Value& a, const Value& b);

std::string to_str(const Value& v);   // str(v); undefined prints as ""
std::string to_repr(const Value& v);  // repr(v)
void append_str(const Value& v, std::string& out);

enum class BinOp { add, sub, mul, div, floordiv, mod, pow };
Value binary(BinOp op, const Value& a, const Value& b);
Value negate(const Value& v);
Value unary_plus(const Value& v);

bool contains(const Value& container, const Value& item);  // `item in container`
int64_t py_len(const Value& v);                            // len(v); TypeError when it has none
// The items `for x in v` visits (dict: keys; str: characters; undefined: none).
std::vector<Value> iterate(const Value& v);

// obj.name and obj[key] as the sandboxed environment resolves them; a miss is an undefined value.
Value get_attr(const Value& obj, std::string_view name);
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step]; absent bounds are none.
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python int() of a float that must fit int64.
int64_t checked_int(double d);

}  // namespace braid::chat::jinja
