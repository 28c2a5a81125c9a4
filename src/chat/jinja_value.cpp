#include "chat/jinja_value.h"

#include <algorithm>

#include "chat/jinja_ops.h"

namespace braid::chat::jinja {

void fail(ErrorKind kind, std::string message) { throw TemplateError{kind, std::move(message)}; }

namespace {
thread_local WorkBudget* t_budget = nullptr;
}  // namespace

WorkBudget::WorkBudget(uint64_t l) : limit(l), previous_(t_budget) { t_budget = this; }
WorkBudget::~WorkBudget() { t_budget = previous_; }

void charge(uint64_t units) {
  WorkBudget* b = t_budget;
  if (!b) return;  // outside a render (parsing): nothing to bound
  b->used += units;
  if (b->used > b->limit)
    fail(ErrorKind::invalid_argument, "the template ran more than " + std::to_string(b->limit) +
                                          " steps (loops or values too large)");
}

void type_error(std::string message) { fail(ErrorKind::invalid_argument, std::move(message)); }

void fail_undefined(const Value& v) {
  const Undefined& u = v.undef();
  const std::string reason = u.reason ? *u.reason : "a value is undefined";
  fail(u.unsafe ? ErrorKind::unsupported : ErrorKind::invalid_argument, reason);
}

Value Value::undefined(std::string reason, bool unsafe) {
  return Value(Undefined{std::make_shared<const std::string>(std::move(reason)), unsafe});
}

Value Value::string(std::string s) {
  charge(1 + s.size() / 256);
  return Value(std::make_shared<const std::string>(std::move(s)));
}

namespace {
int child_depth(const Value& v) { return v.depth(); }

void check_depth(int depth) {
  if (depth > kMaxDataDepth)
    fail(ErrorKind::invalid_argument,
         "a list or dict nested deeper than " + std::to_string(kMaxDataDepth) + " levels");
}

bool hashable(const Value& v) {
  if (v.is_list()) {
    if (!v.list().tuple) return false;
    return std::all_of(v.list().items.begin(), v.list().items.end(), hashable);
  }
  return !v.is_dict();  // jinja2's Undefined hashes (all undefined values are one key)
}
}  // namespace

Value Value::list(std::vector<Value> items, bool tuple) {
  charge(1 + items.size() / 16);
  auto l = std::make_shared<List>();
  int depth = 0;
  for (const Value& v : items) depth = std::max(depth, child_depth(v));
  l->depth = depth + 1;
  check_depth(l->depth);
  l->items = std::move(items);
  l->tuple = tuple;
  return Value(std::shared_ptr<const List>(std::move(l)));
}

Value Value::dict(std::vector<std::pair<Value, Value>> items) {
  charge(1 + items.size() / 16);
  auto d = std::make_shared<Dict>();
  int depth = 0;
  for (const auto& [k, v] : items) depth = std::max({depth, child_depth(k), child_depth(v)});
  d->depth = depth + 1;
  check_depth(d->depth);
  d->items = std::move(items);
  return Value(std::shared_ptr<const Dict>(std::move(d)));
}

int Value::depth() const {
  if (is_list()) return list().depth;
  if (is_dict()) return dict().depth;
  return 0;
}

int64_t Value::int_like() const { return is_bool() ? (as_bool() ? 1 : 0) : as_int(); }

double Value::as_float() const {
  if (is_float()) return std::get<double>(v_);
  return static_cast<double>(int_like());
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
      return as_bool();
    case Kind::integer:
      return as_int() != 0;
    case Kind::floating:
      return as_float() != 0.0;
    case Kind::string:
      return !str().empty();
    case Kind::list:
      return !list().items.empty();
    case Kind::dict:
      return !dict().items.empty();
    case Kind::ns:
    case Kind::callable:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::undefined:
      return "Undefined";
    case Kind::none:
      return "NoneType";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::string:
      return "str";
    case Kind::list:
      return list().tuple ? "tuple" : "list";
    case Kind::dict:
      return "dict";
    case Kind::ns:
      return "Namespace";
    case Kind::callable:
      return "function";
  }
  return "object";
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  if (!hashable(key)) type_error("unhashable type: '" + key.type_name() + "'");
  for (const auto& [k, v] : items)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

const Value* Namespace::find(std::string_view name) const {
  for (const auto& [k, v] : attrs)
    if (k == name) return &v;
  return nullptr;
}

}  // namespace braid::chat::jinja
