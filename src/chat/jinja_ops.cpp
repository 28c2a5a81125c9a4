#include "chat/jinja_ops.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/jinja_builtins.h"
#include "chat/py_text.h"

namespace braid::chat::jinja {

namespace {

bool int_like(const Value& v) { return v.is_bool() || v.is_int(); }

void check_depth(int depth) {
  if (depth > kMaxDataDepth)
    fail(ErrorKind::invalid_argument,
         "a value nested deeper than " + std::to_string(kMaxDataDepth) + " levels");
}

// "'dict object'", "'None'": how jinja2 names an object in "has no attribute" messages.
std::string object_name(const Value& v) {
  if (v.is_none()) return "'None'";
  std::string name = "'";
  name += v.type_name();
  name += " object'";
  return name;
}

Value missing_attribute(const Value& obj, std::string_view name) {
  return Value::undefined(object_name(obj) + " has no attribute '" + std::string(name) + "'");
}

Value missing_element(const Value& obj, const Value& key) {
  return Value::undefined(object_name(obj) + " has no element " + to_repr(key));
}

void check_size(size_t bytes) {
  if (bytes > kMaxStringBytes)
    fail(ErrorKind::invalid_argument, "a string or list the template builds would pass " +
                                          std::to_string(kMaxStringBytes >> 20) + " MiB");
}

int64_t add_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    fail(ErrorKind::unsupported, "integer overflow (past 64 bits)");
  return r;
}
int64_t sub_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r))
    fail(ErrorKind::unsupported, "integer overflow (past 64 bits)");
  return r;
}
int64_t mul_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    fail(ErrorKind::unsupported, "integer overflow (past 64 bits)");
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) type_error("integer division or modulo by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1)
    fail(ErrorKind::unsupported, "integer overflow (past 64 bits)");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0) type_error("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// Python's float divmod: the floor quotient and a remainder with the divisor's sign.
std::pair<double, double> float_divmod(double vx, double wx) {
  if (wx == 0.0) type_error("float division by zero");
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  return {floordiv, mod};
}

Value repeat(const Value& seq, int64_t times) {
  if (times <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.list().tuple);
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (!s.empty() && static_cast<uint64_t>(times) > kMaxStringBytes / s.size())
      check_size(kMaxStringBytes + 1);
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.list().items;
  if (!items.empty() && static_cast<uint64_t>(times) > kMaxStringBytes / 16 / items.size())
    check_size(kMaxStringBytes + 1);
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.list().tuple);
}

[[noreturn]] void unsupported_operands(const char* op, const Value& a, const Value& b) {
  type_error(std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() +
             "' and '" + b.type_name() + "'");
}

