#include "capi/llm_json.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "braid/error.h"

namespace braid::capi::llm {

void bad(const Where& w, const std::string& message) {
  throw Error(ErrorKind::invalid_argument, std::string(w.call) + ": " + message);
}

json parse(const char* call, const char* what, const char* text, json if_empty) {
  if (text == nullptr) return if_empty;
  const std::string_view s(text);
  if (s.find_first_not_of(" \t\r\n") == std::string_view::npos) return if_empty;
  try {
    return json::parse(s);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    // nlohmann's text starts with "[json.exception.parse_error.101] ": keep what a person reads.
    std::string m = e.what();
    if (const auto close = m.find("] "); m.rfind("[json.exception", 0) == 0 && close != std::string::npos)
      m = m.substr(close + 2);
    throw Error(ErrorKind::invalid_argument,
                std::string(call) + ": " + what + " is not valid JSON (" + m + ")");
  }
}

void reject_unknown_keys(const Where& w, const json& object,
                         std::initializer_list<std::string_view> known) {
  std::string unknown;
  for (const auto& [key, value] : object.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || k == key;
    if (!found) unknown += (unknown.empty() ? "'" : ", '") + key + "'";
  }
  if (unknown.empty()) return;
  std::string list;
  for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
  bad(w, w.object + " has unknown key(s) " + unknown + "; known keys: " + list);
}

const json* field(const json& object, std::string_view key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

double number(const Where& w, const json& object, std::string_view key, double fallback) {
  const json* v = field(object, key);
  if (!v) return fallback;
  if (!v->is_number()) bad(w, w.key(key) + " must be a number, got " + shown(*v));
  const double x = v->get<double>();
  if (!std::isfinite(x)) bad(w, w.key(key) + " must be finite, got " + shown(*v));
  return x;
}

int64_t integer(const Where& w, const json& object, std::string_view key, int64_t fallback,
                int64_t lo, int64_t hi) {
  const json* v = field(object, key);
  if (!v) return fallback;
  // Appended piece by piece: "[" + std::string&& trips a false -Wrestrict in GCC 12.
  std::string range = "[";
  range += std::to_string(lo);
  range += ", ";
  range += std::to_string(hi);
  range += "]";
  if (v->is_number_unsigned()) {
    // nlohmann keeps every non-negative integer as unsigned: both bounds apply here too.
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
      bad(w, w.key(key) + " must be an integer in " + range + ", got " + shown(*v));
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) {
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) bad(w, w.key(key) + " must be an integer in " + range + ", got " + shown(*v));
    return x;
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    // Compared as doubles first, so a huge value cannot overflow the conversion.
    if (std::floor(d) == d && d >= static_cast<double>(lo) && d <= static_cast<double>(hi))
      return static_cast<int64_t>(d);
  }
  bad(w, w.key(key) + " must be an integer in " + range + ", got " + shown(*v));
}

bool boolean(const Where& w, const json& object, std::string_view key, bool fallback) {
  const json* v = field(object, key);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(w, w.key(key) + " must be true or false, got " + shown(*v));
  return v->get<bool>();
}

std::vector<int32_t> token_ids(const Where& w, const json& value, std::string_view key) {
  if (!value.is_array()) bad(w, w.key(key) + " must be a list of token ids, got " + shown(value));
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const json& id = value[i];
    const bool in_range = (id.is_number_unsigned() && id.get<uint64_t>() <= INT32_MAX) ||
                          (id.is_number_integer() && !id.is_number_unsigned() &&
                           id.get<int64_t>() >= INT32_MIN && id.get<int64_t>() <= INT32_MAX);
    if (!in_range)
      bad(w, w.key(key) + "[" + std::to_string(i) + "] must be a token id (an integer), got " +
                 shown(id));
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

std::string shown(const json& value) {
  // Lists and objects by their size only: dumping one nested a million deep would recurse that
  // deep. A wrong string may be a whole prompt: show enough to recognise it.
  if (value.is_array()) return "a list of " + std::to_string(value.size()) + " item(s)";
  if (value.is_object()) return "an object with " + std::to_string(value.size()) + " key(s)";
  std::string s = dump(value);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

char* to_c_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (!out) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

}  // namespace braid::capi::llm
