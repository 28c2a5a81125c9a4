// jinja2's filters as chat templates use them, with transformers' tojson (json.dumps without
// HTML escaping). Filters that produce generators in jinja2 (map, select, ...) produce lists
// here; printing such a generator directly would show "<generator object ...>" in jinja2.
#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "chat/jinja_builtins.h"
#include "chat/jinja_json.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_render.h"
#include "chat/py_text.h"

namespace braid::chat::jinja {

namespace {

// ---------------------------------------------------------------------------------- helpers
// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0 (digits become indexes).
struct AttrGetter {
  std::vector<Value> parts;
  Value default_value;  // replaces an undefined result when set (not none)
  bool lower_strings = false;

  Value operator()(Value item) const {
    for (const Value& part : parts) {
      item = get_item(item, part);
      if (!default_value.is_none() && !default_value.is_undefined() && item.is_undefined())
        item = default_value;
    }
    if (lower_strings && item.is_string()) item = Value::string(py::lower(item.str()));
    return item;
  }
};

AttrGetter attr_getter(const Value& attribute, bool lower_strings = false,
                       Value default_value = Value::none()) {
  AttrGetter g;
  g.lower_strings = lower_strings;
  g.default_value = std::move(default_value);
  if (attribute.is_none() || attribute.is_undefined()) return g;
  if (attribute.is_int()) {
    g.parts.push_back(attribute);
    return g;
  }
  if (!attribute.is_string()) type_error("attribute must be a string or an integer");
  for (const std::string& part : py::split(attribute.str(), std::string("."), -1)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    g.parts.push_back(digits ? Value::integer(std::strtoll(part.c_str(), nullptr, 10))
                             : Value::string(part));
  }
  return g;
}

const Value* keyword(CallArgs& args, const char* name) {
  for (auto& [k, v] : args.keywords)
    if (k == name) return &v;
  return nullptr;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Python's int(text, 10) and float(text); nullopt where Python raises ValueError.
std::string digits_without_underscores(std::string_view s, bool& ok) {
  std::string out;
  ok = !s.empty() && s.front() != '_' && s.back() != '_';
  for (size_t i = 0; i < s.size() && ok; ++i) {
    if (s[i] == '_') {
      ok = i + 1 < s.size() && s[i + 1] != '_';
      continue;
    }
    out += s[i];
  }
  return out;
}

std::optional<int64_t> parse_int(std::string_view text, int base) {
  std::string_view t = py::strip(text, std::nullopt, true, true);
  bool negative = false;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
    negative = t[0] == '-';
    t.remove_prefix(1);
  }
  if (base == 16 && t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) t.remove_prefix(2);
  bool ok = false;
  const std::string digits = digits_without_underscores(t, ok);
  if (!ok || digits.empty()) return std::nullopt;
  for (char c : digits) {
    const int d = (c >= '0' && c <= '9')                   ? c - '0'
                  : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10
                                                           : 99;
    if (d >= base) return std::nullopt;
  }
  errno = 0;
  const unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
  if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
    fail(ErrorKind::unsupported, "integer past 64 bits");
  return negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
}

std::optional<double> parse_float(std::string_view text) {
  std::string_view t = py::strip(text, std::nullopt, true, true);
  std::string_view body = t;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) body.remove_prefix(1);
  std::string lower = py::lower(body);
  if (lower == "inf" || lower == "infinity" || lower == "nan") {
    const double v = lower == "nan" ? NAN : INFINITY;
    return (!t.empty() && t[0] == '-') ? -v : v;
  }
  // digits [. digits] [e [sign] digits], with single underscores between digits.
  std::string clean;
  bool digit_seen = false;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_') {
      if (i == 0 || i + 1 >= t.size() || !std::isdigit(static_cast<unsigned char>(t[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(t[i + 1])))
        return std::nullopt;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c)))
      digit_seen = true;
    else if (c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-')
      return std::nullopt;
    clean += c;
  }
  if (!digit_seen) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

Value list_of(std::vector<Value> items) { return Value::list(std::move(items)); }

// ---------------------------------------------------------------------------------- filters
Value f_default(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args(
      "default", a, {{"default_value", Value::string("")}, {"boolean", Value::boolean(false)}});
  if (v.is_undefined() || (p[1].truthy() && !v.truthy())) return p[0];
  return v;
}

Value f_length(Renderer&, const Value& v, CallArgs& a) {
  bind_args("length", a, {});
  return Value::integer(py_len(v));
}

Value f_first(Renderer&, const Value& v, CallArgs& a) {
  bind_args("first", a, {});
  if (v.is_list()) {
    if (v.list().items.empty()) return Value::undefined("No first item, sequence was empty.");
    return v.list().items.front();
  }
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Renderer&, const Value& v, CallArgs& a) {
  bind_args("last", a, {});
  if (v.is_list()) {
    if (v.list().items.empty()) return Value::undefined("No last item, sequence was empty.");
    return v.list().items.back();
  }
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_join(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args("join", a, {{"d", Value::string("")}, {"attribute", Value::none()}});
  const std::string sep = to_str(p[0]);
  const AttrGetter get = attr_getter(p[1]);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    append_str(get(item), out);
    if (out.size() > kMaxStringBytes) fail(ErrorKind::invalid_argument, "join: result too large");
  }
  return Value::string(std::move(out));
}

Value f_upper(Renderer&, const Value& v, CallArgs& a) {
  bind_args("upper", a, {});
  return Value::string(py::upper(to_str(v)));
}
Value f_lower(Renderer&, const Value& v, CallArgs& a) {
  bind_args("lower", a, {});
  return Value::string(py::lower(to_str(v)));
}
Value f_capitalize(Renderer&, const Value& v, CallArgs& a) {
  bind_args("capitalize", a, {});
  return Value::string(py::capitalize(to_str(v)));
}

// jinja2's title: upper-cases the first letter of each word, words split at -, whitespace and
// opening brackets (not Python's str.title).
Value f_title(Renderer&, const Value& v, CallArgs& a) {
  bind_args("title", a, {});
  const std::string s = to_str(v);
  std::string out;
  bool word_start = true;
  for (size_t pos = 0; pos < s.size();) {
    const size_t at = pos;
    const uint32_t cp = py::next_code_point(s, pos);
    const bool separator =
        cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py::is_space(cp);
    const std::string ch = s.substr(at, pos - at);
    if (separator) {
      out += ch;
      word_start = true;
    } else {
      out += word_start ? py::upper(ch) : py::lower(ch);
      word_start = false;
    }
  }
  return Value::string(std::move(out));
}

Value f_trim(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args("trim", a, {{"chars", Value::none()}});
  std::optional<std::string> chars;
  if (!p[0].is_none()) chars = to_str(p[0]);
  const std::string s = to_str(v);
  return Value::string(std::string(py::strip(s, chars, true, true)));
}

Value f_replace(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args(
      "replace", a, {{"old", Value(), true}, {"new", Value(), true}, {"count", Value::none()}});
  int64_t count = -1;
  if (!p[2].is_none()) {
    if (!p[2].is_int() && !p[2].is_bool()) type_error("replace: count must be an integer");
    count = p[2].int_like();
  }
  std::string out;
  if (!py::replace(to_str(v), to_str(p[0]), to_str(p[1]), count, kMaxStringBytes, out))
    fail(ErrorKind::invalid_argument, "replace: result too large");
  return Value::string(std::move(out));
}

Value f_list(Renderer&, const Value& v, CallArgs& a) {
  bind_args("list", a, {});
  return list_of(iterate(v));
}
Value f_string(Renderer&, const Value& v, CallArgs& a) {
  bind_args("string", a, {});
  return Value::string(to_str(v));
}
Value f_safe(Renderer&, const Value& v, CallArgs& a) {
  bind_args("safe", a, {});
  return Value::string(to_str(v));
}
Value f_escape(Renderer&, const Value& v, CallArgs& a) {
  bind_args("escape", a, {});
  return Value::string(html_escape(to_str(v)));
}

Value f_int(Renderer&, const Value& v, CallArgs& a) {
  const auto p =
      bind_args("int", a, {{"default", Value::integer(0)}, {"base", Value::integer(10)}});
  if (v.is_undefined()) fail_undefined(v);  // jinja2's Undefined refuses int()
  if (v.is_bool() || v.is_int()) return Value::integer(v.int_like());
  if (v.is_float()) {
    if (std::isnan(v.as_float()) || std::isinf(v.as_float())) return p[0];
    return Value::integer(checked_int(v.as_float()));
  }
  if (v.is_string()) {
    const int base = p[1].is_int() ? static_cast<int>(p[1].as_int()) : 10;
    if (base < 2 || base > 36) type_error("int() base must be >= 2 and <= 36");
    if (auto i = parse_int(v.str(), base)) return Value::integer(*i);
    // jinja2: "42.23"|int is 42.
    if (auto d = parse_float(v.str())) {
      if (std::isnan(*d)) return p[0];
      if (std::isinf(*d)) type_error("cannot convert float infinity to integer");
      return Value::integer(checked_int(*d));
    }
  }
  return p[0];
}

Value f_float(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args("float", a, {{"default", Value::floating(0.0)}});
  if (v.is_undefined()) fail_undefined(v);  // and float()
  if (v.is_number()) return Value::floating(v.as_float());
  if (v.is_string())
    if (auto d = parse_float(v.str())) return Value::floating(*d);
  return p[0];
}

Value f_abs(Renderer&, const Value& v, CallArgs& a) {
  bind_args("abs", a, {});
  if (v.is_bool() || v.is_int()) {
    if (v.int_like() == INT64_MIN) fail(ErrorKind::unsupported, "integer overflow (past 64 bits)");
    return Value::integer(std::llabs(v.int_like()));
  }
  if (v.is_float()) return Value::floating(std::fabs(v.as_float()));
  type_error("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_round(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args("round", a,
                           {{"precision", Value::integer(0)}, {"method", Value::string("common")}});
  if (!p[0].is_int() && !p[0].is_bool()) type_error("round: precision must be an integer");
  const int64_t precision = p[0].int_like();
  const std::string method = to_str(p[1]);
  if (method != "common" && method != "ceil" && method != "floor")
    type_error("method must be common, ceil or floor");
  if (!v.is_number()) type_error("type " + v.type_name() + " doesn't define __round__ method");
  if (method == "common") {
    if (!v.is_float()) return Value::integer(v.int_like());  // round(int, n) stays an int
    const double x = v.as_float();
    if (std::isnan(x) || std::isinf(x)) return v;
    if (precision >= 0 && precision <= 300) {
      // Python rounds the exact binary value half to even: what printf's correct rounding does.
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
      return Value::floating(std::strtod(buf, nullptr));
    }
    const double scale =
        std::pow(10.0, static_cast<double>(-std::clamp<int64_t>(precision, -308, 308)));
    return Value::floating(std::nearbyint(x / scale) * scale);
  }
  const double scale =
      std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -308, 308)));
  const double scaled = v.as_float() * scale;
  return Value::floating((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value f_map(Renderer& r, const Value& v, CallArgs& a) {
  if (!v.truthy()) return list_of({});
  std::vector<Value> out;
  if (a.positional.empty() && keyword(a, "attribute")) {
    const Value* def = keyword(a, "default");
    for (const auto& [k, val] : a.keywords)
      if (k != "attribute" && k != "default")
        type_error("map: unexpected keyword argument '" + k + "'");
    const AttrGetter get = attr_getter(*keyword(a, "attribute"), false, def ? *def : Value::none());
    for (const Value& item : iterate(v)) out.push_back(get(item));
    return list_of(std::move(out));
  }
  if (a.positional.empty()) type_error("map requires a filter argument");
  const std::string name = to_str(a.positional[0]);
  const FilterFn fn = find_filter(name);
  if (!fn) {
    if (jinja2_has_filter(name))
      fail(ErrorKind::unsupported, "the filter '" + name + "' is not supported");
    type_error("no filter named '" + name + "'");
  }
  for (const Value& item : iterate(v)) {
    CallArgs inner{std::vector<Value>(a.positional.begin() + 1, a.positional.end()), a.keywords};
    out.push_back(fn(r, item, inner));
  }
  return list_of(std::move(out));
}

// select / reject / selectattr / rejectattr.
Value select_impl(Renderer& r, const Value& v, CallArgs& a, bool keep_when, bool by_attr) {
  if (!v.truthy()) return list_of({});
  size_t off = 0;
  AttrGetter get;
  if (by_attr) {
    if (a.positional.empty()) type_error("Missing parameter for attribute name");
    get = attr_getter(a.positional[0]);
    off = 1;
  }
  TestFn test = nullptr;
  if (a.positional.size() > off) {
    const std::string name = to_str(a.positional[off]);
    test = find_test(name);
    if (!test) type_error("no test named '" + name + "'");
  }
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    const Value x = by_attr ? get(item) : item;
    bool ok;
    if (test) {
      CallArgs inner{
          std::vector<Value>(a.positional.begin() + static_cast<long>(off) + 1, a.positional.end()),
          a.keywords};
      ok = test(r, x, inner);
    } else {
      ok = x.truthy();
    }
    if (ok == keep_when) out.push_back(item);
  }
  return list_of(std::move(out));
}
Value f_select(Renderer& r, const Value& v, CallArgs& a) {
  return select_impl(r, v, a, true, false);
}
Value f_reject(Renderer& r, const Value& v, CallArgs& a) {
  return select_impl(r, v, a, false, false);
}
Value f_selectattr(Renderer& r, const Value& v, CallArgs& a) {
  return select_impl(r, v, a, true, true);
}
Value f_rejectattr(Renderer& r, const Value& v, CallArgs& a) {
  return select_impl(r, v, a, false, true);
}

Value f_unique(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args(
      "unique", a, {{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}});
  const AttrGetter get = attr_getter(p[1], !p[0].truthy());
  std::vector<Value> out, seen;
  for (const Value& item : iterate(v)) {
    const Value k = get(item);
    if (k.is_dict() || (k.is_list() && !k.list().tuple))
      type_error("unhashable type: '" + k.type_name() + "'");
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, k); })) {
      seen.push_back(k);
      out.push_back(item);
    }
  }
  return list_of(std::move(out));
}