// printf-style `format % args`: the conversions templates use (%s %r %d %i %f %x %%), with
// flags, width and precision.
Value percent_format(const std::string& format, const Value& args) {
  std::vector<Value> positional;
  const Dict* mapping = nullptr;
  // Python treats any subscriptable non-tuple (a dict, but also a list) as a mapping here: then
  // unused arguments are no error.
  const bool mapping_like =
      args.is_dict() || args.is_undefined() || (args.is_list() && !args.list().tuple);
  if (args.is_list() && args.list().tuple)
    positional = args.list().items;
  else
    positional.push_back(args);
  if (args.is_dict()) mapping = &args.dict();
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) type_error("incomplete format");
    if (format[i] == '%') {
      out += '%';
      continue;
    }
    const Value* arg = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (args.is_undefined()) fail_undefined(args);
      if (close == std::string::npos || !mapping) type_error("format requires a mapping");
      arg = mapping->find(std::string_view(format).substr(i + 1, close - i - 1));
      if (!arg) type_error("format key '" + format.substr(i + 1, close - i - 1) + "' missing");
      i = close + 1;
    }
    std::string spec = "%";
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos)
      spec += format[i++];
    while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i])))
      spec += format[i++];
    if (i < format.size() && format[i] == '.') {
      spec += format[i++];
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i])))
        spec += format[i++];
    }
    if (spec.size() > 12) type_error("format specifier too long");
    if (i >= format.size()) type_error("incomplete format");
    const char conv = format[i];
    if (!arg) {
      if (next >= positional.size()) type_error("not enough arguments for format string");
      arg = &positional[next++];
    }
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        const std::string text = conv == 's' ? to_str(*arg) : to_repr(*arg);
        // Width and precision apply to code points in Python; pad by hand.
        std::string_view sv(text);
        size_t width = 0;
        bool left = spec.find('-') != std::string::npos;
        const size_t dot = spec.find('.');
        std::string digits = spec.substr(1, dot == std::string::npos ? std::string::npos : dot - 1);
        while (!digits.empty() && !std::isdigit(static_cast<unsigned char>(digits[0])))
          digits.erase(0, 1);
        if (!digits.empty()) width = std::stoul(digits);
        std::string shown(sv);
        if (dot != std::string::npos) {
          const std::string digits_after = spec.substr(dot + 1);
          const size_t precision = digits_after.empty() ? 0 : std::stoul(digits_after);
          const auto cps = py::code_points(shown);
          if (cps.size() > precision) shown = py::from_code_points(cps, 0, precision);
        }
        const size_t len = py::length(shown);
        if (len < width) {
          if (left)
            shown.append(width - len, ' ');
          else
            shown.insert(0, width - len, ' ');
        }
        out += shown;
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!arg->is_number())
          type_error("%" + std::string(1, conv) + " format: a real number is required, not " +
                     arg->type_name());
        const int64_t n = arg->is_float() ? checked_int(arg->as_float()) : arg->int_like();
        std::snprintf(buf, sizeof buf, (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(),
                      static_cast<long long>(n));
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!arg->is_number()) type_error("must be real number, not " + arg->type_name());
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), arg->as_float());
        out += buf;
        break;
      }
      default:
        fail(ErrorKind::unsupported,
             std::string("format conversion '%") + conv + "' is not supported");
    }
    check_size(out.size());
  }
  if (!mapping_like && next < positional.size())
    type_error("not all arguments converted during string formatting");
  return Value::string(std::move(out));
}

void append_repr(const Value& v, std::string& out, int depth);

void append_str_impl(const Value& v, std::string& out, int depth) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return;
    case Value::Kind::string:
      out += v.str();
      return;
    default:
      append_repr(v, out, depth);
  }
}

void append_repr(const Value& v, std::string& out, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::undefined:
      out += "Undefined";
      return;
    case Value::Kind::none:
      out += "None";
      return;
    case Value::Kind::boolean:
      out += v.as_bool() ? "True" : "False";
      return;
    case Value::Kind::integer:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::floating:
      out += py::float_repr(v.as_float());
      return;
    case Value::Kind::string:
      out += py::repr(v.str());
      return;
    case Value::Kind::list: {
      const List& l = v.list();
      out += l.tuple ? '(' : '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        append_repr(l.items[i], out, depth + 1);
      }
      if (l.tuple && l.items.size() == 1) out += ',';
      out += l.tuple ? ')' : ']';
      check_size(out.size());
      return;
    }
    case Value::Kind::dict: {
      out += '{';
      bool first = true;
      for (const auto& [k, val] : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        append_repr(k, out, depth + 1);
        out += ": ";
        append_repr(val, out, depth + 1);
      }
      out += '}';
      check_size(out.size());
      return;
    }
    case Value::Kind::ns: {
      out += "<Namespace {";
      bool first = true;
      for (const auto& [k, val] : v.ns()->attrs) {
        if (!first) out += ", ";
        first = false;
        out += py::repr(k);
        out += ": ";
        append_repr(val, out, depth + 1);
      }
      out += "}>";
      check_size(out.size());
      return;
    }
    case Value::Kind::callable:
      out += "<function " + v.callable().name() + ">";
      return;
  }
}

}  // namespace

