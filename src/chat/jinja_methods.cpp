// Methods of Python's str, dict and list that templates call: 'x'.strip(), s.split('</think>'),
// message.get('content'), d.items(), '{}'.format(x). Methods that modify a list or dict are
// refused, as transformers' ImmutableSandboxedEnvironment refuses them.
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>

#include "chat/jinja_builtins.h"
#include "chat/jinja_ops.h"
#include "chat/py_text.h"

namespace braid::chat::jinja {

namespace {

using MethodFn = Value (*)(Renderer& r, const Value& self, CallArgs& args);

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string name, MethodFn fn)
      : self_(std::move(self)), name_(std::move(name)), fn_(fn) {}
  std::string name() const override { return name_; }
  Value call(Renderer& r, CallArgs& args) const override { return fn_(r, self_, args); }

 private:
  Value self_;
  std::string name_;
  MethodFn fn_;
};

std::optional<std::string> opt_str(const Value& v, const char* fn) {
  if (v.is_none()) return std::nullopt;
  if (!v.is_string())
    type_error(std::string(fn) + " arg must be None or str, not " + v.type_name());
  return v.str();
}

const std::string& str_arg(const Value& v, const char* fn) {
  if (!v.is_string()) type_error(std::string(fn) + "() argument must be str, not " + v.type_name());
  return v.str();
}

int64_t int_arg(const Value& v, const char* fn) {
  if (!v.is_int() && !v.is_bool())
    type_error("'" + v.type_name() + "' object cannot be interpreted as an integer (" + fn + ")");
  return v.int_like();
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::list(std::move(items));
}

// ------------------------------------------------------------------------------ str methods
Value m_strip(Renderer&, const Value& s, CallArgs& a) {
  const auto p = bind_args("strip", a, {{"chars", Value::none()}});
  return Value::string(std::string(py::strip(s.str(), opt_str(p[0], "strip"), true, true)));
}
Value m_lstrip(Renderer&, const Value& s, CallArgs& a) {
  const auto p = bind_args("lstrip", a, {{"chars", Value::none()}});
  return Value::string(std::string(py::strip(s.str(), opt_str(p[0], "lstrip"), true, false)));
}
Value m_rstrip(Renderer&, const Value& s, CallArgs& a) {
  const auto p = bind_args("rstrip", a, {{"chars", Value::none()}});
  return Value::string(std::string(py::strip(s.str(), opt_str(p[0], "rstrip"), false, true)));
}
Value m_split(Renderer&, const Value& s, CallArgs& a) {
  const auto p = bind_args("split", a, {{"sep", Value::none()}, {"maxsplit", Value::integer(-1)}});
  const auto sep = opt_str(p[0], "split");
  if (sep && sep->empty()) type_error("empty separator");
  return string_list(py::split(s.str(), sep, int_arg(p[1], "split")));
}
Value m_rsplit(Renderer&, const Value& s, CallArgs& a) {
  const auto p = bind_args("rsplit", a, {{"sep", Value::none()}, {"maxsplit", Value::integer(-1)}});
  const auto sep = opt_str(p[0], "rsplit");
  if (sep && sep->empty()) type_error("empty separator");
  return string_list(py::rsplit(s.str(), sep, int_arg(p[1], "rsplit")));
}
Value m_splitlines(Renderer&, const Value& s, CallArgs& a) {
  const auto p = bind_args("splitlines", a, {{"keepends", Value::boolean(false)}});
  return string_list(py::splitlines(s.str(), p[0].truthy()));
}

// str.startswith / endswith: a prefix or a tuple of them, optional start and end.
bool affix_match(const Value& s, CallArgs& a, const char* fn, bool at_start) {
  const auto p = bind_args(
      fn, a, {{"prefix", Value(), true}, {"start", Value::none()}, {"end", Value::none()}});
  std::string_view text = s.str();
  if (!p[1].is_none() || !p[2].is_none()) {
    const Value sliced = slice(s, p[1], p[2], Value::none());
    if (!sliced.is_string()) return false;
    CallArgs inner{{p[0]}, {}};
    return affix_match(sliced, inner, fn, at_start);
  }
  auto one = [&](const Value& x) {
    if (!x.is_string())
      type_error(std::string(fn) + " first arg must be str or a tuple of str, not " +
                 x.type_name());
    const std::string& affix = x.str();
    if (affix.size() > text.size()) return false;
    return at_start ? text.substr(0, affix.size()) == affix
                    : text.substr(text.size() - affix.size()) == affix;
  };
  if (p[0].is_list() && p[0].list().tuple) {
    for (const Value& x : p[0].list().items)
      if (one(x)) return true;
    return false;
  }
  return one(p[0]);
}
Value m_startswith(Renderer&, const Value& s, CallArgs& a) {
  return Value::boolean(affix_match(s, a, "startswith", true));
}
Value m_endswith(Renderer&, const Value& s, CallArgs& a) {
  return Value::boolean(affix_match(s, a, "endswith", false));
}