Value f_items(Renderer&, const Value& v, CallArgs& a) {
  bind_args("items", a, {});
  if (v.is_undefined()) return list_of({});
  if (!v.is_dict()) type_error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict().items) out.push_back(Value::list({k, val}, true));
  return list_of(std::move(out));
}

Value f_indent(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args("indent", a,
                           {{"width", Value::integer(4)},
                            {"first", Value::boolean(false)},
                            {"blank", Value::boolean(false)}});
  std::string indention;
  if (p[0].is_string()) {
    indention = p[0].str();
  } else if (p[0].is_int() || p[0].is_bool()) {
    const int64_t w = p[0].int_like();
    if (w > 4096) fail(ErrorKind::invalid_argument, "indent: width too large");
    if (w > 0) indention.assign(static_cast<size_t>(w), ' ');
  } else {
    type_error("indent: width must be an integer or a string");
  }
  // jinja2 appends a newline to the value itself (so splitlines keeps a trailing empty line):
  // anything but a string fails there.
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string())
    type_error("unsupported operand type(s) for +=: '" + v.type_name() + "' and 'str'");
  std::string s = v.str() + "\n";
  const std::vector<std::string> lines = py::splitlines(s, false);
  std::string out;
  if (p[2].truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? std::string() : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += '\n';
      if (!lines[i].empty()) out += indention + lines[i];
    }
  }
  if (p[1].truthy()) out = indention + out;
  if (out.size() > kMaxStringBytes) fail(ErrorKind::invalid_argument, "indent: result too large");
  return Value::string(std::move(out));
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent,
// separators=separators, sort_keys=sort_keys), arguments in that order.
Value f_tojson(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args("tojson", a,
                           {{"ensure_ascii", Value::boolean(false)},
                            {"indent", Value::none()},
                            {"separators", Value::none()},
                            {"sort_keys", Value::boolean(false)}});
  DumpOptions o;
  o.ensure_ascii = p[0].truthy();
  if (p[1].is_string()) {
    o.indent = p[1].str();
  } else if (p[1].is_int() || p[1].is_bool()) {
    const int64_t w = p[1].int_like();
    if (w > 4096) fail(ErrorKind::invalid_argument, "tojson: indent too large");
    o.indent = std::string(w > 0 ? static_cast<size_t>(w) : 0, ' ');
  } else if (!p[1].is_none()) {
    type_error("tojson: indent must be an integer or a string");
  }
  if (!p[2].is_none()) {
    const std::vector<Value> seps = iterate(p[2]);
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
      type_error("tojson: separators must be two strings");
    o.separators = std::make_pair(seps[0].str(), seps[1].str());
  }
  o.sort_keys = p[3].truthy();
  return Value::string(dumps(v, o));
}

