#include "chat/jinja_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/jinja_ops.h"
#include "chat/py_text.h"

namespace braid::chat::jinja {

namespace {

Value convert(const nlohmann::ordered_json& j, int depth) {
  using T = nlohmann::ordered_json::value_t;
  if (depth > kMaxDataDepth)
    fail(ErrorKind::invalid_argument,
         "JSON nested deeper than " + std::to_string(kMaxDataDepth) + " levels");
  switch (j.type()) {
    case T::null:
      return Value::none();
    case T::boolean:
      return Value::boolean(j.get<bool>());
    case T::number_integer:
      return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Value::floating(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case T::number_float:
      return Value::floating(j.get<double>());
    case T::string: {
      const auto& s = j.get_ref<const std::string&>();
      if (!py::valid_utf8(s)) fail(ErrorKind::invalid_argument, "a JSON string is not valid UTF-8");
      return Value::string(s);
    }
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(convert(e, depth + 1));
      return Value::list(std::move(items));
    }
    case T::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!py::valid_utf8(it.key()))
          fail(ErrorKind::invalid_argument, "a JSON object key is not valid UTF-8");
        items.emplace_back(Value::string(it.key()), convert(it.value(), depth + 1));
      }
      return Value::dict(std::move(items));
    }
    default:
      fail(ErrorKind::invalid_argument, "JSON binary values have no template equivalent");
  }
}

void encode_string(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  char buf[16];
  for (size_t pos = 0; pos < s.size();) {
    const size_t at = pos;
    const uint32_t cp = py::next_code_point(s, pos);
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else if (ensure_ascii && cp > 0x7E) {
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
    } else {
      out.append(s.substr(at, pos - at));
    }
  }
  out += '"';
}

std::string float_text(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return py::float_repr(d);
}

struct Encoder {
  const DumpOptions& o;
  std::string item_sep, key_sep;
  std::string out;

  void newline(int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o.indent;
  }

  std::string key_text(const Value& k) {
    switch (k.kind()) {
      case Value::Kind::string:
        return k.str();
      case Value::Kind::boolean:
        return k.as_bool() ? "true" : "false";
      case Value::Kind::none:
        return "null";
      case Value::Kind::integer:
        return std::to_string(k.as_int());
      case Value::Kind::floating:
        return float_text(k.as_float());
      default:
        type_error("keys must be str, int, float, bool or None, not " + k.type_name());
    }
  }

  void encode(const Value& v, int level) {
    if (level > kMaxDataDepth) type_error("tojson: a value nested too deep (circular?)");
    if (out.size() > kMaxStringBytes) fail(ErrorKind::invalid_argument, "tojson: output too large");
    switch (v.kind()) {
      case Value::Kind::none:
        out += "null";
        return;
      case Value::Kind::boolean:
        out += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::integer:
        out += std::to_string(v.as_int());
        return;
      case Value::Kind::floating:
        out += float_text(v.as_float());
        return;
      case Value::Kind::string:
        encode_string(v.str(), o.ensure_ascii, out);
        return;
      case Value::Kind::list: {
        const auto& items = v.list().items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (o.indent) newline(level + 1);
          encode(items[i], level + 1);
        }
        if (o.indent) newline(level);
        out += ']';
        return;
      }
      case Value::Kind::dict: {
        std::vector<const std::pair<Value, Value>*> items;
        for (const auto& kv : v.dict().items) items.push_back(&kv);
        if (items.empty()) {
          out += "{}";
          return;
        }
        if (o.sort_keys)
          std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) {
            return py_less(a->first, b->first);
          });
        out += '{';
        bool first = true;
        for (const auto* kv : items) {
          if (!first) out += item_sep;
          first = false;
          if (o.indent) newline(level + 1);
          encode_string(key_text(kv->first), o.ensure_ascii, out);
          out += key_sep;
          encode(kv->second, level + 1);
        }
        if (o.indent) newline(level);
        out += '}';
        return;
      }
      default:
        type_error("Object of type " + v.type_name() + " is not JSON serializable");
    }
  }
};

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return convert(j, 0); }

std::string dumps(const Value& v, const DumpOptions& options) {
  Encoder e{options, {}, {}, {}};
  if (options.separators) {
    e.item_sep = options.separators->first;
    e.key_sep = options.separators->second;
  } else {
    e.item_sep = options.indent ? "," : ", ";
    e.key_sep = ": ";
  }
  e.encode(v, 0);
  return std::move(e.out);
}

}  // namespace braid::chat::jinja