Value m_replace(Renderer&, const Value& s, CallArgs& a) {
  const auto p =
      bind_args("replace", a,
                {{"old", Value(), true}, {"new", Value(), true}, {"count", Value::integer(-1)}});
  std::string out;
  if (!py::replace(s.str(), str_arg(p[0], "replace"), str_arg(p[1], "replace"),
                   int_arg(p[2], "replace"), kMaxStringBytes, out))
    fail(ErrorKind::invalid_argument, "replace() would build a string past the size limit");
  return Value::string(std::move(out));
}

Value m_upper(Renderer&, const Value& s, CallArgs& a) {
  bind_args("upper", a, {});
  return Value::string(py::upper(s.str()));
}
Value m_lower(Renderer&, const Value& s, CallArgs& a) {
  bind_args("lower", a, {});
  return Value::string(py::lower(s.str()));
}
Value m_title(Renderer&, const Value& s, CallArgs& a) {
  bind_args("title", a, {});
  return Value::string(py::title(s.str()));
}
Value m_capitalize(Renderer&, const Value& s, CallArgs& a) {
  bind_args("capitalize", a, {});
  return Value::string(py::capitalize(s.str()));
}
Value m_swapcase(Renderer&, const Value& s, CallArgs& a) {
  bind_args("swapcase", a, {});
  return Value::string(py::swapcase(s.str()));
}

