// The values a chat template computes with: Python's None, bool, int, float, str, list, tuple
// and dict, plus Jinja's Undefined, namespace() objects and callables (macros, builtins, bound
// methods).
//
// Strings, lists and dicts are immutable once built (the sandbox transformers renders in forbids
// list.append and dict.update), so values share them by pointer. Namespaces are the one mutable
// object; they belong to the render that made them (Value keeps a plain pointer), which is why
// no value outlives a render.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "braid/error.h"

namespace braid::chat::jinja {

class Value;
class Callable;

// Why a name or attribute came out undefined; the text is the error if the template then uses
// the value for more than printing or testing. `unsafe` marks a method the sandbox forbids
// (list.append, dict.update): calling it fails as unsupported.
struct Undefined {
  std::shared_ptr<const std::string> reason;
  bool unsafe = false;
};
struct None {};

struct List {
  std::vector<Value> items;
  bool tuple = false;  // Python tuple: printed with (), unequal to a list
  int depth = 1;       // nesting, bounded so printing and freeing never recurse too deep
};

struct Dict {
  std::vector<std::pair<Value, Value>> items;  // insertion order, keys unique
  int depth = 1;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
};

// jinja2's namespace(): attributes set with {% set ns.x = ... %}.
struct Namespace {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(std::string_view name) const;
};

// Nesting past this is an error (Python's own json module and repr give up near 1000 frames).
inline constexpr int kMaxDataDepth = 256;

// Thrown by operations that know what went wrong but not where; the renderer adds the template
// line and column and turns it into braid::Error.
struct TemplateError {
  ErrorKind kind;
  std::string message;
};
[[noreturn]] void fail(ErrorKind kind, std::string message);

// Work accounting. A render gives its thread a budget; every expression and statement, and
// every string, list and dict built (in proportion to its size), charges it, so no mix of loops
// and big values in a template or its messages can keep a render running for long.
void charge(uint64_t units);
class WorkBudget {
 public:
  explicit WorkBudget(uint64_t limit);  // this thread's budget until destroyed
  ~WorkBudget();
  WorkBudget(const WorkBudget&) = delete;
  WorkBudget& operator=(const WorkBudget&) = delete;
  uint64_t used = 0;
  uint64_t limit;

 private:
  WorkBudget* previous_;
};
[[noreturn]] void type_error(std::string message);  // Python's TypeError/ValueError: bad input

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, ns, callable };

  Value() : v_(Undefined{}) {}
  static Value undefined(std::string reason, bool unsafe = false);
  static Value none() { return Value(None{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value floating(double d) { return Value(d); }
  static Value string(std::string s);
  static Value string(std::shared_ptr<const std::string> s) { return Value(std::move(s)); }
  static Value list(std::vector<Value> items, bool tuple = false);  // checks depth
  static Value dict(std::vector<std::pair<Value, Value>> items);    // keys must be unique
  static Value ns(Namespace* n) { return Value(n); }
  static Value callable(std::shared_ptr<const Callable> c) { return Value(std::move(c)); }

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::undefined; }
  bool is_none() const { return kind() == Kind::none; }
  bool is_bool() const { return kind() == Kind::boolean; }
  bool is_int() const { return kind() == Kind::integer; }
  bool is_float() const { return kind() == Kind::floating; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python Number
  bool is_string() const { return kind() == Kind::string; }
  bool is_list() const { return kind() == Kind::list; }  // list or tuple
  bool is_dict() const { return kind() == Kind::dict; }
  bool is_ns() const { return kind() == Kind::ns; }
  bool is_callable() const { return kind() == Kind::callable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }  // integer only
  int64_t int_like() const;                                 // bool or integer
  double as_float() const;                                  // any number
  const std::string& str() const { return *std::get<Str>(v_); }
  const std::shared_ptr<const std::string>& str_ptr() const { return std::get<Str>(v_); }
  const List& list() const { return *std::get<ListPtr>(v_); }
  const Dict& dict() const { return *std::get<DictPtr>(v_); }
  Namespace* ns() const { return std::get<Namespace*>(v_); }
  const Callable& callable() const { return *std::get<CallablePtr>(v_); }
  const Undefined& undef() const { return std::get<Undefined>(v_); }
  int depth() const;  // of lists and dicts; 0 for everything else

  // Python truthiness; undefined is false.
  bool truthy() const;
  // Python's type name, for messages: 'str', 'int', 'NoneType', 'dict', ...
  std::string type_name() const;

 private:
  using Str = std::shared_ptr<const std::string>;
  using ListPtr = std::shared_ptr<const List>;
  using DictPtr = std::shared_ptr<const Dict>;
  using CallablePtr = std::shared_ptr<const Callable>;
  template <typename T>
  explicit Value(T v) : v_(std::move(v)) {}
  std::variant<Undefined, None, bool, int64_t, double, Str, ListPtr, DictPtr, Namespace*,
               CallablePtr>
      v_;
};

// Arguments of a call: positional then keyword, as Python passes them.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

class Renderer;

class Callable {
 public:
  virtual ~Callable() = default;
  virtual std::string name() const = 0;
  virtual Value call(Renderer& r, CallArgs& args) const = 0;
};

// The undefined value's own error: "'x' is undefined", "'dict object' has no attribute 'y'".
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace braid::chat::jinja
