#include "chat/jinja_render.h"

#include <fmt/core.h>

#include <algorithm>

#include "chat/jinja_lexer.h"

namespace braid::chat::jinja {

const Value* Scope::find(std::string_view name) const {
  for (const auto& [k, v] : vars)
    if (k == name) return &v;
  return nullptr;
}

void Scope::set(std::string_view name, Value v) {
  for (auto& [k, old] : vars)
    if (k == name) {
      old = std::move(v);
      return;
    }
  vars.emplace_back(name, std::move(v));
}

namespace {

// A macro together with the scope it was defined in (jinja2 macros are closures).
class MacroCallable : public Callable {
 public:
  MacroCallable(const MacroStmt& m, Scope* closure) : macro_(m), closure_(closure) {}
  std::string name() const override { return macro_.name; }
  Value call(Renderer& r, CallArgs& args) const override {
    return r.call_macro(macro_, closure_, args);
  }

 private:
  const MacroStmt& macro_;
  Scope* closure_;
};

// loop.cycle(a, b, ...): the argument at this iteration's index, round robin.
class CycleCallable : public Callable {
 public:
  explicit CycleCallable(size_t index) : index_(index) {}
  std::string name() const override { return "cycle"; }
  Value call(Renderer&, CallArgs& args) const override {
    if (args.positional.empty()) type_error("no items for cycling given");
    return args.positional[index_ % args.positional.size()];
  }

 private:
  size_t index_;
};

// loop.changed(x): true when x differs from the value given in the previous call.
struct ChangedState {
  bool has_last = false;
  Value last;
};
class ChangedCallable : public Callable {
 public:
  explicit ChangedCallable(std::shared_ptr<ChangedState> s) : state_(std::move(s)) {}
  std::string name() const override { return "changed"; }
  Value call(Renderer&, CallArgs& args) const override {
    Value current = Value::list(args.positional, true);
    const bool changed = !state_->has_last || !py_equal(current, state_->last);
    state_->has_last = true;
    state_->last = std::move(current);
    return Value::boolean(changed);
  }

