// Walks over the parsed tree: the variable names a subtree reads and each expression's height.
#include "chat/jinja_ast.h"

#include <algorithm>

namespace braid::chat::jinja {

namespace {

void collect_args(const Args& a, std::vector<std::string>& out) {
  for (const auto& p : a.positional) collect_names(p.get(), out);
  for (const auto& [k, v] : a.keywords) collect_names(v.get(), out);
  collect_names(a.star.get(), out);
  collect_names(a.star_star.get(), out);
}

void collect_stmt(const Stmt* s, std::vector<std::string>& out) {
  switch (s->kind) {
    case StmtKind::text:
    case StmtKind::break_:
    case StmtKind::continue_:
      return;
    case StmtKind::print:
      collect_names(static_cast<const PrintStmt*>(s)->expr.get(), out);
      return;
    case StmtKind::if_: {
      auto* i = static_cast<const IfStmt*>(s);
      for (const auto& [cond, body] : i->branches) {
        collect_names(cond.get(), out);
        collect_body(body, out);
      }
      collect_body(i->otherwise, out);
      return;
    }
    case StmtKind::for_: {
      auto* f = static_cast<const ForStmt*>(s);
      collect_names(f->iter.get(), out);
      collect_names(f->filter.get(), out);
      collect_body(f->body, out);
      collect_body(f->otherwise, out);
      return;
    }
    case StmtKind::set: {
      auto* st = static_cast<const SetStmt*>(s);
      if (st->target.kind == Target::Kind::ns_attr) out.push_back(st->target.name);
      collect_names(st->value.get(), out);
      return;
    }
    case StmtKind::set_block: {
      auto* st = static_cast<const SetBlockStmt*>(s);
      if (st->target.kind == Target::Kind::ns_attr) out.push_back(st->target.name);
      for (const auto& f : st->filters) collect_names(f.get(), out);
      collect_body(st->body, out);
      return;
    }
    case StmtKind::macro: {
      auto* m = static_cast<const MacroStmt*>(s);
      for (const auto& d : m->defaults) collect_names(d.get(), out);
      collect_body(m->body, out);
      return;
    }
    case StmtKind::call_block: {
      auto* c = static_cast<const CallBlockStmt*>(s);
      collect_names(c->call.get(), out);
      collect_stmt(c->caller.get(), out);
      return;
    }
    case StmtKind::filter_block: {
      auto* f = static_cast<const FilterBlockStmt*>(s);
      for (const auto& x : f->filters) collect_names(x.get(), out);
      collect_body(f->body, out);
      return;
    }
    case StmtKind::with: {
      auto* w = static_cast<const WithStmt*>(s);
      for (const auto& [t, e] : w->assignments) collect_names(e.get(), out);
      collect_body(w->body, out);
      return;
    }
    case StmtKind::scope:
      collect_body(static_cast<const ScopeStmt*>(s)->body, out);
      return;
  }
}

uint32_t args_depth(const Args& a) {
  uint32_t d = 0;
  for (const auto& p : a.positional) d = std::max(d, p->depth);
  for (const auto& [k, v] : a.keywords) d = std::max(d, v->depth);
  if (a.star) d = std::max(d, a.star->depth);
  if (a.star_star) d = std::max(d, a.star_star->depth);
  return d;
}

uint32_t depth_of(const Expr* e) { return e ? e->depth : 0; }

}  // namespace

void collect_names(const Expr* e, std::vector<std::string>& out) {
  if (!e) return;
  switch (e->kind) {
    case ExprKind::literal:
      return;
    case ExprKind::name:
      out.push_back(static_cast<const NameExpr*>(e)->name);
      return;
    case ExprKind::list:
      for (const auto& i : static_cast<const ListExpr*>(e)->items) collect_names(i.get(), out);
      return;
    case ExprKind::dict:
      for (const auto& [k, v] : static_cast<const DictExpr*>(e)->items) {
        collect_names(k.get(), out);
        collect_names(v.get(), out);
      }
      return;
    case ExprKind::get_attr:
      collect_names(static_cast<const GetAttrExpr*>(e)->obj.get(), out);
      return;
    case ExprKind::get_item: {
      auto* g = static_cast<const GetItemExpr*>(e);
      collect_names(g->obj.get(), out);
      collect_names(g->key.get(), out);
      return;
    }
    case ExprKind::slice: {
      auto* s = static_cast<const SliceExpr*>(e);
      for (const Expr* x : {s->obj.get(), s->start.get(), s->stop.get(), s->step.get()})
        collect_names(x, out);
      return;
    }
    case ExprKind::call: {
      auto* c = static_cast<const CallExpr*>(e);
      collect_names(c->callee.get(), out);
      collect_args(c->args, out);
      return;
    }
    case ExprKind::filter: {
      auto* f = static_cast<const FilterExpr*>(e);
      collect_names(f->input.get(), out);
      collect_args(f->args, out);
      return;
    }
    case ExprKind::test: {
      auto* t = static_cast<const TestExpr*>(e);
      collect_names(t->input.get(), out);
      collect_args(t->args, out);
      return;
    }
    case ExprKind::not_:
    case ExprKind::neg:
    case ExprKind::pos:
      collect_names(static_cast<const UnaryExpr*>(e)->operand.get(), out);
      return;
    case ExprKind::binary:
    case ExprKind::and_:
    case ExprKind::or_: {
      auto* b = static_cast<const BinaryExpr*>(e);
      collect_names(b->left.get(), out);
      collect_names(b->right.get(), out);
      return;
    }
    case ExprKind::concat:
      for (const auto& p : static_cast<const ConcatExpr*>(e)->parts) collect_names(p.get(), out);
      return;
    case ExprKind::compare: {
      auto* c = static_cast<const CompareExpr*>(e);
      collect_names(c->first.get(), out);
      for (const auto& [op, x] : c->rest) collect_names(x.get(), out);
      return;
    }
    case ExprKind::cond: {
      auto* c = static_cast<const CondExpr*>(e);
      collect_names(c->test.get(), out);
      collect_names(c->then.get(), out);
      collect_names(c->otherwise.get(), out);
      return;
    }
  }
}

void collect_body(const Body& body, std::vector<std::string>& out) {
  for (const auto& s : body) collect_stmt(s.get(), out);
}

uint32_t height(const Expr* e) {
  uint32_t d = 0;
  switch (e->kind) {
    case ExprKind::literal:
    case ExprKind::name:
      break;
    case ExprKind::list:
      for (const auto& i : static_cast<const ListExpr*>(e)->items) d = std::max(d, i->depth);
      break;
    case ExprKind::dict:
      for (const auto& [k, v] : static_cast<const DictExpr*>(e)->items)
        d = std::max({d, k->depth, v->depth});
      break;
    case ExprKind::get_attr:
      d = depth_of(static_cast<const GetAttrExpr*>(e)->obj.get());
      break;
    case ExprKind::get_item: {
      auto* g = static_cast<const GetItemExpr*>(e);
      d = std::max(depth_of(g->obj.get()), depth_of(g->key.get()));
      break;
    }
    case ExprKind::slice: {
      auto* s = static_cast<const SliceExpr*>(e);
      d = std::max({depth_of(s->obj.get()), depth_of(s->start.get()), depth_of(s->stop.get()),
                    depth_of(s->step.get())});
      break;
    }
    case ExprKind::call: {
      auto* c = static_cast<const CallExpr*>(e);
      d = std::max(depth_of(c->callee.get()), args_depth(c->args));
      break;
    }
    case ExprKind::filter: {
      auto* f = static_cast<const FilterExpr*>(e);
      d = std::max(depth_of(f->input.get()), args_depth(f->args));
      break;
    }
    case ExprKind::test: {
      auto* t = static_cast<const TestExpr*>(e);
      d = std::max(depth_of(t->input.get()), args_depth(t->args));
      break;
    }
    case ExprKind::not_:
    case ExprKind::neg:
    case ExprKind::pos:
      d = depth_of(static_cast<const UnaryExpr*>(e)->operand.get());
      break;
    case ExprKind::binary:
    case ExprKind::and_:
    case ExprKind::or_: {
      auto* b = static_cast<const BinaryExpr*>(e);
      d = std::max(depth_of(b->left.get()), depth_of(b->right.get()));
      break;
    }
    case ExprKind::concat:
      for (const auto& p : static_cast<const ConcatExpr*>(e)->parts) d = std::max(d, p->depth);
      break;
    case ExprKind::compare: {
      auto* c = static_cast<const CompareExpr*>(e);
      d = c->first->depth;
      for (const auto& [op, x] : c->rest) d = std::max(d, x->depth);
      break;
    }
    case ExprKind::cond: {
      auto* c = static_cast<const CondExpr*>(e);
      d = std::max(
          {depth_of(c->test.get()), depth_of(c->then.get()), depth_of(c->otherwise.get())});
      break;
    }
  }
  return d + 1;
}

}  // namespace braid::chat::jinja