Value find_impl(const Value& s, CallArgs& a, const char* fn, bool reverse, bool raise) {
  const auto p =
      bind_args(fn, a, {{"sub", Value(), true}, {"start", Value::none()}, {"end", Value::none()}});
  const std::string& sub = str_arg(p[0], fn);
  int64_t offset = 0;
  Value text = s;
  if (!p[1].is_none() || !p[2].is_none()) {
    text = slice(s, p[1], p[2], Value::none());
    if (!text.is_string())
      type_error(std::string(fn) + "(): slice indices must be integers or None");
    if (!p[1].is_none()) {
      int64_t start = int_arg(p[1], fn);
      const int64_t n = static_cast<int64_t>(py::length(s.str()));
      if (start < 0) start = std::max<int64_t>(0, start + n);
      offset = std::min(start, n);
    }
  }
  const int64_t at = py::find(text.str(), sub, reverse);
  if (at < 0) {
    if (raise) type_error("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(at + offset);
}
Value m_find(Renderer&, const Value& s, CallArgs& a) {
  return find_impl(s, a, "find", false, false);
}
Value m_rfind(Renderer&, const Value& s, CallArgs& a) {
  return find_impl(s, a, "rfind", true, false);
}
Value m_index(Renderer&, const Value& s, CallArgs& a) {
  return find_impl(s, a, "index", false, true);
}
Value m_rindex(Renderer&, const Value& s, CallArgs& a) {
  return find_impl(s, a, "rindex", true, true);
}

Value m_count(Renderer&, const Value& s, CallArgs& a) {
  const auto p = bind_args("count", a, {{"sub", Value(), true}});
  return Value::integer(py::count(s.str(), str_arg(p[0], "count")));
}

Value m_join(Renderer&, const Value& s, CallArgs& a) {
  const auto p = bind_args("join", a, {{"iterable", Value(), true}});
  std::string out;
  size_t i = 0;
  for (const Value& item : iterate(p[0])) {
    if (!item.is_string())
      type_error("sequence item " + std::to_string(i) + ": expected str instance, " +
                 item.type_name() + " found");
    if (i++) out += s.str();
    out += item.str();
    if (out.size() > kMaxStringBytes) fail(ErrorKind::invalid_argument, "join() result too large");
  }
  return Value::string(std::move(out));
}

template <bool (*Pred)(uint32_t)>
Value all_chars(const Value& s, CallArgs& a, const char* fn) {
  bind_args(fn, a, {});
  const auto cps = py::code_points(s.str());
  return Value::boolean(!cps.empty() && std::all_of(cps.begin(), cps.end(), Pred));
}
bool is_alnum(uint32_t cp) { return py::is_alpha(cp) || py::is_decimal(cp); }
Value m_isdigit(Renderer&, const Value& s, CallArgs& a) {
  return all_chars<py::is_decimal>(s, a, "isdigit");
}
Value m_isdecimal(Renderer&, const Value& s, CallArgs& a) {
  return all_chars<py::is_decimal>(s, a, "isdecimal");
}
Value m_isnumeric(Renderer&, const Value& s, CallArgs& a) {
  return all_chars<py::is_decimal>(s, a, "isnumeric");
}
Value m_isalpha(Renderer&, const Value& s, CallArgs& a) {
  return all_chars<py::is_alpha>(s, a, "isalpha");
}
Value m_isalnum(Renderer&, const Value& s, CallArgs& a) {
  return all_chars<is_alnum>(s, a, "isalnum");
}
Value m_isspace(Renderer&, const Value& s, CallArgs& a) {
  return all_chars<py::is_space>(s, a, "isspace");
}
Value m_isupper(Renderer&, const Value& s, CallArgs& a) {
  bind_args("isupper", a, {});
  return Value::boolean(py::str_is_upper(s.str()));
}
Value m_islower(Renderer&, const Value& s, CallArgs& a) {
  bind_args("islower", a, {});
  return Value::boolean(py::str_is_lower(s.str()));
}

Value m_removeprefix(Renderer&, const Value& s, CallArgs& a) {
  const auto p = bind_args("removeprefix", a, {{"prefix", Value(), true}});
  const std::string& x = str_arg(p[0], "removeprefix");
  const std::string& t = s.str();
  return Value::string(t.compare(0, x.size(), x) == 0 ? t.substr(x.size()) : t);
}
Value m_removesuffix(Renderer&, const Value& s, CallArgs& a) {
  const auto p = bind_args("removesuffix", a, {{"suffix", Value(), true}});
  const std::string& x = str_arg(p[0], "removesuffix");
  const std::string& t = s.str();
  const bool ends =
      !x.empty() && t.size() >= x.size() && t.compare(t.size() - x.size(), x.size(), x) == 0;
  return Value::string(ends ? t.substr(0, t.size() - x.size()) : t);
}

Value partition_impl(const Value& s, CallArgs& a, const char* fn, bool reverse) {
  const auto p = bind_args(fn, a, {{"sep", Value(), true}});
  const std::string& sep = str_arg(p[0], fn);
  if (sep.empty()) type_error("empty separator");
  const std::string& t = s.str();
  const size_t at = reverse ? t.rfind(sep) : t.find(sep);
  if (at == std::string::npos) {
    std::vector<Value> parts = reverse
                                   ? std::vector<Value>{Value::string(""), Value::string(""), s}
                                   : std::vector<Value>{s, Value::string(""), Value::string("")};
    return Value::list(std::move(parts), true);
  }
  return Value::list(
      {Value::string(t.substr(0, at)), p[0], Value::string(t.substr(at + sep.size()))}, true);
}
Value m_partition(Renderer&, const Value& s, CallArgs& a) {
  return partition_impl(s, a, "partition", false);
}
Value m_rpartition(Renderer&, const Value& s, CallArgs& a) {
  return partition_impl(s, a, "rpartition", true);
}

Value pad_impl(const Value& s, CallArgs& a, const char* fn, int where) {
  const auto p = bind_args(fn, a, {{"width", Value(), true}, {"fillchar", Value::string(" ")}});
  const int64_t width = int_arg(p[0], fn);
  const std::string& fill = str_arg(p[1], fn);
  if (py::length(fill) != 1) type_error("The fill character must be exactly one character long");
  const int64_t len = static_cast<int64_t>(py::length(s.str()));
  if (width <= len) return s;
  if (width > static_cast<int64_t>(kMaxStringBytes))
    fail(ErrorKind::invalid_argument, "padding too wide");
  const int64_t total = width - len;
  int64_t left = where < 0 ? 0 : where > 0 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s.str();
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return Value::string(std::move(out));
}
Value m_ljust(Renderer&, const Value& s, CallArgs& a) { return pad_impl(s, a, "ljust", -1); }
Value m_rjust(Renderer&, const Value& s, CallArgs& a) { return pad_impl(s, a, "rjust", 1); }
Value m_center(Renderer&, const Value& s, CallArgs& a) { return pad_impl(s, a, "center", 0); }
Value m_zfill(Renderer&, const Value& s, CallArgs& a) {
  const auto p = bind_args("zfill", a, {{"width", Value(), true}});
  const int64_t width = int_arg(p[0], "zfill");
  std::string t = s.str();
  const int64_t len = static_cast<int64_t>(py::length(t));
  if (width <= len) return s;
  if (width > static_cast<int64_t>(kMaxStringBytes))
    fail(ErrorKind::invalid_argument, "zfill too wide");
  const size_t sign = (!t.empty() && (t[0] == '+' || t[0] == '-')) ? 1 : 0;
  t.insert(sign, static_cast<size_t>(width - len), '0');
  return Value::string(std::move(t));
}

// ---- str.format: fields {}, {0}, {name}, {0.attr}, {0[key]}, !r/!s, and format specs ----
std::string apply_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return to_str(v);
  size_t i = 0;
  char fill = ' ', align = 0, sign = '-';
  bool zero = false, grouping = false;
  if (spec.size() >= 2 && std::string_view("<>^=").find(spec[1]) != std::string_view::npos) {
    fill = spec[0];
    align = spec[1];
    i = 2;
  } else if (std::string_view("<>^=").find(spec[0]) != std::string_view::npos) {
    align = spec[0];
    i = 1;
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  if (i < spec.size() && spec[i] == '0') {
    zero = true;
    ++i;
  }
  size_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])))
    width = width * 10 + static_cast<size_t>(spec[i++] - '0');
  if (i < spec.size() && spec[i] == ',') {
    grouping = true;
    ++i;
  }
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    precision = 0;
    ++i;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])))
      precision = precision * 10 + (spec[i++] - '0');
  }
  char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size() || width > 4096 || precision > 100)
    fail(ErrorKind::unsupported, "format spec '" + spec + "' is not supported");
  std::string body;
  bool numeric = false;
  if (v.is_string() && (type == 0 || type == 's')) {
    body = v.str();
    if (precision >= 0) {
      const auto cps = py::code_points(body);
      if (cps.size() > static_cast<size_t>(precision))
        body = py::from_code_points(cps, 0, static_cast<size_t>(precision));
    }
  } else if (v.is_number() && !v.is_float() &&
             (type == 0 || type == 'd' || type == 'x' || type == 'X' || type == 'o' ||
              type == 'b')) {
    numeric = true;
    const int64_t n = v.int_like();
    uint64_t mag = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
    const int base = type == 'x' || type == 'X' ? 16 : type == 'o' ? 8 : type == 'b' ? 2 : 10;
    do {
      const int d = static_cast<int>(mag % static_cast<uint64_t>(base));
      body.insert(body.begin(),
                  static_cast<char>(d < 10 ? '0' + d : (type == 'X' ? 'A' : 'a') + d - 10));
      mag /= static_cast<uint64_t>(base);
    } while (mag);
    if (grouping && base == 10)
      for (int k = static_cast<int>(body.size()) - 3; k > 0; k -= 3)
        body.insert(static_cast<size_t>(k), ",");
    if (n < 0)
      body.insert(0, "-");
    else if (sign == '+')
      body.insert(0, "+");
    else if (sign == ' ')
      body.insert(0, " ");
  } else if (v.is_number() &&
             (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' ||
              type == 'G' || type == '%' || (type == 0 && v.is_float()))) {
    numeric = true;
    double d = v.as_float();
    char buf[512];
    if (type == 0 && precision < 0) {
      body = py::float_repr(d);
    } else {
      std::string f = "%";
      if (sign == '+' || sign == ' ') f += sign;
      f += "." + std::to_string(precision < 0 ? 6 : precision);
      if (type == '%') d *= 100;
      f += (type == '%' || type == 0) ? (type == 0 ? 'g' : 'f') : type;
      std::snprintf(buf, sizeof buf, f.c_str(), d);
      body = buf;
      if (type == '%') body += '%';
    }
  } else {
    fail(ErrorKind::unsupported,
         "format spec '" + spec + "' for a " + v.type_name() + " is not supported");
  }
  const size_t len = py::length(body);
  if (len >= width) return body;
  const size_t pad = width - len;
  if (!align) align = (numeric ? '>' : '<');
  if (zero && numeric && !spec.empty() && align == '>' && fill == ' ') {
    fill = '0';
    align = '=';
  }
  std::string fills(pad, fill);
  switch (align) {
    case '<':
      return body + fills;
    case '>':
      return fills + body;
    case '^':
      return std::string(pad / 2, fill) + body + std::string(pad - pad / 2, fill);
    default: {  // '=': padding after the sign
      const size_t sign_len =
          (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
      return body.substr(0, sign_len) + fills + body.substr(sign_len);
    }
  }
}

