#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

namespace braid::chat::jinja {

namespace {

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::data:
      return "template data";
    case Tok::var_begin:
      return "begin of print statement";
    case Tok::var_end:
      return "end of print statement";
    case Tok::block_begin:
      return "begin of statement block";
    case Tok::block_end:
      return "end of statement block";
    case Tok::eof:
      return "end of template";
    case Tok::string:
      return "string";
    case Tok::integer:
    case Tok::floating:
      return "number";
    default:
      return "'" + t.text + "'";
  }
}

bool names(const std::vector<std::string>& found, const char* name) {
  return std::find(found.begin(), found.end(), name) != found.end();
}

class Parser {
 public:
  explicit Parser(const std::string& source) : tokens_(tokenize(source)) {}

  Body run() {
    Body body = subparse({});
    if (cur().type != Tok::eof) fail_here("unexpected " + describe(cur()));
    return body;
  }

 private:
  // ---------------------------------------------------------------------------- utilities
  const Token& cur() const { return tokens_[i_]; }
  const Token& peek(size_t ahead = 1) const {
    return tokens_[std::min(i_ + ahead, tokens_.size() - 1)];
  }
  void advance() {
    if (i_ + 1 < tokens_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  [[noreturn]] void fail_at(uint32_t pos, std::string message,
                            ErrorKind kind = ErrorKind::invalid_argument) {
    throw SyntaxError{pos, std::move(message), kind};
  }
  [[noreturn]] void fail_here(std::string message) { fail_at(cur().pos, std::move(message)); }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail_here(std::string("expected '") + op + "', got " + describe(cur()));
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail_here(std::string("expected ") + what + ", got " + describe(cur()));
    advance();
  }
  std::string expect_name() {
    if (cur().type != Tok::name) fail_here("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }

  // Sets the node's height and refuses trees taller than kMaxExprDepth.
  template <typename T>
  T& finish(T& node) {
    node->depth = height(node.get());
    if (node->depth > kMaxExprDepth)
      fail_at(node->pos,
              "an expression nested deeper than " + std::to_string(kMaxExprDepth) + " levels");
    return node;
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth)
        p_.fail_here("the template nests deeper than " + std::to_string(kMaxParseDepth) +
                     " levels");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  // ------------------------------------------------------------------------------- bodies
  // Statements until a block tag whose name is in `end`; the cursor is left on that name.
  Body subparse(std::initializer_list<const char*> end) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::data) {
        body.push_back(std::make_unique<TextStmt>(t.pos, t.text));
        advance();
      } else if (t.type == Tok::var_begin) {
        const uint32_t pos = t.pos;
        advance();
        ExprPtr e = parse_tuple(false, true, {});
        expect(Tok::var_end, "end of print statement '}}'");
        body.push_back(std::make_unique<PrintStmt>(pos, std::move(e)));
      } else if (t.type == Tok::block_begin) {
        advance();
        for (const char* e : end)
          if (is_name(e)) return body;
        body.push_back(parse_statement());
        expect(Tok::block_end, "end of statement block '%}'");
      } else if (t.type == Tok::eof) {
        return body;
      } else {
        fail_here("unexpected " + describe(t));
      }
    }
  }

  // After a statement's header: `%}`, the body, up to one of `end` (cursor on that name).
  Body parse_statements(std::initializer_list<const char*> end, const char* opened_by,
                        uint32_t opened_at) {
    expect(Tok::block_end, "end of statement block '%}'");
    Body body = subparse(end);
    if (cur().type == Tok::eof) {
      std::string wanted;
      for (const char* e : end) wanted += std::string(wanted.empty() ? "'" : " or '") + e + "'";
      fail_at(opened_at, std::string("unclosed '") + opened_by + "': expected " + wanted +
                             " before the end of the template");
    }
    return body;
  }