 private:
  std::shared_ptr<ChangedState> state_;
};

const Value& key(const char* name) {
  // Keys of the loop object, made once (reading a shared_ptr from threads is safe).
  static const std::vector<std::pair<std::string, Value>> keys = [] {
    std::vector<std::pair<std::string, Value>> k;
    for (const char* n : {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                          "previtem", "nextitem", "depth", "depth0", "cycle", "changed"})
      k.emplace_back(n, Value::string(n));
    return k;
  }();
  for (const auto& [n, v] : keys)
    if (n == name) return v;
  return keys[0].second;
}

Value make_loop(const std::vector<Value>& items, size_t i,
                const std::shared_ptr<ChangedState>& changed) {
  const auto n = static_cast<int64_t>(items.size());
  const auto idx = static_cast<int64_t>(i);
  std::vector<std::pair<Value, Value>> d;
  d.reserve(13);
  d.emplace_back(key("index"), Value::integer(idx + 1));
  d.emplace_back(key("index0"), Value::integer(idx));
  d.emplace_back(key("revindex"), Value::integer(n - idx));
  d.emplace_back(key("revindex0"), Value::integer(n - idx - 1));
  d.emplace_back(key("first"), Value::boolean(i == 0));
  d.emplace_back(key("last"), Value::boolean(idx == n - 1));
  d.emplace_back(key("length"), Value::integer(n));
  d.emplace_back(key("previtem"),
                 i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
  d.emplace_back(key("nextitem"),
                 idx + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
  d.emplace_back(key("depth"), Value::integer(1));
  d.emplace_back(key("depth0"), Value::integer(0));
  d.emplace_back(key("cycle"), Value::callable(std::make_shared<CycleCallable>(i)));
  d.emplace_back(key("changed"), Value::callable(std::make_shared<ChangedCallable>(changed)));
  return Value::dict(std::move(d));
}

}  // namespace

// A TemplateError raised at `pos`, as the braid::Error the caller sees.
Error located(const Program& program, const TemplateError& e, uint32_t pos) {
  const LineCol lc = line_col(program.source, pos);
  return Error(e.kind, "chat template line " + std::to_string(lc.line) + ", column " +
                           std::to_string(lc.column) + ": " + e.message);
}

// Counts one level of evaluation and one step; refuses to go past the limits.
struct DepthGuard {
  explicit DepthGuard(Renderer& r) : r_(r) {
    r_.step();
    if (++r_.depth_ > r_.input_.limits.max_depth)
      fail(ErrorKind::invalid_argument, "the template recursed deeper than " +
                                            std::to_string(r_.input_.limits.max_depth) + " levels");
  }
  ~DepthGuard() { --r_.depth_; }
  Renderer& r_;
};

Renderer::Renderer(const Program& program, const RenderInput& input)
    : program_(program), input_(input) {
  for (const auto& [name, value] : input.variables) context_.set(name, value);
}

void Renderer::step() { charge(1); }

void Renderer::check_output(const std::string& out) const {
  if (out.size() > input_.limits.max_output_bytes)
    fail(ErrorKind::invalid_argument,
         "the rendered text passed " + std::to_string(input_.limits.max_output_bytes) + " bytes");
}

Scope* Renderer::push_scope(Scope* parent) {
  Scope* s;
  if (!free_scopes_.empty()) {
    s = free_scopes_.back();
    free_scopes_.pop_back();
  } else {
    s = &scopes_.emplace_back();
  }
  s->parent = parent;
  return s;
}

void Renderer::pop_scope(Scope* s) {
  if (s->captured) return;  // a macro still refers to it
  s->vars.clear();
  free_scopes_.push_back(s);
}

Namespace* Renderer::make_namespace() { return &namespaces_.emplace_back(); }

std::string Renderer::run() {
  WorkBudget budget(input_.limits.max_steps);
  Scope* root = push_scope(&context_);
  std::string out;
  try {
    exec_body(program_.body, root, out);
  } catch (const TemplateError& e) {
    // Raised outside any expression (a limit hit between statements).
    throw Error(e.kind, "chat template: " + e.message);
  }
  return out;
}

// ----------------------------------------------------------------------------- statements
Renderer::Flow Renderer::exec_body(const Body& body, Scope* scope, std::string& out) {
  for (const auto& s : body) {
    const Flow f = exec(*s, scope, out);
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

std::string Renderer::render_captured(const Body& body, Scope* scope) {
  std::string text;
  exec_body(body, scope, text);
  return text;
}

Renderer::Flow Renderer::exec(const Stmt& s, Scope* scope, std::string& out) {
  try {
    DepthGuard guard(*this);
    return exec_inner(s, scope, out);
  } catch (const TemplateError& e) {
    throw located(program_, e, s.pos);
  }
}

Renderer::Flow Renderer::exec_inner(const Stmt& s, Scope* scope, std::string& out) {
  switch (s.kind) {
    case StmtKind::text:
      out += static_cast<const TextStmt&>(s).text;
      check_output(out);
      return Flow::normal;
    case StmtKind::print: {
      const Value v = eval(static_cast<const PrintStmt&>(s).expr.get(), scope);
      append_str(v, out);
      check_output(out);
      return Flow::normal;
    }
    case StmtKind::if_: {
      const auto& node = static_cast<const IfStmt&>(s);
      for (const auto& [test, body] : node.branches)
        if (eval(test.get(), scope).truthy()) return exec_body(body, scope, out);
      return exec_body(node.otherwise, scope, out);
    }
    case StmtKind::for_:
      exec_for(static_cast<const ForStmt&>(s), scope, out);
      return Flow::normal;
    case StmtKind::set: {
      const auto& node = static_cast<const SetStmt&>(s);
      assign(node.target, eval(node.value.get(), scope), scope);
      return Flow::normal;
    }
    case StmtKind::set_block: {
      const auto& node = static_cast<const SetBlockStmt&>(s);
      Scope* inner = push_scope(scope);
      std::string text = render_captured(node.body, inner);
      pop_scope(inner);
      assign(node.target, apply_filters(node.filters, Value::string(std::move(text)), scope),
             scope);
      return Flow::normal;
    }
    case StmtKind::macro: {
      const auto& node = static_cast<const MacroStmt&>(s);
      scope->set(node.name, define_macro(node, scope));
      return Flow::normal;
    }
    case StmtKind::call_block: {
      const auto& node = static_cast<const CallBlockStmt&>(s);
      const Value caller = define_macro(*node.caller, scope);
      const Value callee = eval(node.call->callee.get(), scope);
      CallArgs args = eval_args(node.call->args, scope);
      args.keywords.emplace_back("caller", caller);
      append_str(call(callee, args), out);
      check_output(out);
      return Flow::normal;
    }
    case StmtKind::filter_block: {
      const auto& node = static_cast<const FilterBlockStmt&>(s);
      Scope* inner = push_scope(scope);
      std::string text = render_captured(node.body, inner);
      pop_scope(inner);
      append_str(apply_filters(node.filters, Value::string(std::move(text)), scope), out);
      check_output(out);
      return Flow::normal;
    }
    case StmtKind::with: {
      const auto& node = static_cast<const WithStmt&>(s);
      std::vector<Value> values;
      for (const auto& [target, expr] : node.assignments) values.push_back(eval(expr.get(), scope));
      Scope* inner = push_scope(scope);
      for (size_t i = 0; i < values.size(); ++i)
        assign(node.assignments[i].first, values[i], inner);
      const Flow f = exec_body(node.body, inner, out);
      pop_scope(inner);
      return f;
    }
    case StmtKind::scope: {
      Scope* inner = push_scope(scope);
      const Flow f = exec_body(static_cast<const ScopeStmt&>(s).body, inner, out);
      pop_scope(inner);
      return f;
    }
    case StmtKind::break_:
      return Flow::break_loop;
    case StmtKind::continue_:
      return Flow::continue_loop;
  }
  return Flow::normal;
}

void Renderer::exec_for(const ForStmt& f, Scope* scope, std::string& out) {
  std::vector<Value> items;
  {
    const Value iterable = eval(f.iter.get(), scope);
    try {
      items = iterate(iterable);
    } catch (const TemplateError& e) {
      throw located(program_, e, f.iter->pos);
    }
  }
  if (f.filter) {
    std::vector<Value> kept;
    for (Value& item : items) {
      Scope* probe = push_scope(scope);
      assign(f.target, item, probe);
      const bool keep = eval(f.filter.get(), probe).truthy();
      pop_scope(probe);
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    Scope* inner = push_scope(scope);
    exec_body(f.otherwise, inner, out);
    pop_scope(inner);
    return;
  }
  std::shared_ptr<ChangedState> changed;
  if (f.uses_loop) changed = std::make_shared<ChangedState>();
  for (size_t i = 0; i < items.size(); ++i) {
    step();
    Scope* inner = push_scope(scope);
    assign(f.target, items[i], inner);
    if (f.uses_loop) inner->set("loop", make_loop(items, i, changed));
    const Flow flow = exec_body(f.body, inner, out);
    pop_scope(inner);
    if (flow == Flow::break_loop) break;
  }
}

void Renderer::assign(const Target& t, const Value& v, Scope* scope) {
  try {
    switch (t.kind) {
      case Target::Kind::name:
        scope->set(t.name, v);
        return;
      case Target::Kind::ns_attr: {
        const Value target = lookup(t.name, scope);
        if (!target.is_ns())
          fail(ErrorKind::invalid_argument, "cannot assign attribute on non-namespace object");
        Namespace* ns = target.ns();
        for (auto& [k, old] : ns->attrs)
          if (k == t.attr) {
            old = v;
            return;
          }
        ns->attrs.emplace_back(t.attr, v);
        return;
      }
      case Target::Kind::tuple: {
        const std::vector<Value> parts = iterate(v);
        if (parts.size() < t.items.size())
          type_error("not enough values to unpack (expected " + std::to_string(t.items.size()) +
                     ", got " + std::to_string(parts.size()) + ")");
        if (parts.size() > t.items.size())
          type_error("too many values to unpack (expected " + std::to_string(t.items.size()) + ")");
        for (size_t i = 0; i < parts.size(); ++i) assign(t.items[i], parts[i], scope);
        return;
      }
    }
  } catch (const TemplateError& e) {
    throw located(program_, e, t.pos);
  }
}

Value Renderer::define_macro(const MacroStmt& m, Scope* scope) {
  for (Scope* s = scope; s; s = s->parent) s->captured = true;
  return Value::callable(std::make_shared<MacroCallable>(m, scope));
}

Value Renderer::call_macro(const MacroStmt& m, Scope* closure, CallArgs& args) {
  if (macro_depth_ >= input_.limits.max_macro_depth)
    fail(ErrorKind::invalid_argument, "macros nested (recursed) deeper than " +
                                          std::to_string(input_.limits.max_macro_depth) + " calls");
  struct MacroDepth {
    explicit MacroDepth(int& d) : d_(d) { ++d_; }
    ~MacroDepth() { --d_; }
    int& d_;
  } macro_depth(macro_depth_);

  Scope* s = push_scope(closure);
  struct PopScope {
    Renderer& r;
    Scope* s;
    ~PopScope() { r.pop_scope(s); }
  } pop{*this, s};

  const size_t n = m.params.size();
  std::vector<bool> bound(n, false);
  std::vector<Value> extra_positional;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < n) {
      s->set(m.params[i], std::move(args.positional[i]));
      bound[i] = true;
    } else if (m.uses_varargs) {
      extra_positional.push_back(std::move(args.positional[i]));
    } else {
      type_error("macro '" + m.name + "' takes not more than " + std::to_string(n) +
                 " argument(s)");
    }
  }
  std::vector<std::pair<Value, Value>> extra_keywords;
  Value caller;
  for (auto& [k, v] : args.keywords) {
    const auto it = std::find(m.params.begin(), m.params.end(), k);
    if (it != m.params.end()) {
      const size_t i = static_cast<size_t>(it - m.params.begin());
      if (bound[i])
        type_error("macro '" + m.name + "' got multiple values for argument '" + k + "'");
      s->set(m.params[i], std::move(v));
      bound[i] = true;
    } else if (k == "caller" && m.uses_caller) {
      caller = std::move(v);
    } else if (m.uses_kwargs) {
      extra_keywords.emplace_back(Value::string(k), std::move(v));
    } else {
      type_error("macro '" + m.name + "' was invoked with unknown keyword argument '" + k + "'");
    }
  }
  const size_t first_default = n - m.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    if (i >= first_default)
      s->set(m.params[i], eval(m.defaults[i - first_default].get(), s));
    else
      s->set(m.params[i], Value::undefined("parameter '" + m.params[i] + "' was not provided"));
  }
  if (m.uses_varargs) s->set("varargs", Value::list(std::move(extra_positional), true));
  if (m.uses_kwargs) s->set("kwargs", Value::dict(std::move(extra_keywords)));
  if (m.uses_caller)
    s->set("caller", caller.is_undefined() ? Value::undefined("'caller' is undefined") : caller);
  std::string text;
  exec_body(m.body, s, text);
  return Value::string(std::move(text));
}

Value Renderer::apply_filters(const std::vector<std::unique_ptr<FilterExpr>>& filters, Value v,
                              Scope* scope) {
  for (const auto& f : filters) {
    CallArgs args = eval_args(f->args, scope);
    try {
      v = f->fn(*this, v, args);
    } catch (const TemplateError& e) {
      throw located(program_, e, f->pos);
    }
  }
  return v;
}

// ---------------------------------------------------------------------------- expressions
Value Renderer::lookup(std::string_view name, Scope* scope) {
  for (Scope* s = scope; s; s = s->parent)
    if (const Value* v = s->find(name)) return *v;
  Value g = find_global(name);
  if (!g.is_undefined()) return g;
  return Value::undefined("'" + std::string(name) + "' is undefined");
}

Value Renderer::call(const Value& callee, CallArgs& args) {
  if (callee.is_callable()) return callee.callable().call(*this, args);
  if (callee.is_undefined()) fail_undefined(callee);
  type_error(fmt::format("'{}' object is not callable", callee.type_name()));
}

CallArgs Renderer::eval_args(const Args& a, Scope* scope) {
  CallArgs out;
  out.positional.reserve(a.positional.size());
  for (const auto& p : a.positional) out.positional.push_back(eval(p.get(), scope));
  for (const auto& [k, v] : a.keywords) out.keywords.emplace_back(k, eval(v.get(), scope));
  if (a.star) {
    const Value star = eval(a.star.get(), scope);
    for (Value& v : iterate(star)) out.positional.push_back(std::move(v));
  }
  if (a.star_star) {
    const Value kw = eval(a.star_star.get(), scope);
    if (!kw.is_dict()) type_error("argument after ** must be a mapping, not " + kw.type_name());
    for (const auto& [k, v] : kw.dict().items) {
      if (!k.is_string()) type_error("keywords must be strings");
      out.keywords.emplace_back(k.str(), v);
    }
  }
  return out;
}

Value Renderer::eval(const Expr* e, Scope* scope) {
  DepthGuard guard(*this);
  try {
    return eval_inner(e, scope);
  } catch (const TemplateError& err) {
    // The innermost expression that failed names the place; outer ones let braid::Error pass.
    throw located(program_, err, e->pos);
  }
}

bool Renderer::eval_compare(const CompareExpr& c, Scope* scope) {
  Value left = eval(c.first.get(), scope);
  for (const auto& [op, expr] : c.rest) {
    Value right = eval(expr.get(), scope);
    bool ok = false;
    switch (op) {
      case CmpOp::eq:
        ok = py_equal(left, right);
        break;
      case CmpOp::ne:
        ok = !py_equal(left, right);
        break;
      case CmpOp::lt:
        ok = py_less(left, right);
        break;
      case CmpOp::le:
        ok = py_less(left, right) || py_equal(left, right);
        break;
      case CmpOp::gt:
        ok = py_less(right, left);
        break;
      case CmpOp::ge:
        ok = py_less(right, left) || py_equal(left, right);
        break;
      case CmpOp::in:
        ok = contains(right, left);
        break;
      case CmpOp::not_in:
        ok = !contains(right, left);
        break;
    }
    if (!ok) return false;
    left = std::move(right);
  }
  return true;
}

Value Renderer::eval_inner(const Expr* e, Scope* scope) {
  switch (e->kind) {
    case ExprKind::literal:
      return static_cast<const LiteralExpr*>(e)->value;
    case ExprKind::name:
      return lookup(static_cast<const NameExpr*>(e)->name, scope);
    case ExprKind::list: {
      const auto* l = static_cast<const ListExpr*>(e);
      std::vector<Value> items;
      items.reserve(l->items.size());
      for (const auto& i : l->items) items.push_back(eval(i.get(), scope));
      return Value::list(std::move(items), l->tuple);
    }
    case ExprKind::dict: {
      std::vector<std::pair<Value, Value>> items;
      for (const auto& [k, v] : static_cast<const DictExpr*>(e)->items) {
        Value key = eval(k.get(), scope);
        Value value = eval(v.get(), scope);
        if (key.is_dict() || (key.is_list() && !key.list().tuple))
          type_error("unhashable type: '" + key.type_name() + "'");
        bool replaced = false;
        for (auto& [ek, ev] : items)
          if (py_equal(ek, key)) {
            ev = value;  // a repeated key keeps its first place and takes the last value
            replaced = true;
          }
        if (!replaced) items.emplace_back(std::move(key), std::move(value));
      }
      return Value::dict(std::move(items));
    }
    case ExprKind::get_attr: {
      const auto* g = static_cast<const GetAttrExpr*>(e);
      return get_attr(eval(g->obj.get(), scope), g->name);
    }
    case ExprKind::get_item: {
      const auto* g = static_cast<const GetItemExpr*>(e);
      const Value obj = eval(g->obj.get(), scope);
      return get_item(obj, eval(g->key.get(), scope));
    }
    case ExprKind::slice: {
      const auto* s = static_cast<const SliceExpr*>(e);
      const Value obj = eval(s->obj.get(), scope);
      auto part = [&](const ExprPtr& p) { return p ? eval(p.get(), scope) : Value::none(); };
      const Value start = part(s->start), stop = part(s->stop), step = part(s->step);
      return slice(obj, start, stop, step);
    }
    case ExprKind::call: {
      const auto* c = static_cast<const CallExpr*>(e);
      const Value callee = eval(c->callee.get(), scope);
      CallArgs args = eval_args(c->args, scope);
      return call(callee, args);
    }
    case ExprKind::filter: {
      const auto* f = static_cast<const FilterExpr*>(e);
      const Value input = eval(f->input.get(), scope);
      CallArgs args = eval_args(f->args, scope);
      return f->fn(*this, input, args);
    }
    case ExprKind::test: {
      const auto* t = static_cast<const TestExpr*>(e);
      const Value input = eval(t->input.get(), scope);
      CallArgs args = eval_args(t->args, scope);
      return Value::boolean(t->fn(*this, input, args));
    }
    case ExprKind::not_:
      return Value::boolean(!eval(static_cast<const UnaryExpr*>(e)->operand.get(), scope).truthy());
    case ExprKind::neg:
      return negate(eval(static_cast<const UnaryExpr*>(e)->operand.get(), scope));
    case ExprKind::pos:
      return unary_plus(eval(static_cast<const UnaryExpr*>(e)->operand.get(), scope));
    case ExprKind::binary: {
      const auto* b = static_cast<const BinaryExpr*>(e);
      const Value left = eval(b->left.get(), scope);
      return binary(b->op, left, eval(b->right.get(), scope));
    }
    case ExprKind::and_: {
      const auto* b = static_cast<const BinaryExpr*>(e);
      Value left = eval(b->left.get(), scope);
      return left.truthy() ? eval(b->right.get(), scope) : left;
    }
    case ExprKind::or_: {
      const auto* b = static_cast<const BinaryExpr*>(e);
      Value left = eval(b->left.get(), scope);
      return left.truthy() ? left : eval(b->right.get(), scope);
    }
    case ExprKind::concat: {
      std::string out;
      for (const auto& p : static_cast<const ConcatExpr*>(e)->parts) {
        append_str(eval(p.get(), scope), out);
        if (out.size() > kMaxStringBytes)
          fail(ErrorKind::invalid_argument, "a string the template builds is too large");
      }
      return Value::string(std::move(out));
    }
    case ExprKind::compare:
      return Value::boolean(eval_compare(*static_cast<const CompareExpr*>(e), scope));
    case ExprKind::cond: {
      const auto* c = static_cast<const CondExpr*>(e);
      if (eval(c->test.get(), scope).truthy()) return eval(c->then.get(), scope);
      if (c->otherwise) return eval(c->otherwise.get(), scope);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else section was defined");
    }
  }
  return Value();
}

std::string render(const Program& program, const RenderInput& input) {
  Renderer r(program, input);
  return r.run();
}

}  // namespace braid::chat::jinja