Value m_format(Renderer&, const Value& s, CallArgs& a) {
  const std::string& f = s.str();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      type_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) type_error("Single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    std::string spec;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    char conversion = 0;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) type_error("expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    size_t name_end = 0;
    while (name_end < field.size() && field[name_end] != '.' && field[name_end] != '[') ++name_end;
    const std::string head = field.substr(0, name_end);
    Value v;
    if (head.empty() || std::all_of(head.begin(), head.end(), [](char ch) {
          return std::isdigit(static_cast<unsigned char>(ch));
        })) {
      const size_t idx = head.empty() ? auto_index++ : std::stoul(head);
      if (idx >= a.positional.size())
        type_error("Replacement index " + std::to_string(idx) +
                   " out of range for positional args tuple");
      v = a.positional[idx];
    } else {
      auto it = std::find_if(a.keywords.begin(), a.keywords.end(),
                             [&](const auto& kw) { return kw.first == head; });
      if (it == a.keywords.end()) type_error("KeyError: '" + head + "'");
      v = it->second;
    }
    for (size_t p = name_end; p < field.size();) {
      if (field[p] == '.') {
        size_t q = p + 1;
        while (q < field.size() && field[q] != '.' && field[q] != '[') ++q;
        v = get_attr(v, field.substr(p + 1, q - p - 1));
        p = q;
      } else {
        const size_t q = field.find(']', p);
        if (q == std::string::npos) type_error("Missing ']' in format string");
        const std::string k = field.substr(p + 1, q - p - 1);
        const bool digits = !k.empty() && std::all_of(k.begin(), k.end(), [](char ch) {
          return std::isdigit(static_cast<unsigned char>(ch));
        });
        v = get_item(v, digits ? Value::integer(std::stoll(k)) : Value::string(k));
        p = q + 1;
      }
    }
    if (v.is_undefined()) fail_undefined(v);
    if (conversion == 'r' || conversion == 'a')
      v = Value::string(to_repr(v));
    else if (conversion == 's')
      v = Value::string(to_str(v));
    else if (conversion)
      type_error(std::string("Unknown conversion specifier ") + conversion);
    out += apply_spec(v, spec);
    if (out.size() > kMaxStringBytes)
      fail(ErrorKind::invalid_argument, "format() result too large");
  }
  return Value::string(std::move(out));
}

