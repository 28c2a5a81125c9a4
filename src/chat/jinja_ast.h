// The parsed template: expressions and statements, each with the byte offset of its source for
// error messages. Built once by the parser and only read afterwards, so one tree serves every
// render at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_builtins.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_value.h"

namespace braid::chat::jinja {

// ------------------------------------------------------------------------------ expressions
enum class ExprKind : uint8_t {
  literal,
  name,
  list,
  dict,
  get_attr,
  get_item,
  slice,
  call,
  filter,
  test,
  not_,
  neg,
  pos,
  binary,
  concat,
  compare,
  and_,
  or_,
  cond,
};

struct Expr {
  Expr(ExprKind k, uint32_t p) : kind(k), pos(p) {}
  virtual ~Expr() = default;
  ExprKind kind;
  uint32_t pos;
  uint32_t depth = 1;  // height of the subtree: the parser bounds it (recursion when evaluated)
};
using ExprPtr = std::unique_ptr<Expr>;

struct Args {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  ExprPtr star;       // *args
  ExprPtr star_star;  // **kwargs
};

struct LiteralExpr : Expr {
  LiteralExpr(uint32_t p, Value v) : Expr(ExprKind::literal, p), value(std::move(v)) {}
  Value value;
};
struct NameExpr : Expr {
  NameExpr(uint32_t p, std::string n) : Expr(ExprKind::name, p), name(std::move(n)) {}
  std::string name;
};
struct ListExpr : Expr {  // [a, b] or (a, b)
  ListExpr(uint32_t p, bool t) : Expr(ExprKind::list, p), tuple(t) {}
  std::vector<ExprPtr> items;
  bool tuple;
};
struct DictExpr : Expr {
  explicit DictExpr(uint32_t p) : Expr(ExprKind::dict, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct GetAttrExpr : Expr {  // obj.name
  GetAttrExpr(uint32_t p, ExprPtr o, std::string n)
      : Expr(ExprKind::get_attr, p), obj(std::move(o)), name(std::move(n)) {}
  ExprPtr obj;
  std::string name;
};
struct GetItemExpr : Expr {  // obj[key]
  GetItemExpr(uint32_t p, ExprPtr o, ExprPtr k)
      : Expr(ExprKind::get_item, p), obj(std::move(o)), key(std::move(k)) {}
  ExprPtr obj, key;
};
struct SliceExpr : Expr {  // obj[start:stop:step]; absent parts are null
  SliceExpr(uint32_t p) : Expr(ExprKind::slice, p) {}
  ExprPtr obj, start, stop, step;
};
struct CallExpr : Expr {
  CallExpr(uint32_t p, ExprPtr c) : Expr(ExprKind::call, p), callee(std::move(c)) {}
  ExprPtr callee;
  Args args;
};
struct FilterExpr
    : Expr {  // input | name(args); input is null inside {% filter %} / {% set x | f %}
  FilterExpr(uint32_t p, ExprPtr in, std::string n, FilterFn f)
      : Expr(ExprKind::filter, p), input(std::move(in)), name(std::move(n)), fn(f) {}
  ExprPtr input;
  std::string name;
  FilterFn fn;
  Args args;
};
struct TestExpr : Expr {  // input is [not] name(args)
  TestExpr(uint32_t p, ExprPtr in, std::string n, TestFn f)
      : Expr(ExprKind::test, p), input(std::move(in)), name(std::move(n)), fn(f) {}
  ExprPtr input;
  std::string name;
  TestFn fn;
  Args args;
};
struct UnaryExpr : Expr {  // not x, -x, +x
  UnaryExpr(ExprKind k, uint32_t p, ExprPtr o) : Expr(k, p), operand(std::move(o)) {}
  ExprPtr operand;
};
struct BinaryExpr : Expr {  // arithmetic, and, or
  BinaryExpr(ExprKind k, uint32_t p, BinOp o, ExprPtr l, ExprPtr r)
      : Expr(k, p), op(o), left(std::move(l)), right(std::move(r)) {}
  BinOp op;
  ExprPtr left, right;
};
struct ConcatExpr : Expr {  // a ~ b ~ c
  explicit ConcatExpr(uint32_t p) : Expr(ExprKind::concat, p) {}
  std::vector<ExprPtr> parts;
};
enum class CmpOp : uint8_t { eq, ne, lt, le, gt, ge, in, not_in };
struct CompareExpr : Expr {  // a < b <= c, chained as in Python
  CompareExpr(uint32_t p, ExprPtr f) : Expr(ExprKind::compare, p), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CmpOp, ExprPtr>> rest;
};
struct CondExpr : Expr {  // then if test else otherwise (otherwise may be null)
  explicit CondExpr(uint32_t p) : Expr(ExprKind::cond, p) {}
  ExprPtr test, then, otherwise;
};

// ------------------------------------------------------------------------------- statements
enum class StmtKind : uint8_t {
  text,
  print,
  if_,
  for_,
  set,
  set_block,
  macro,
  call_block,
  filter_block,
  with,
  break_,
  continue_,
  scope,
};

struct Stmt {
  Stmt(StmtKind k, uint32_t p) : kind(k), pos(p) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  uint32_t pos;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// What a set, for or with assigns to: a name, a tuple of targets, or ns.attr.
struct Target {
  enum class Kind : uint8_t { name, tuple, ns_attr } kind = Kind::name;
  uint32_t pos = 0;
  std::string name;  // the variable (for ns_attr: the namespace's variable)
  std::string attr;  // ns_attr only
  std::vector<Target> items;
};

struct TextStmt : Stmt {
  TextStmt(uint32_t p, std::string t) : Stmt(StmtKind::text, p), text(std::move(t)) {}
  std::string text;
};
struct PrintStmt : Stmt {
  PrintStmt(uint32_t p, ExprPtr e) : Stmt(StmtKind::print, p), expr(std::move(e)) {}
  ExprPtr expr;
};
struct IfStmt : Stmt {
  explicit IfStmt(uint32_t p) : Stmt(StmtKind::if_, p) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, then each elif
  Body otherwise;
};
struct ForStmt : Stmt {
  explicit ForStmt(uint32_t p) : Stmt(StmtKind::for_, p) {}
  Target target;
  ExprPtr iter;
  ExprPtr filter;  // `for x in xs if cond`
  Body body, otherwise;
  bool uses_loop = true;  // false when nothing in the body names `loop`: skip building it
};
struct SetStmt : Stmt {
  explicit SetStmt(uint32_t p) : Stmt(StmtKind::set, p) {}
  Target target;
  ExprPtr value;
};
struct SetBlockStmt : Stmt {  // {% set x | filters %}body{% endset %}
  explicit SetBlockStmt(uint32_t p) : Stmt(StmtKind::set_block, p) {}
  Target target;
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
};
struct MacroStmt : Stmt {
  explicit MacroStmt(uint32_t p) : Stmt(StmtKind::macro, p) {}
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  // Whether the body names varargs / kwargs / caller: jinja2 accepts extra arguments (or a
  // caller) only then.
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
};
struct CallBlockStmt : Stmt {  // {% call(params) macro(args) %}body{% endcall %}
  explicit CallBlockStmt(uint32_t p) : Stmt(StmtKind::call_block, p) {}
  std::unique_ptr<MacroStmt> caller;  // body and parameters of `caller`
  std::unique_ptr<CallExpr> call;
};
struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(uint32_t p) : Stmt(StmtKind::filter_block, p) {}
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
};
struct WithStmt : Stmt {
  explicit WithStmt(uint32_t p) : Stmt(StmtKind::with, p) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};
struct ScopeStmt : Stmt {  // a body in its own scope: transformers' {% generation %}
  explicit ScopeStmt(uint32_t p) : Stmt(StmtKind::scope, p) {}
  Body body;
};
struct LoopControlStmt : Stmt {  // break / continue
  LoopControlStmt(StmtKind k, uint32_t p) : Stmt(k, p) {}
};

// ------------------------------------------------------------------------------ tree walks
// The names a subtree reads as variables: the parser asks whether a loop body uses `loop` and
// whether a macro uses `varargs`, `kwargs` or `caller`. (A scan of the source is enough: extra
// names only cost a loop object or accept arguments jinja2 would refuse.)
void collect_names(const Expr* e, std::vector<std::string>& out);
void collect_body(const Body& body, std::vector<std::string>& out);
// 1 + the height of the node's tallest child (children's depth fields already set).
uint32_t height(const Expr* e);

}  // namespace braid::chat::jinja
