// What a template can call by name: filters (`x | trim`), tests (`x is defined`), methods of
// str/dict/list (`s.strip()`), and globals (`range`, `namespace`, `raise_exception`, ...).
// Filters and tests are looked up when the template is parsed; a name jinja2 has but this
// interpreter lacks is ErrorKind::unsupported, a name jinja2 lacks too is invalid_argument.
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

namespace braid::chat::jinja {

using FilterFn = Value (*)(Renderer& r, const Value& input, CallArgs& args);
using TestFn = bool (*)(Renderer& r, const Value& input, CallArgs& args);

FilterFn find_filter(std::string_view name);  // null when there is none
TestFn find_test(std::string_view name);
bool jinja2_has_filter(std::string_view name);  // in jinja2's builtin set
bool jinja2_has_test(std::string_view name);

// `obj.name` when name is a method of obj's type; nullopt otherwise.
std::optional<Value> bound_method(const Value& obj, std::string_view name);

// The environment's globals; an undefined value when name is not one.
Value find_global(std::string_view name);

// Binds a call's arguments to a builtin's parameters the way Python does (positional first,
// then by keyword); a parameter without a default that gets nothing is an error, and so is an
// argument nothing takes.
struct Param {
  const char* name;
  Value default_value;  // used when the argument is absent
  bool required = false;
};
std::vector<Value> bind_args(std::string_view function, const CallArgs& args,
                             std::initializer_list<Param> params);

}  // namespace braid::chat::jinja