Value f_reverse(Renderer&, const Value& v, CallArgs& a) {
  bind_args("reverse", a, {});
  if (v.is_string()) return slice(v, Value::none(), Value::none(), Value::integer(-1));
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return list_of(std::move(items));
}

// sort / min / max / dictsort compare strings case-insensitively unless told otherwise.
Value f_sort(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args("sort", a,
                           {{"reverse", Value::boolean(false)},
                            {"case_sensitive", Value::boolean(false)},
                            {"attribute", Value::none()}});
  std::vector<AttrGetter> getters;
  if (p[2].is_string() && p[2].str().find(',') != std::string::npos) {
    for (const std::string& part : py::split(p[2].str(), std::string(","), -1))
      getters.push_back(attr_getter(
          Value::string(std::string(py::strip(part, std::nullopt, true, true))), !p[1].truthy()));
  } else {
    getters.push_back(attr_getter(p[2], !p[1].truthy()));
  }
  std::vector<Value> items = iterate(v);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) {
    std::vector<Value> k;
    for (const AttrGetter& g : getters) k.push_back(g(items[i]));
    keyed.emplace_back(Value::list(std::move(k)), i);
  }
  const bool reverse = p[0].truthy();
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? py_less(y.first, x.first) : py_less(x.first, y.first);
  });
  std::vector<Value> out;
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return list_of(std::move(out));
}