// ----------------------------------------------------------------------------- dict methods
Value m_items(Renderer&, const Value& d, CallArgs& a) {
  bind_args("items", a, {});
  std::vector<Value> items;
  items.reserve(d.dict().items.size());
  for (const auto& [k, v] : d.dict().items) items.push_back(Value::list({k, v}, true));
  return Value::list(std::move(items));
}
Value m_keys(Renderer&, const Value& d, CallArgs& a) {
  bind_args("keys", a, {});
  return Value::list(iterate(d));
}
Value m_values(Renderer&, const Value& d, CallArgs& a) {
  bind_args("values", a, {});
  std::vector<Value> items;
  items.reserve(d.dict().items.size());
  for (const auto& [k, v] : d.dict().items) items.push_back(v);
  return Value::list(std::move(items));
}
Value m_get(Renderer&, const Value& d, CallArgs& a) {
  if (!a.keywords.empty()) type_error("get() takes no keyword arguments");
  const auto p = bind_args("get", a, {{"key", Value(), true}, {"default", Value::none()}});
  const Value* v = d.dict().find(p[0]);
  return v ? *v : p[1];
}
Value m_copy(Renderer&, const Value& self, CallArgs& a) {
  bind_args("copy", a, {});
  return self;  // immutable: a copy is the same value
}