int64_t checked_int(double d) {
  if (std::isnan(d)) type_error("cannot convert float NaN to integer");
  if (std::isinf(d)) type_error("cannot convert float infinity to integer");
  const double t = std::trunc(d);
  if (t >= 9223372036854775808.0 || t < -9223372036854775808.0)
    fail(ErrorKind::unsupported, "integer overflow (past 64 bits)");
  return static_cast<int64_t>(t);
}

// ------------------------------------------------------------------------------ comparisons
bool py_equal(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.int_like() == b.int_like();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return true;
    case Value::Kind::string:
      return a.str() == b.str();
    case Value::Kind::list: {
      const List& x = a.list();
      const List& y = b.list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!py_equal(x.items[i], y.items[i], depth + 1)) return false;
      return true;
    }
    case Value::Kind::dict: {
      const Dict& x = a.dict();
      const Dict& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !py_equal(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::ns:
      return a.ns() == b.ns();
    case Value::Kind::callable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

bool py_less(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.int_like() < b.int_like();
    return a.as_float() < b.as_float();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order = code point order
  if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!py_equal(x[i], y[i], depth + 1)) return py_less(x[i], y[i], depth + 1);
    return x.size() < y.size();
  }
  type_error("'<' not supported between instances of '" + a.type_name() + "' and '" +
             b.type_name() + "'");
}

int py_compare(const Value& a, const Value& b) {
  if (py_less(a, b)) return -1;
  if (py_less(b, a)) return 1;
  return 0;
}

// ---------------------------------------------------------------------------------- strings
std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  append_str_impl(v, out, 0);
  return out;
}

void append_str(const Value& v, std::string& out) { append_str_impl(v, out, 0); }

std::string to_repr(const Value& v) {
  std::string out;
  append_repr(v, out, 0);
  return out;
}

// ------------------------------------------------------------------------------- arithmetic
Value binary(BinOp op, const Value& a, const Value& b) {
  // str % undefined: Python takes the undefined value (it has __getitem__) for a mapping.
  if (op == BinOp::mod && a.is_string() && b.is_undefined()) return percent_format(a.str(), b);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool ints = numbers && int_like(a) && int_like(b);
  switch (op) {
    case BinOp::add:
      if (ints) return Value::integer(add_checked(a.int_like(), b.int_like()));
      if (numbers) return Value::floating(a.as_float() + b.as_float());
      if (a.is_string() && b.is_string()) {
        check_size(a.str().size() + b.str().size());
        return Value::string(a.str() + b.str());
      }
      if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
        std::vector<Value> items = a.list().items;
        check_size((items.size() + b.list().items.size()) * 16);
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        return Value::list(std::move(items), a.list().tuple);
      }
      if (a.is_string() || a.is_list())
        type_error("can only concatenate " + a.type_name() + " (not \"" + b.type_name() +
                   "\") to " + a.type_name());
      unsupported_operands("+", a, b);
    case BinOp::sub:
      if (ints) return Value::integer(sub_checked(a.int_like(), b.int_like()));
      if (numbers) return Value::floating(a.as_float() - b.as_float());
      unsupported_operands("-", a, b);
    case BinOp::mul:
      if (ints) return Value::integer(mul_checked(a.int_like(), b.int_like()));
      if (numbers) return Value::floating(a.as_float() * b.as_float());
      if ((a.is_string() || a.is_list()) && int_like(b)) return repeat(a, b.int_like());
      if ((b.is_string() || b.is_list()) && int_like(a)) return repeat(b, a.int_like());
      if (a.is_string() || a.is_list() || b.is_string() || b.is_list())
        type_error("can't multiply sequence by non-int of type '" +
                   ((a.is_string() || a.is_list()) ? b : a).type_name() + "'");
      unsupported_operands("*", a, b);
    case BinOp::div:
      if (numbers) {
        if (b.as_float() == 0.0) type_error("division by zero");
        return Value::floating(a.as_float() / b.as_float());
      }
      unsupported_operands("/", a, b);
    case BinOp::floordiv:
      if (ints) return Value::integer(floor_div(a.int_like(), b.int_like()));
      if (numbers) return Value::floating(float_divmod(a.as_float(), b.as_float()).first);
      unsupported_operands("//", a, b);
    case BinOp::mod:
      if (ints) return Value::integer(floor_mod(a.int_like(), b.int_like()));
      if (numbers) return Value::floating(float_divmod(a.as_float(), b.as_float()).second);
      if (a.is_string()) return percent_format(a.str(), b);
      unsupported_operands("%", a, b);
    case BinOp::pow:
      if (ints && b.int_like() >= 0) {
        int64_t base = a.int_like(), exp = b.int_like(), result = 1;
        while (exp > 0) {
          if (exp & 1) result = mul_checked(result, base);
          exp >>= 1;
          if (exp) base = mul_checked(base, base);
        }
        return Value::integer(result);
      }
      if (numbers) {
        const double x = a.as_float(), y = b.as_float();
        if (x == 0.0 && y < 0) type_error("0.0 cannot be raised to a negative power");
        const double r = std::pow(x, y);
        if (std::isnan(r) && !std::isnan(x) && !std::isnan(y))
          fail(ErrorKind::unsupported, "a power with a complex result");
        if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
          type_error("(34, 'Numerical result out of range')");
        return Value::floating(r);
      }
      unsupported_operands("** or pow()", a, b);
  }
  unsupported_operands("?", a, b);
}

