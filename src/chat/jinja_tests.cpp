// jinja2's tests (`x is defined`, `x is string`, `select('equalto', 3)`), with its answers for
// undefined values (undefined is iterable, a sequence and callable, as jinja2's Undefined is).
#include <algorithm>
#include <array>

#include "chat/jinja_builtins.h"
#include "chat/jinja_ops.h"
#include "chat/py_text.h"

namespace braid::chat::jinja {

namespace {

const Value& other(const std::string& test, CallArgs& args) {
  if (args.positional.size() != 1 || !args.keywords.empty())
    type_error("the test '" + test + "' takes exactly one argument");
  return args.positional[0];
}

void no_args(const char* test, const CallArgs& args) {
  if (!args.positional.empty() || !args.keywords.empty())
    type_error(std::string("the test '") + test + "' takes no arguments");
}

bool t_defined(Renderer&, const Value& v, CallArgs& a) {
  no_args("defined", a);
  return !v.is_undefined();
}
bool t_undefined(Renderer&, const Value& v, CallArgs& a) {
  no_args("undefined", a);
  return v.is_undefined();
}
bool t_none(Renderer&, const Value& v, CallArgs& a) {
  no_args("none", a);
  return v.is_none();
}
bool t_boolean(Renderer&, const Value& v, CallArgs& a) {
  no_args("boolean", a);
  return v.is_bool();
}
bool t_false(Renderer&, const Value& v, CallArgs& a) {
  no_args("false", a);
  return v.is_bool() && !v.as_bool();
}
bool t_true(Renderer&, const Value& v, CallArgs& a) {
  no_args("true", a);
  return v.is_bool() && v.as_bool();
}
bool t_integer(Renderer&, const Value& v, CallArgs& a) {
  no_args("integer", a);
  return v.is_int();
}
bool t_float(Renderer&, const Value& v, CallArgs& a) {
  no_args("float", a);
  return v.is_float();
}
bool t_number(Renderer&, const Value& v, CallArgs& a) {
  no_args("number", a);
  return v.is_number();
}
bool t_string(Renderer&, const Value& v, CallArgs& a) {
  no_args("string", a);
  return v.is_string();
}
bool t_mapping(Renderer&, const Value& v, CallArgs& a) {
  no_args("mapping", a);
  return v.is_dict();
}
bool t_sequence(Renderer&, const Value& v, CallArgs& a) {
  no_args("sequence", a);
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_iterable(Renderer&, const Value& v, CallArgs& a) {
  no_args("iterable", a);
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_callable(Renderer&, const Value& v, CallArgs& a) {
  no_args("callable", a);
  return v.is_callable() || v.is_undefined();
}
bool t_lower(Renderer&, const Value& v, CallArgs& a) {
  no_args("lower", a);
  return py::str_is_lower(to_str(v));
}
bool t_upper(Renderer&, const Value& v, CallArgs& a) {
  no_args("upper", a);
  return py::str_is_upper(to_str(v));
}
bool t_escaped(Renderer&, const Value&, CallArgs& a) {
  no_args("escaped", a);
  return false;
}

bool t_odd(Renderer&, const Value& v, CallArgs& a) {
  no_args("odd", a);
  return py_equal(binary(BinOp::mod, v, Value::integer(2)), Value::integer(1));
}
bool t_even(Renderer&, const Value& v, CallArgs& a) {
  no_args("even", a);
  return py_equal(binary(BinOp::mod, v, Value::integer(2)), Value::integer(0));
}
bool t_divisibleby(Renderer&, const Value& v, CallArgs& a) {
  return py_equal(binary(BinOp::mod, v, other("divisibleby", a)), Value::integer(0));
}

bool t_eq(Renderer&, const Value& v, CallArgs& a) { return py_equal(v, other("eq", a)); }
bool t_ne(Renderer&, const Value& v, CallArgs& a) { return !py_equal(v, other("ne", a)); }
bool t_lt(Renderer&, const Value& v, CallArgs& a) { return py_less(v, other("lt", a)); }
bool t_le(Renderer&, const Value& v, CallArgs& a) {
  const Value& o = other("le", a);
  return py_less(v, o) || py_equal(v, o);
}
bool t_gt(Renderer&, const Value& v, CallArgs& a) { return py_less(other("gt", a), v); }
bool t_ge(Renderer&, const Value& v, CallArgs& a) {
  const Value& o = other("ge", a);
  return py_less(o, v) || py_equal(v, o);
}
bool t_in(Renderer&, const Value& v, CallArgs& a) { return contains(other("in", a), v); }

// `value is sameas other`: Python identity. None and booleans are singletons, small ints are
// cached, and shared strings, lists and dicts are the same object when they come from one place.
bool t_sameas(Renderer&, const Value& v, CallArgs& a) {
  const Value& o = other("sameas", a);
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::none:
    case Value::Kind::undefined:
      return v.is_none();
    case Value::Kind::boolean:
      return v.as_bool() == o.as_bool();
    case Value::Kind::integer:
      return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Value::Kind::string:
      return v.str_ptr() == o.str_ptr();
    case Value::Kind::list:
      return &v.list() == &o.list();
    case Value::Kind::dict:
      return &v.dict() == &o.dict();
    case Value::Kind::ns:
      return v.ns() == o.ns();
    case Value::Kind::callable:
      return &v.callable() == &o.callable();
    default:
      return false;
  }
}

bool t_filter(Renderer&, const Value& v, CallArgs& a) {
  no_args("filter", a);
  return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(Renderer&, const Value& v, CallArgs& a) {
  no_args("test", a);
  return v.is_string() && find_test(v.str()) != nullptr;
}

struct Entry {
  const char* name;
  TestFn fn;
};
constexpr std::array kTests{
    Entry{"defined", t_defined},
    Entry{"undefined", t_undefined},
    Entry{"none", t_none},
    Entry{"boolean", t_boolean},
    Entry{"false", t_false},
    Entry{"true", t_true},
    Entry{"integer", t_integer},
    Entry{"float", t_float},
    Entry{"number", t_number},
    Entry{"string", t_string},
    Entry{"mapping", t_mapping},
    Entry{"sequence", t_sequence},
    Entry{"iterable", t_iterable},
    Entry{"callable", t_callable},
    Entry{"lower", t_lower},
    Entry{"upper", t_upper},
    Entry{"escaped", t_escaped},
    Entry{"odd", t_odd},
    Entry{"even", t_even},
    Entry{"divisibleby", t_divisibleby},
    Entry{"eq", t_eq},
    Entry{"equalto", t_eq},
    Entry{"==", t_eq},
    Entry{"ne", t_ne},
    Entry{"!=", t_ne},
    Entry{"lt", t_lt},
    Entry{"lessthan", t_lt},
    Entry{"<", t_lt},
    Entry{"le", t_le},
    Entry{"<=", t_le},
    Entry{"gt", t_gt},
    Entry{"greaterthan", t_gt},
    Entry{">", t_gt},
    Entry{"ge", t_ge},
    Entry{">=", t_ge},
    Entry{"in", t_in},
    Entry{"sameas", t_sameas},
    Entry{"filter", t_filter},
    Entry{"test", t_test},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const Entry& e : kTests)
    if (name == e.name) return e.fn;
  return nullptr;
}

bool jinja2_has_test(std::string_view name) { return find_test(name) != nullptr; }

}  // namespace braid::chat::jinja