// ----------------------------------------------------------------------------- list methods
Value m_list_count(Renderer&, const Value& l, CallArgs& a) {
  const auto p = bind_args("count", a, {{"value", Value(), true}});
  int64_t n = 0;
  for (const Value& v : l.list().items) n += py_equal(v, p[0]);
  return Value::integer(n);
}
Value m_list_index(Renderer&, const Value& l, CallArgs& a) {
  const auto p = bind_args("index", a, {{"value", Value(), true}});
  const auto& items = l.list().items;
  for (size_t i = 0; i < items.size(); ++i)
    if (py_equal(items[i], p[0])) return Value::integer(static_cast<int64_t>(i));
  type_error(to_repr(p[0]) + " is not in list");
}

struct Method {
  const char* name;
  MethodFn fn;
};

constexpr std::array kStrMethods{
    Method{"strip", m_strip},
    Method{"lstrip", m_lstrip},
    Method{"rstrip", m_rstrip},
    Method{"split", m_split},
    Method{"rsplit", m_rsplit},
    Method{"splitlines", m_splitlines},
    Method{"startswith", m_startswith},
    Method{"endswith", m_endswith},
    Method{"replace", m_replace},
    Method{"upper", m_upper},
    Method{"lower", m_lower},
    Method{"casefold", m_lower},
    Method{"title", m_title},
    Method{"capitalize", m_capitalize},
    Method{"swapcase", m_swapcase},
    Method{"find", m_find},
    Method{"rfind", m_rfind},
    Method{"index", m_index},
    Method{"rindex", m_rindex},
    Method{"count", m_count},
    Method{"join", m_join},
    Method{"isdigit", m_isdigit},
    Method{"isdecimal", m_isdecimal},
    Method{"isnumeric", m_isnumeric},
    Method{"isalpha", m_isalpha},
    Method{"isalnum", m_isalnum},
    Method{"isspace", m_isspace},
    Method{"isupper", m_isupper},
    Method{"islower", m_islower},
    Method{"removeprefix", m_removeprefix},
    Method{"removesuffix", m_removesuffix},
    Method{"partition", m_partition},
    Method{"rpartition", m_rpartition},
    Method{"ljust", m_ljust},
    Method{"rjust", m_rjust},
    Method{"center", m_center},
    Method{"zfill", m_zfill},
    Method{"format", m_format},
};
constexpr std::array kDictMethods{
    Method{"items", m_items}, Method{"keys", m_keys}, Method{"values", m_values},
    Method{"get", m_get},     Method{"copy", m_copy},
};
constexpr std::array kListMethods{
    Method{"count", m_list_count},
    Method{"index", m_list_index},
    Method{"copy", m_copy},
};
// Methods that would change the object: the sandbox makes them unusable.
constexpr std::array<const char*, 6> kUnsafeDict{"clear",      "pop",    "popitem",
                                                 "setdefault", "update", "fromkeys"};
constexpr std::array<const char*, 8> kUnsafeList{"append", "extend", "insert", "pop",
                                                 "remove", "clear",  "sort",   "reverse"};

template <size_t N>
std::optional<Value> lookup(const std::array<Method, N>& table, const Value& obj,
                            std::string_view name) {
  for (const Method& m : table)
    if (name == m.name) return Value::callable(std::make_shared<BoundMethod>(obj, m.name, m.fn));
  return std::nullopt;
}

template <size_t N>
std::optional<Value> unsafe(const std::array<const char*, N>& names, const Value& obj,
                            std::string_view name) {
  for (const char* n : names)
    if (name == n)
      return Value::undefined("access to attribute '" + std::string(name) + "' of '" +
                                  obj.type_name() +
                                  "' object is unsafe (chat templates run in an immutable sandbox)",
                              true);
  return std::nullopt;
}

}  // namespace

std::optional<Value> bound_method(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::string:
      return lookup(kStrMethods, obj, name);
    case Value::Kind::dict:
      if (auto m = lookup(kDictMethods, obj, name)) return m;
      return unsafe(kUnsafeDict, obj, name);
    case Value::Kind::list:
      if (auto m = lookup(kListMethods, obj, name)) return m;
      return unsafe(kUnsafeList, obj, name);
    default:
      return std::nullopt;
  }
}

}  // namespace braid::chat::jinja