  StmtPtr parse_statement() {
    if (cur().type != Tok::name) fail_here("tag name expected, got " + describe(cur()));
    const std::string tag = cur().text;
    const uint32_t pos = cur().pos;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with") return parse_with();
    if (tag == "print") {
      advance();
      // {% print a, b %} prints each in turn: the same as a ~ b.
      auto parts = std::make_unique<ConcatExpr>(pos);
      while (cur().type != Tok::block_end) {
        if (!parts->parts.empty()) expect_op(",");
        parts->parts.push_back(parse_expression(true));
      }
      if (parts->parts.empty()) fail_here("expected an expression after 'print'");
      finish(parts);
      return std::make_unique<PrintStmt>(pos, std::move(parts));
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_here("'" + tag + "' outside a for loop");
      advance();
      return std::make_unique<LoopControlStmt>(
          tag == "break" ? StmtKind::break_ : StmtKind::continue_, pos);
    }
    if (tag == "generation") {  // transformers' AssistantTracker: renders its body as is
      advance();
      auto s = std::make_unique<ScopeStmt>(pos);
      s->body = parse_statements({"endgeneration"}, "generation", pos);
      advance();
      return s;
    }
    if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" ||
        tag == "from" || tag == "autoescape")
      fail_at(pos, "the '" + tag + "' tag is not supported in chat templates",
              ErrorKind::unsupported);
    fail_at(pos, "unknown tag '" + tag + "'");
  }

  StmtPtr parse_if() {
    auto node = std::make_unique<IfStmt>(cur().pos);
    const uint32_t opened = cur().pos;
    advance();
    while (true) {
      ExprPtr test = parse_tuple(false, false, {});
      Body body = parse_statements({"elif", "else", "endif"}, "if", opened);
      node->branches.emplace_back(std::move(test), std::move(body));
      const std::string which = cur().text;
      advance();
      if (which == "elif") continue;
      if (which == "else") {
        node->otherwise = parse_statements({"endif"}, "if", opened);
        advance();
      }
      break;
    }
    return node;
  }

  StmtPtr parse_for() {
    auto node = std::make_unique<ForStmt>(cur().pos);
    const uint32_t opened = cur().pos;
    advance();
    node->target = parse_assign_target(true, false, {"in"});
    if (!skip_name("in")) fail_here("expected 'in', got " + describe(cur()));
    node->iter = parse_tuple(false, false, {"recursive"});
    if (skip_name("if")) node->filter = parse_expression(true);
    if (is_name("recursive"))
      fail_at(cur().pos, "recursive for loops are not supported", ErrorKind::unsupported);
    ++loop_depth_;
    node->body = parse_statements({"endfor", "else"}, "for", opened);
    --loop_depth_;
    const bool has_else = cur().text == "else";
    advance();
    if (has_else) {
      node->otherwise = parse_statements({"endfor"}, "for", opened);
      advance();
    }
    std::vector<std::string> used;
    collect_body(node->body, used);
    collect_names(node->filter.get(), used);
    node->uses_loop = names(used, "loop");
    return node;
  }

  StmtPtr parse_set() {
    const uint32_t pos = cur().pos;
    advance();
    Target target = parse_assign_target(true, true, {});
    if (skip_op("=")) {
      auto node = std::make_unique<SetStmt>(pos);
      node->target = std::move(target);
      node->value = parse_tuple(false, true, {});
      return node;
    }
    auto node = std::make_unique<SetBlockStmt>(pos);
    node->target = std::move(target);
    node->filters = parse_filter_chain(false);
    node->body = parse_statements({"endset"}, "set", pos);
    advance();
    return node;
  }

  void parse_signature(MacroStmt& m) {
    expect_op("(");
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      if (is_op(")")) break;
      m.params.push_back(expect_name());
      if (skip_op("=")) {
        m.defaults.push_back(parse_expression(true));
      } else if (!m.defaults.empty()) {
        fail_here("non-default argument follows default argument");
      }
    }
    expect_op(")");
  }

  static void scan_macro(MacroStmt& m) {
    std::vector<std::string> used;
    collect_body(m.body, used);
    for (const auto& d : m.defaults) collect_names(d.get(), used);
    m.uses_varargs = names(used, "varargs");
    m.uses_kwargs = names(used, "kwargs");
    m.uses_caller = names(used, "caller");
  }

  StmtPtr parse_macro() {
    auto node = std::make_unique<MacroStmt>(cur().pos);
    const uint32_t opened = cur().pos;
    advance();
    node->name = expect_name();
    parse_signature(*node);
    const int saved = loop_depth_;
    loop_depth_ = 0;  // a loop around the macro's definition does not enclose its body
    node->body = parse_statements({"endmacro"}, "macro", opened);
    loop_depth_ = saved;
    advance();
    scan_macro(*node);
    return node;
  }

  StmtPtr parse_call_block() {
    auto node = std::make_unique<CallBlockStmt>(cur().pos);
    const uint32_t opened = cur().pos;
    advance();
    node->caller = std::make_unique<MacroStmt>(opened);
    node->caller->name = "caller";
    if (is_op("(")) parse_signature(*node->caller);
    ExprPtr call = parse_expression(true);
    if (call->kind != ExprKind::call) fail_at(call->pos, "expected a call after 'call'");
    node->call.reset(static_cast<CallExpr*>(call.release()));
    const int saved = loop_depth_;
    loop_depth_ = 0;
    node->caller->body = parse_statements({"endcall"}, "call", opened);
    loop_depth_ = saved;
    advance();
    scan_macro(*node->caller);
    return node;
  }

  StmtPtr parse_filter_block() {
    auto node = std::make_unique<FilterBlockStmt>(cur().pos);
    const uint32_t opened = cur().pos;
    advance();
    node->filters = parse_filter_chain(true);
    node->body = parse_statements({"endfilter"}, "filter", opened);
    advance();
    return node;
  }

  StmtPtr parse_with() {
    auto node = std::make_unique<WithStmt>(cur().pos);
    const uint32_t opened = cur().pos;
    advance();
    while (cur().type != Tok::block_end) {
      if (!node->assignments.empty()) expect_op(",");
      Target t = parse_assign_target(true, false, {});
      expect_op("=");
      node->assignments.emplace_back(std::move(t), parse_expression(true));
    }
    node->body = parse_statements({"endwith"}, "with", opened);
    advance();
    return node;
  }

  // `| f(args) | g`: for {% filter %} (first filter without the pipe) and {% set x | f %}.
  std::vector<std::unique_ptr<FilterExpr>> parse_filter_chain(bool start_inline) {
    std::vector<std::unique_ptr<FilterExpr>> chain;
    while (start_inline || is_op("|")) {
      if (!start_inline) advance();
      start_inline = false;
      chain.push_back(parse_filter_call(nullptr));
    }
    return chain;
  }

  Target parse_assign_target(bool with_tuple, bool with_namespace,
                             std::initializer_list<const char*> extra_end) {
    Target t;
    t.pos = cur().pos;
    if (with_namespace && cur().type == Tok::name && peek().type == Tok::op && peek().text == ".") {
      t.kind = Target::Kind::ns_attr;
      t.name = expect_name();
      advance();  // the dot
      t.attr = expect_name();
      return t;
    }
    if (!with_tuple) {
      t.name = expect_name();
      return t;
    }
    // A tuple of names ("a, b" or "(a, b)"), as jinja2's simplified tuple parsing allows.
    std::vector<Target> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end) || (with_namespace && is_op("=")) || is_op("|")) break;
      items.push_back(parse_target_primary());
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (items.empty()) fail_here("expected an assignment target, got " + describe(cur()));
    if (!is_tuple) return std::move(items[0]);
    t.kind = Target::Kind::tuple;
    t.items = std::move(items);
    return t;
  }

  Target parse_target_primary() {
    Target t;
    t.pos = cur().pos;
    if (skip_op("(")) {
      DepthGuard guard(*this);
      t.kind = Target::Kind::tuple;
      while (!is_op(")")) {
        if (!t.items.empty()) expect_op(",");
        if (is_op(")")) break;
        t.items.push_back(parse_target_primary());
      }
      expect_op(")");
      return t;
    }
    if (cur().type != Tok::name || is_reserved(cur().text))
      fail_here("can't assign to " + describe(cur()));
    t.name = expect_name();
    return t;
  }

  static bool is_reserved(const std::string& n) {
    return n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None";
  }

  bool is_tuple_end(std::initializer_list<const char*> extra_end) const {
    if (cur().type == Tok::var_end || cur().type == Tok::block_end || cur().type == Tok::eof)
      return true;
    if (is_op(")")) return true;
    for (const char* e : extra_end)
      if (is_name(e)) return true;
    return false;
  }

  // ---------------------------------------------------------------------------- expressions
  ExprPtr parse_tuple(bool explicit_parens, bool with_condexpr,
                      std::initializer_list<const char*> extra_end) {
    const uint32_t pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_here("expected an expression, got " + describe(cur()));
    }
    auto t = std::make_unique<ListExpr>(pos, true);
    t->items = std::move(items);
    return std::move(finish(t));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      auto c = std::make_unique<CondExpr>(cur().pos);
      advance();
      c->then = std::move(expr);
      c->test = parse_or();
      if (skip_name("else")) {
        DepthGuard guard(*this);
        c->otherwise = parse_condexpr();
      }
      finish(c);
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const uint32_t pos = cur().pos;
      advance();
      left = std::make_unique<BinaryExpr>(ExprKind::or_, pos, BinOp::add, std::move(left),
                                          parse_and());
      finish(left);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const uint32_t pos = cur().pos;
      advance();
      left = std::make_unique<BinaryExpr>(ExprKind::and_, pos, BinOp::add, std::move(left),
                                          parse_not());
      finish(left);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const uint32_t pos = cur().pos;
      advance();
      DepthGuard guard(*this);
      ExprPtr node = std::make_unique<UnaryExpr>(ExprKind::not_, pos, parse_not());
      return std::move(finish(node));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const uint32_t pos = cur().pos;
    ExprPtr expr = parse_math1();
    std::unique_ptr<CompareExpr> cmp;
    while (true) {
      CmpOp op;
      if (is_op("=="))
        op = CmpOp::eq;
      else if (is_op("!="))
        op = CmpOp::ne;
      else if (is_op("<"))
        op = CmpOp::lt;
      else if (is_op("<="))
        op = CmpOp::le;
      else if (is_op(">"))
        op = CmpOp::gt;
      else if (is_op(">="))
        op = CmpOp::ge;
      else if (is_name("in"))
        op = CmpOp::in;
      else if (is_name("not") && peek().type == Tok::name && peek().text == "in") {
        advance();
        op = CmpOp::not_in;
      } else {
        break;
      }
      advance();
      if (!cmp) cmp = std::make_unique<CompareExpr>(pos, std::move(expr));
      cmp->rest.emplace_back(op, parse_math1());
      finish(cmp);
    }
    if (cmp) return cmp;
    return expr;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const BinOp op = is_op("+") ? BinOp::add : BinOp::sub;
      const uint32_t pos = cur().pos;
      advance();
      left =
          std::make_unique<BinaryExpr>(ExprKind::binary, pos, op, std::move(left), parse_concat());
      finish(left);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const uint32_t pos = cur().pos;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto c = std::make_unique<ConcatExpr>(pos);
    c->parts.push_back(std::move(first));
    while (skip_op("~")) {
      c->parts.push_back(parse_math2());
      finish(c);
    }
    return c;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const BinOp op = is_op("*")    ? BinOp::mul
                       : is_op("/")  ? BinOp::div
                       : is_op("//") ? BinOp::floordiv
                                     : BinOp::mod;
      const uint32_t pos = cur().pos;
      advance();
      left = std::make_unique<BinaryExpr>(ExprKind::binary, pos, op, std::move(left), parse_pow());
      finish(left);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const uint32_t pos = cur().pos;
      advance();
      left = std::make_unique<BinaryExpr>(ExprKind::binary, pos, BinOp::pow, std::move(left),
                                          parse_unary(true));
      finish(left);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    const uint32_t pos = cur().pos;
    if (skip_op("-")) {
      node = std::make_unique<UnaryExpr>(ExprKind::neg, pos, parse_unary(false));
      finish(node);
    } else if (skip_op("+")) {
      node = std::make_unique<UnaryExpr>(ExprKind::pos, pos, parse_unary(false));
      finish(node);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const uint32_t pos = t.pos;
    switch (t.type) {
      case Tok::name: {
        ExprPtr node;
        if (t.text == "true" || t.text == "True")
          node = std::make_unique<LiteralExpr>(pos, Value::boolean(true));
        else if (t.text == "false" || t.text == "False")
          node = std::make_unique<LiteralExpr>(pos, Value::boolean(false));
        else if (t.text == "none" || t.text == "None")
          node = std::make_unique<LiteralExpr>(pos, Value::none());
        else
          node = std::make_unique<NameExpr>(pos, t.text);
        advance();
        return node;
      }
      case Tok::string: {
        std::string s;
        while (cur().type == Tok::string) {  // adjacent literals join, as in Python
          s += cur().text;
          advance();
        }
        return std::make_unique<LiteralExpr>(pos, Value::string(std::move(s)));
      }
      case Tok::integer: {
        auto node = std::make_unique<LiteralExpr>(pos, Value::integer(t.number));
        advance();
        return node;
      }
      case Tok::floating: {
        auto node = std::make_unique<LiteralExpr>(pos, Value::floating(t.real));
        advance();
        return node;
      }
      case Tok::op:
        if (t.text == "(") {
          advance();
          ExprPtr e = parse_tuple(true, true, {});
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail_here("unexpected " + describe(t));
  }

  ExprPtr parse_list() {
    auto node = std::make_unique<ListExpr>(cur().pos, false);
    expect_op("[");
    while (!is_op("]")) {
      if (!node->items.empty()) expect_op(",");
      if (is_op("]")) break;
      node->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return std::move(finish(node));
  }

  ExprPtr parse_dict() {
    auto node = std::make_unique<DictExpr>(cur().pos);
    expect_op("{");
    while (!is_op("}")) {
      if (!node->items.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      node->items.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return std::move(finish(node));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
      finish(node);
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        advance();
        node = parse_filter_call(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
      finish(node);
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const uint32_t pos = cur().pos;
    if (skip_op(".")) {
      if (cur().type == Tok::name) {
        std::string name = cur().text;
        advance();
        return std::make_unique<GetAttrExpr>(pos, std::move(node), std::move(name));
      }
      if (cur().type != Tok::integer) fail_here("expected a name or number after '.'");
      auto key = std::make_unique<LiteralExpr>(cur().pos, Value::integer(cur().number));
      advance();
      return std::make_unique<GetItemExpr>(pos, std::move(node), std::move(key));
    }
    expect_op("[");
    DepthGuard guard(*this);
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed(node, pos));
      if (args.back()->kind == ExprKind::slice) {
        // The slice took the object; a slice cannot be part of a tuple key here.
        expect_op("]");
        return std::move(args.back());
      }
    }
    expect_op("]");
    if (args.empty()) fail_at(pos, "expected a subscript expression");
    ExprPtr key;
    if (args.size() == 1) {
      key = std::move(args[0]);
    } else {
      auto t = std::make_unique<ListExpr>(pos, true);
      t->items = std::move(args);
      key = std::move(t);
    }
    return std::make_unique<GetItemExpr>(pos, std::move(node), std::move(key));
  }

  // One item between [ ]: an expression, or a slice (which then owns `obj`).
  ExprPtr parse_subscribed(ExprPtr& obj, uint32_t pos) {
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    advance();  // the first colon
    auto s = std::make_unique<SliceExpr>(pos);
    s->start = std::move(start);
    if (!is_op("]") && !is_op(",") && !is_op(":")) s->stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) s->step = parse_expression(true);
    }
    s->obj = std::move(obj);
    return std::move(finish(s));
  }

  Args parse_call_args() {
    Args a;
    const uint32_t pos = cur().pos;
    expect_op("(");
    bool need_comma = false;
    while (!is_op(")")) {
      if (need_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (skip_op("*")) {
        if (a.star || a.star_star) fail_at(pos, "invalid syntax for function call expression");
        a.star = parse_expression(true);
      } else if (skip_op("**")) {
        if (a.star_star) fail_at(pos, "invalid syntax for function call expression");
        a.star_star = parse_expression(true);
      } else if (cur().type == Tok::name && peek().type == Tok::op && peek().text == "=") {
        if (a.star_star) fail_at(pos, "invalid syntax for function call expression");
        std::string key = cur().text;
        advance();
        advance();
        a.keywords.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (a.star || a.star_star || !a.keywords.empty())
          fail_at(
              pos,
              "invalid syntax for function call expression (positional argument after a keyword)");
        a.positional.push_back(parse_expression(true));
      }
      need_comma = true;
    }
    expect_op(")");
    return a;
  }

  ExprPtr parse_call(ExprPtr callee) {
    const uint32_t pos = callee->pos;  // errors point at what is called, not at '('
    auto call = std::make_unique<CallExpr>(pos, std::move(callee));
    DepthGuard guard(*this);
    call->args = parse_call_args();
    return call;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      advance();
      name += "." + expect_name();
    }
    return name;
  }

  std::unique_ptr<FilterExpr> parse_filter_call(ExprPtr input) {
    const uint32_t pos = cur().pos;
    const std::string name = dotted_name();
    FilterFn fn = find_filter(name);
    if (!fn) {
      if (jinja2_has_filter(name))
        fail_at(pos, "the filter '" + name + "' is not supported", ErrorKind::unsupported);
      fail_at(pos, "no filter named '" + name + "'");
    }
    auto f = std::make_unique<FilterExpr>(pos, std::move(input), name, fn);
    if (is_op("(")) {
      DepthGuard guard(*this);
      f->args = parse_call_args();
    }
    return std::move(finish(f));
  }

  ExprPtr parse_test(ExprPtr input) {
    const uint32_t pos = cur().pos;
    advance();  // 'is'
    const bool negated = skip_name("not");
    const uint32_t name_pos = cur().pos;
    const std::string name = dotted_name();
    TestFn fn = find_test(name);
    if (!fn) {
      if (jinja2_has_test(name))
        fail_at(name_pos, "the test '" + name + "' is not supported", ErrorKind::unsupported);
      fail_at(name_pos, "no test named '" + name + "'");
    }
    auto t = std::make_unique<TestExpr>(pos, std::move(input), name, fn);
    if (is_op("(")) {
      DepthGuard guard(*this);
      t->args = parse_call_args();
    } else if ((cur().type == Tok::name || cur().type == Tok::string ||
                cur().type == Tok::integer || cur().type == Tok::floating || is_op("[") ||
                is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_here("you cannot chain multiple tests with 'is'");
      // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
      DepthGuard guard(*this);
      ExprPtr arg = parse_postfix(parse_primary());
      t->args.positional.push_back(std::move(arg));
    }
    finish(t);
    if (negated) {
      ExprPtr node = std::make_unique<UnaryExpr>(ExprKind::not_, pos, std::move(t));
      return std::move(finish(node));
    }
    return t;
  }

  std::vector<Token> tokens_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse(const std::string& normalized_source) { return Parser(normalized_source).run(); }

}  // namespace braid::chat::jinja
