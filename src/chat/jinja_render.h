// Runs a parsed template: statements write text, expressions compute values, with jinja2's
// scoping (a for-loop iteration, macro call, `with` or block set opens a scope; `if` does not;
// namespace() objects carry values out of loops).
//
// One Renderer serves one render call: it owns the scopes, namespaces and output of that call,
// so concurrent renders of one Program share nothing mutable. Hostile input is bounded: output
// size, evaluation steps, evaluation depth (macro recursion included) and data nesting all have
// limits that end the render with braid::Error instead of exhausting memory or the stack.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"

namespace braid::chat::jinja {

struct Program {
  std::string source;  // normalised (offsets in the tree point here)
  Body body;
};

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;
  uint64_t max_steps = 50'000'000;  // work units: see WorkBudget
  int max_depth = 1500;             // nested evaluation (recursion) depth
  int max_macro_depth = 100;        // nested macro calls
};

struct RenderInput {
  std::vector<std::pair<std::string, Value>> variables;  // the context: messages, bos_token, ...
  std::chrono::system_clock::time_point now;             // strftime_now's clock
  RenderLimits limits;
};

// Renders the program; throws braid::Error naming the line and column of what failed.
std::string render(const Program& program, const RenderInput& input);

struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string_view, Value>> vars;
  bool captured = false;  // a macro closes over it: keep it until the render ends
  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value v);
};

// The state of one render; builtins reach it to call back into the template or make objects.
class Renderer {
 public:
  Renderer(const Program& program, const RenderInput& input);
  std::string run();

  // Services for builtins.
  Namespace* make_namespace();
  std::chrono::system_clock::time_point now() const { return input_.now; }
  Value call(const Value& callee, CallArgs& args);
  Value call_macro(const MacroStmt& m, Scope* closure, CallArgs& args);

 private:
  enum class Flow { normal, break_loop, continue_loop };
  friend struct DepthGuard;

  Flow exec_body(const Body& body, Scope* scope, std::string& out);
  Flow exec(const Stmt& s, Scope* scope, std::string& out);
  Flow exec_inner(const Stmt& s, Scope* scope, std::string& out);
  void exec_for(const ForStmt& f, Scope* scope, std::string& out);
  Value eval(const Expr* e, Scope* scope);
  Value eval_inner(const Expr* e, Scope* scope);
  Value eval_call(const CallExpr& c, Scope* scope);
  CallArgs eval_args(const Args& a, Scope* scope);
  bool eval_compare(const CompareExpr& c, Scope* scope);
  Value lookup(std::string_view name, Scope* scope);
  void assign(const Target& t, const Value& v, Scope* scope);
  Value apply_filters(const std::vector<std::unique_ptr<FilterExpr>>& filters, Value v,
                      Scope* scope);
  Value define_macro(const MacroStmt& m, Scope* scope);
  std::string render_captured(const Body& body, Scope* scope);

  Scope* push_scope(Scope* parent);
  void pop_scope(Scope* s);
  void step();
  void check_output(const std::string& out) const;

  const Program& program_;
  const RenderInput& input_;
  std::deque<Scope> scopes_;
  std::vector<Scope*> free_scopes_;
  std::deque<Namespace> namespaces_;
  Scope context_;
  int depth_ = 0;
  int macro_depth_ = 0;
};

}  // namespace braid::chat::jinja
