// Parser: tokens -> syntax tree, with jinja2's operator precedence (low to high):
// `x if c else y`, or, and, not, comparisons/in, + -, ~, * / // %, **, unary - +,
// then postfix (.attr, [item], (call)) and filters/tests.
#include <cstdlib>
#include <initializer_list>

#include "tokenizer/jinja/ast.h"

namespace basalt::tok::jinja {
namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& toks) : t_(toks) {}

  Body parse_all() {
    Body body = parse_body({});
    if (peek().kind != Tok::End) error("unexpected '" + peek().text + "'");
    return body;
  }

 private:
  const std::vector<Token>& t_;
  size_t i_ = 0;

  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(i_++, t_.size() - 1)]; }
  [[noreturn]] void error(const std::string& msg) const { throw TemplateError(msg, peek().line); }

  bool is_op(const char* op, size_t k = 0) const {
    return peek(k).kind == Tok::Op && peek(k).text == op;
  }
  bool is_name(const char* name, size_t k = 0) const {
    return peek(k).kind == Tok::Name && peek(k).text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    ++i_;
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::End:
        return "end of template";
      case Tok::BlockEnd:
        return "'%}'";
      case Tok::OutputEnd:
        return "'}}'";
      case Tok::Text:
        return "template text";
      default:
        return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(std::string("expected '") + op + "', got " + describe(peek()));
  }
  std::string expect_name() {
    if (peek().kind != Tok::Name) error("expected a name, got " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != Tok::BlockEnd) error("expected '%}', got " + describe(peek()));
    ++i_;
  }

  // Statements up to one of `ends` ({% end... %} or {% else %} ...); leaves i_ at that name.
  Body parse_body(std::initializer_list<const char*> ends) {
    Body body;
    while (true) {
      const Token& tk = peek();
      if (tk.kind == Tok::End) {
        if (ends.size() == 0) return body;
        error(std::string("unexpected end of template, expected '") + *(ends.end() - 1) + "'");
      }
      if (tk.kind == Tok::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Text;
        s->line = tk.line;
        s->text = tk.text;
        body.push_back(std::move(s));
        ++i_;
      } else if (tk.kind == Tok::OutputBegin) {
        ++i_;
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Output;
        s->line = tk.line;
        s->expr = parse_tuple_or_expr();
        if (peek().kind != Tok::OutputEnd) error("expected '}}', got " + describe(peek()));
        ++i_;
        body.push_back(std::move(s));
      } else if (tk.kind == Tok::BlockBegin) {
        const Token& kw = peek(1);
        if (kw.kind != Tok::Name) {
          ++i_;
          error("expected a statement name, got " + describe(kw));
        }
        for (const char* e : ends)
          if (kw.text == e) {
            ++i_;  // leave i_ at the name
            return body;
          }
        ++i_;
        body.push_back(parse_statement());
      } else {
        error("unexpected " + describe(tk));
      }
    }
  }

  StmtPtr make_stmt(StmtKind k, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = line;
    return s;
  }

  StmtPtr parse_statement() {
    const Token& kw = next();
    int line = kw.line;
    const std::string& w = kw.text;
    if (w == "if") return parse_if(line);
    if (w == "for") return parse_for(line);
    if (w == "set") return parse_set(line);
    if (w == "macro") return parse_macro(line);
    if (w == "call") return parse_call_block(line);
    if (w == "filter") {
      auto s = make_stmt(StmtKind::FilterBlock, line);
      s->cond = parse_filter_chain(nullptr);
      expect_block_end();
      s->body = parse_body({"endfilter"});
      next();
      expect_block_end();
      return s;
    }
    if (w == "generation") {  // transformers' assistant-mask extension: renders its body
      expect_block_end();
      auto s = make_stmt(StmtKind::If, line);
      auto t = std::make_unique<Expr>();
      t->kind = ExprKind::Literal;
      t->value = Value(true);
      s->conds.push_back(std::move(t));
      s->bodies.push_back(parse_body({"endgeneration"}));
      next();
      expect_block_end();
      return s;
    }
    if (w == "break" || w == "continue") {
      expect_block_end();
      return make_stmt(w == "break" ? StmtKind::Break : StmtKind::Continue, line);
    }
    --i_;
    error("unknown statement '" + w + "'");
  }

  StmtPtr parse_if(int line) {
    auto s = make_stmt(StmtKind::If, line);
    s->conds.push_back(parse_expr());
    expect_block_end();
    while (true) {
      s->bodies.push_back(parse_body({"elif", "else", "endif"}));
      std::string w = next().text;
      if (w == "elif") {
        s->conds.push_back(parse_expr());
        expect_block_end();
      } else if (w == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"});
        next();
        expect_block_end();
        return s;
      } else {
        expect_block_end();
        return s;
      }
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = skip_op("(");
    do {
      names.push_back(expect_name());
    } while (skip_op(","));
    if (paren) expect_op(")");
    return names;
  }

  StmtPtr parse_for(int line) {
    auto s = make_stmt(StmtKind::For, line);
    s->targets = parse_targets();
    if (!skip_name("in")) error("expected 'in' in for loop, got " + describe(peek()));
    s->expr = parse_expr(/*with_condexpr=*/false);
    if (skip_name("if")) s->cond = parse_expr();
    if (skip_name("recursive")) error("recursive for loops are not supported");
    expect_block_end();
    s->body = parse_body({"else", "endfor"});
    if (next().text == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"});
      next();
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(int line) {
    // set ns.attr = v | set a, b = v | set a = v | set a %}...{% endset
    if (peek().kind == Tok::Name && is_op(".", 1)) {
      auto s = make_stmt(StmtKind::Set, line);
      s->targets.push_back(next().text);
      ++i_;
      s->text = expect_name();
      expect_op("=");
      s->expr = parse_tuple_or_expr();
      expect_block_end();
      return s;
    }
    std::vector<std::string> targets = parse_targets();
    if (skip_op("=")) {
      auto s = make_stmt(StmtKind::Set, line);
      s->targets = std::move(targets);
      s->expr = parse_tuple_or_expr();
      expect_block_end();
      return s;
    }
    if (targets.size() != 1) error("expected '=' in set");
    auto s = make_stmt(StmtKind::SetBlock, line);
    s->targets = std::move(targets);
    if (is_op("|")) s->cond = parse_filter_chain(nullptr);
    expect_block_end();
    s->body = parse_body({"endset"});
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro(int line) {
    auto s = make_stmt(StmtKind::Macro, line);
    s->text = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      std::string p = expect_name();
      ExprPtr def;
      if (skip_op("=")) def = parse_expr();
      s->params.emplace_back(std::move(p), std::move(def));
      if (!skip_op(",")) break;
    }
    expect_op(")");
    expect_block_end();
    s->body = parse_body({"endmacro"});
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(int line) {
    auto s = make_stmt(StmtKind::CallBlock, line);
    if (is_op("(")) error("call blocks with caller arguments are not supported");
    s->expr = parse_expr();
    if (s->expr->kind != ExprKind::Call) error("expected a macro call after 'call'");
    expect_block_end();
    s->body = parse_body({"endcall"});
    next();
    expect_block_end();
    return s;
  }

  ExprPtr make(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // `a, b` at the top of {{ }} / set makes a tuple.
  ExprPtr parse_tuple_or_expr() {
    int line = peek().line;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = make(ExprKind::Tuple, line);
    t->items.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().kind == Tok::BlockEnd || peek().kind == Tok::OutputEnd) break;
      t->items.push_back(parse_expr());
    }
    return t;
  }

  ExprPtr parse_expr(bool with_condexpr = true) {
    ExprPtr e = parse_or();
    if (!with_condexpr) return e;
    while (is_name("if")) {
      int line = next().line;
      auto c = make(ExprKind::CondExpr, line);
      c->a = parse_or();  // condition
      c->b = std::move(e);
      if (skip_name("else")) c->c = parse_expr();
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto e = make(ExprKind::Binary, line);
    e->name = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int line = next().line;
      e = binary("or", std::move(e), parse_and(), line);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int line = next().line;
      e = binary("and", std::move(e), parse_not(), line);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      int line = next().line;
      auto e = make(ExprKind::Unary, line);
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    int line = peek().line;
    ExprPtr e = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (peek().kind == Tok::Op &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
           peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        i_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::Compare, line);
        cmp->a = std::move(e);
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      e = binary(op.text, std::move(e), parse_concat(), op.line);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      int line = next().line;
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      e = binary(op.text, std::move(e), parse_pow(), op.line);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      int line = next().line;
      e = binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& op = next();
      e = make(ExprKind::Unary, op.line);
      e->name = op.text;
      e->a = parse_unary(false);
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filters_and_tests(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tk = peek();
    int line = tk.line;
    if (tk.kind == Tok::Name) {
      ++i_;
      auto lit = [&](Value v) {
        auto e = make(ExprKind::Literal, line);
        e->value = std::move(v);
        return e;
      };
      if (tk.text == "true" || tk.text == "True") return lit(Value(true));
      if (tk.text == "false" || tk.text == "False") return lit(Value(false));
      if (tk.text == "none" || tk.text == "None") return lit(Value(None{}));
      auto e = make(ExprKind::Name, line);
      e->name = tk.text;
      return e;
    }
    if (tk.kind == Tok::String) {
      std::string s;
      while (peek().kind == Tok::String) s += next().text;  // "a" "b" concatenates
      auto e = make(ExprKind::Literal, line);
      e->value = Value(std::move(s));
      return e;
    }
    if (tk.kind == Tok::Int || tk.kind == Tok::Float) {
      ++i_;
      auto e = make(ExprKind::Literal, line);
      if (tk.kind == Tok::Int)
        e->value = Value(static_cast<int64_t>(std::strtoll(tk.text.c_str(), nullptr, 10)));
      else
        e->value = Value(std::strtod(tk.text.c_str(), nullptr));
      return e;
    }
    if (skip_op("(")) {
      if (skip_op(")")) return make(ExprKind::Tuple, line);
      ExprPtr first = parse_expr();
      if (skip_op(")")) return first;
      auto t = make(ExprKind::Tuple, line);
      t->items.push_back(std::move(first));
      while (skip_op(",")) {
        if (is_op(")")) break;
        t->items.push_back(parse_expr());
      }
      expect_op(")");
      return t;
    }
    if (skip_op("[")) {
      auto l = make(ExprKind::List, line);
      while (!is_op("]")) {
        l->items.push_back(parse_expr());
        if (!skip_op(",")) break;
      }
      expect_op("]");
      return l;
    }
    if (skip_op("{")) {
      auto d = make(ExprKind::Dict, line);
      while (!is_op("}")) {
        d->items.push_back(parse_expr());
        expect_op(":");
        d->items2.push_back(parse_expr());
        if (!skip_op(",")) break;
      }
      expect_op("}");
      return d;
    }
    error("unexpected " + describe(tk));
  }

  void parse_call_args(Expr& call) {
    // after '(': positional and keyword arguments
    while (!is_op(")")) {
      if (peek().kind == Tok::Name && is_op("=", 1)) {
        std::string k = next().text;
        ++i_;
        call.kwargs.emplace_back(std::move(k), parse_expr());
      } else {
        call.items.push_back(parse_expr());
      }
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      int line = peek().line;
      if (skip_op(".")) {
        auto g = make(ExprKind::GetAttr, line);
        if (peek().kind == Tok::Int) {  // foo.0 is foo[0]
          g->kind = ExprKind::GetItem;
          auto idx = make(ExprKind::Literal, line);
          idx->value = Value(static_cast<int64_t>(std::strtoll(next().text.c_str(), nullptr, 10)));
          g->b = std::move(idx);
        } else {
          g->name = expect_name();
        }
        g->a = std::move(e);
        e = std::move(g);
      } else if (skip_op("[")) {
        e = parse_subscript(std::move(e), line);
      } else if (skip_op("(")) {
        auto c = make(ExprKind::Call, line);
        c->a = std::move(e);
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, int line) {
    ExprPtr parts[3];
    int n = 0;
    bool is_slice = false;
    while (true) {
      if (!is_op(":") && !is_op("]")) parts[n] = parse_expr();
      if (skip_op(":")) {
        is_slice = true;
        if (++n > 2) error("too many ':' in slice");
        continue;
      }
      break;
    }
    expect_op("]");
    if (!is_slice) {
      if (!parts[0]) error("empty subscript");
      auto g = make(ExprKind::GetItem, line);
      g->a = std::move(obj);
      g->b = std::move(parts[0]);
      return g;
    }
    auto s = make(ExprKind::Slice, line);
    s->a = std::move(obj);
    for (auto& p : parts) s->items.push_back(std::move(p));
    return s;
  }

  // `| name(args)` and `is [not] name args`, left to right.
  ExprPtr parse_filters_and_tests(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e), /*one=*/true);
      } else if (is_name("is")) {
        int line = next().line;
        auto t = make(ExprKind::Test, line);
        t->negated = skip_name("not");
        t->name = expect_name();
        if (skip_op("(")) {
          parse_call_args(*t);
        } else if ((peek().kind == Tok::Name || peek().kind == Tok::String ||
                    peek().kind == Tok::Int || peek().kind == Tok::Float || is_op("[") ||
                    is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("in") &&
                   !is_name("if") && !is_name("is")) {
          // `is divisibleby 3`, `is sameas none`: one argument without parentheses
          t->items.push_back(parse_postfix(parse_primary()));
        }
        t->a = std::move(e);
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  // One filter (one=true) or a chain `| f | g(x)`; `e` may be null for filter blocks.
  ExprPtr parse_filter_chain(ExprPtr e, bool one = false) {
    skip_op("|");  // optional before the first filter of a filter block
    while (true) {
      int line = peek().line;
      auto f = make(ExprKind::Filter, line);
      f->name = expect_name();
      if (skip_op("(")) parse_call_args(*f);
      f->a = std::move(e);
      e = std::move(f);
      if (one || !skip_op("|")) return e;
    }
  }
};

}  // namespace

Body parse(const std::vector<Token>& tokens) {
  return Parser(tokens).parse_all();
}

}  // namespace basalt::tok::jinja