Value negate(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (int_like(v)) return Value::integer(sub_checked(0, v.int_like()));
  if (v.is_float()) return Value::floating(-v.as_float());
  type_error("bad operand type for unary -: '" + v.type_name() + "'");
}

Value unary_plus(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (int_like(v)) return Value::integer(v.int_like());
  if (v.is_float()) return v;
  type_error("bad operand type for unary +: '" + v.type_name() + "'");
}

// ------------------------------------------------------------------------------ containers
bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::string:
      if (!item.is_string())
        type_error("'in <string>' requires string as left operand, not " + item.type_name());
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::list:
      for (const Value& v : container.list().items)
        if (py_equal(v, item)) return true;
      return false;
    case Value::Kind::dict:
      return container.dict().find(item) != nullptr;
    case Value::Kind::undefined:
      return false;  // jinja2's Undefined iterates as empty
    default:
      type_error("argument of type '" + container.type_name() + "' is not iterable");
  }
}

int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::string:
      return static_cast<int64_t>(py::length(v.str()));
    case Value::Kind::list:
      return static_cast<int64_t>(v.list().items.size());
    case Value::Kind::dict:
      return static_cast<int64_t>(v.dict().items.size());
    case Value::Kind::undefined:
      return 0;
    default:
      type_error("object of type '" + v.type_name() + "' has no len()");
  }
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_list()) charge(1 + v.list().items.size() / 16);
  if (v.is_dict()) charge(1 + v.dict().items.size() / 16);
  switch (v.kind()) {
    case Value::Kind::list:
      return v.list().items;
    case Value::Kind::dict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().items.size());
      for (const auto& [k, val] : v.dict().items) keys.push_back(k);
      return keys;
    }
    case Value::Kind::string: {
      std::vector<Value> chars;
      const std::string& s = v.str();
      for (size_t pos = 0; pos < s.size();) {
        const size_t at = pos;
        py::next_code_point(s, pos);
        chars.push_back(Value::string(s.substr(at, pos - at)));
      }
      return chars;
    }
    case Value::Kind::undefined:
      return {};
    default:
      type_error("'" + v.type_name() + "' object is not iterable");
  }
}