Value min_max(const Value& v, CallArgs& a, const char* fn, bool want_max) {
  const auto p =
      bind_args(fn, a, {{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const AttrGetter get = attr_getter(p[1], !p[0].truthy());
  size_t best = 0;
  Value best_key = get(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = get(items[i]);
    if (want_max ? py_less(best_key, k) : py_less(k, best_key)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}
Value f_min(Renderer&, const Value& v, CallArgs& a) { return min_max(v, a, "min", false); }
Value f_max(Renderer&, const Value& v, CallArgs& a) { return min_max(v, a, "max", true); }

Value f_sum(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args("sum", a, {{"attribute", Value::none()}, {"start", Value::integer(0)}});
  if (p[1].is_string()) type_error("sum() can't sum strings [use ''.join(seq) instead]");
  const AttrGetter get = attr_getter(p[0]);
  Value total = p[1];
  for (const Value& item : iterate(v)) total = binary(BinOp::add, total, get(item));
  return total;
}

Value f_dictsort(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args("dictsort", a,
                           {{"case_sensitive", Value::boolean(false)},
                            {"by", Value::string("key")},
                            {"reverse", Value::boolean(false)}});
  if (!v.is_dict()) type_error("dictsort: expected a mapping, got " + v.type_name());
  const std::string by = to_str(p[1]);
  if (by != "key" && by != "value") type_error("You can only sort by either \"key\" or \"value\"");
  const size_t pos = by == "key" ? 0 : 1;
  std::vector<Value> items;
  for (const auto& [k, val] : v.dict().items) items.push_back(Value::list({k, val}, true));
  auto key_of = [&](const Value& item) {
    Value k = item.list().items[pos];
    if (!p[0].truthy() && k.is_string()) k = Value::string(py::lower(k.str()));
    return k;
  };
  const bool reverse = p[2].truthy();
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? py_less(key_of(y), key_of(x)) : py_less(key_of(x), key_of(y));
  });
  return list_of(std::move(items));
}

// jinja2's attr: Python's getattr alone, so a dict's keys are not attributes (its methods are).
Value f_attr(Renderer&, const Value& v, CallArgs& a) {
  const auto p = bind_args("attr", a, {{"name", Value(), true}});
  const std::string name = to_str(p[0]);
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_ns()) {
    if (const Value* x = v.ns()->find(name)) return *x;
  } else if (auto m = bound_method(v, name)) {
    return *m;
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", v.type_name(), name));
}

Value f_format(Renderer&, const Value& v, CallArgs& a) {
  if (!a.positional.empty() && !a.keywords.empty())
    type_error("can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.keywords.empty()) {
    std::vector<std::pair<Value, Value>> kw;
    for (auto& [k, val] : a.keywords) kw.emplace_back(Value::string(k), val);
    args = Value::dict(std::move(kw));
  } else {
    args = Value::list(a.positional, true);
  }
  return binary(BinOp::mod, Value::string(to_str(v)), args);
}

Value f_center(Renderer& r, const Value& v, CallArgs& a) {
  const auto p = bind_args("center", a, {{"width", Value::integer(80)}});
  CallArgs inner{{p[0]}, {}};
  const Value method = *bound_method(Value::string(to_str(v)), "center");
  return method.callable().call(r, inner);
}

Value f_wordcount(Renderer&, const Value& v, CallArgs& a) {
  bind_args("wordcount", a, {});
  const std::string s = to_str(v);
  int64_t words = 0;
  bool in_word = false;
  for (size_t pos = 0; pos < s.size();) {
    const uint32_t cp = py::next_code_point(s, pos);
    const bool word_char = cp == '_' || py::is_alpha(cp) || py::is_decimal(cp);
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::integer(words);
}

struct Entry {
  const char* name;
  FilterFn fn;
};
constexpr std::array kFilters{
    Entry{"default", f_default},
    Entry{"d", f_default},
    Entry{"length", f_length},
    Entry{"count", f_length},
    Entry{"first", f_first},
    Entry{"last", f_last},
    Entry{"join", f_join},
    Entry{"upper", f_upper},
    Entry{"lower", f_lower},
    Entry{"capitalize", f_capitalize},
    Entry{"title", f_title},
    Entry{"trim", f_trim},
    Entry{"replace", f_replace},
    Entry{"list", f_list},
    Entry{"string", f_string},
    Entry{"safe", f_safe},
    Entry{"e", f_escape},
    Entry{"escape", f_escape},
    Entry{"forceescape", f_escape},
    Entry{"int", f_int},
    Entry{"float", f_float},
    Entry{"abs", f_abs},
    Entry{"round", f_round},
    Entry{"map", f_map},
    Entry{"select", f_select},
    Entry{"reject", f_reject},
    Entry{"selectattr", f_selectattr},
    Entry{"rejectattr", f_rejectattr},
    Entry{"unique", f_unique},
    Entry{"items", f_items},
    Entry{"indent", f_indent},
    Entry{"tojson", f_tojson},
    Entry{"reverse", f_reverse},
    Entry{"sort", f_sort},
    Entry{"min", f_min},
    Entry{"max", f_max},
    Entry{"sum", f_sum},
    Entry{"dictsort", f_dictsort},
    Entry{"attr", f_attr},
    Entry{"format", f_format},
    Entry{"center", f_center},
    Entry{"wordcount", f_wordcount},
};

// jinja2's builtin filters this interpreter does not implement (unsupported, not unknown).
constexpr std::array<const char*, 12> kJinja2Only{
    "batch",     "filesizeformat", "groupby",   "pprint", "random",   "slice",
    "striptags", "truncate",       "urlencode", "urlize", "wordwrap", "xmlattr"};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const Entry& e : kFilters)
    if (name == e.name) return e.fn;
  return nullptr;
}

bool jinja2_has_filter(std::string_view name) {
  if (find_filter(name)) return true;
  for (const char* n : kJinja2Only)
    if (name == n) return true;
  return false;
}

}  // namespace braid::chat::jinja