// ---------------------------------------------------------------------------------- access
Value get_attr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::undefined:
      fail_undefined(obj);
    case Value::Kind::dict: {
      // A method of dict wins over a key of the same name (Python's getattr comes first).
      if (auto m = bound_method(obj, name)) return *m;
      if (const Value* v = obj.dict().find(name)) return *v;
      return missing_attribute(obj, name);
    }
    case Value::Kind::ns:
      if (const Value* v = obj.ns()->find(name)) return *v;
      return missing_attribute(obj, name);
    default:
      if (auto m = bound_method(obj, name)) return *m;
      return missing_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::undefined:
      fail_undefined(obj);
    case Value::Kind::list:
    case Value::Kind::string: {
      if (key.is_string()) return get_attr(obj, key.str());
      if (!int_like(key)) return missing_element(obj, key);
      int64_t i = key.int_like();
      if (obj.is_list()) {
        const auto& items = obj.list().items;
        const int64_t n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return missing_element(obj, key);
        return items[static_cast<size_t>(i)];
      }
      const std::string& s = obj.str();
      if (py::is_ascii(s)) {
        const int64_t n = static_cast<int64_t>(s.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return missing_element(obj, key);
        return Value::string(s.substr(static_cast<size_t>(i), 1));
      }
      const auto cps = py::code_points(s);
      const int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return missing_element(obj, key);
      return Value::string(
          py::from_code_points(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
    }
    case Value::Kind::dict: {
      const bool is_hashable = !(key.is_list() && !key.list().tuple) && !key.is_dict();
      if (is_hashable)
        if (const Value* v = obj.dict().find(key)) return *v;
      if (key.is_string()) return get_attr(obj, key.str());
      return missing_element(obj, key);
    }
    case Value::Kind::ns:
      if (key.is_string()) return get_attr(obj, key.str());
      return missing_element(obj, key);
    default:
      if (key.is_string()) return missing_attribute(obj, key.str());
      return missing_element(obj, key);
  }
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  // jinja2 compiles a slice to Python's own subscript (no sandbox lookup, no undefined result).
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) type_error("unhashable type: 'slice'");
  if (!obj.is_list() && !obj.is_string())
    type_error("'" + obj.type_name() + "' object is not subscriptable");
  for (const Value* b : {&start_v, &stop_v, &step_v})
    if (!b->is_none() && !int_like(*b))
      type_error("slice indices must be integers or None or have an __index__ method");
  const int64_t step = step_v.is_none() ? 1 : step_v.int_like();
  if (step == 0) type_error("slice step cannot be zero");
  std::vector<uint32_t> cps;
  const bool ascii = obj.is_string() && py::is_ascii(obj.str());
  if (obj.is_string() && !ascii) cps = py::code_points(obj.str());
  const int64_t len = obj.is_list() ? static_cast<int64_t>(obj.list().items.size())
                      : ascii       ? static_cast<int64_t>(obj.str().size())
                                    : static_cast<int64_t>(cps.size());
  const int64_t lower = step > 0 ? 0 : -1;
  const int64_t upper = step > 0 ? len : len - 1;
  auto adjust = [&](const Value& v, int64_t absent) {
    if (v.is_none()) return absent;
    int64_t i = v.int_like();
    if (i < 0) {
      i += len;
      if (i < lower) i = lower;
    } else if (i > upper) {
      i = upper;
    }
    return i;
  };
  const int64_t start = adjust(start_v, step > 0 ? lower : upper);
  const int64_t stop = adjust(stop_v, step > 0 ? upper : lower);
  std::vector<size_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    picked.push_back(static_cast<size_t>(i));
  if (obj.is_list()) {
    std::vector<Value> items;
    items.reserve(picked.size());
    for (size_t i : picked) items.push_back(obj.list().items[i]);
    return Value::list(std::move(items), obj.list().tuple);
  }
  std::string out;
  out.reserve(picked.size());
  for (size_t i : picked) {
    if (ascii)
      out += obj.str()[i];
    else
      py::append_utf8(cps[i], out);
  }
  return Value::string(std::move(out));
}

}  // namespace braid::chat::jinja
