// Tokens and syntax tree of the Jinja engine (lexer.cpp -> parser.cpp -> eval.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace basalt::tok::jinja {

enum class Tok {
  Text,         // raw template text (whitespace control already applied)
  OutputBegin,  // {{
  OutputEnd,    // }}
  BlockBegin,   // {%
  BlockEnd,     // %}
  Name,
  String,
  Int,
  Float,
  Op,  // operators and punctuation: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  End,
};

struct Token {
  Tok kind;
  std::string text;  // Text, Name, Op, String (unescaped), Int/Float (as written)
  int line;
};

// Whitespace options as transformers sets them (trim_blocks, lstrip_blocks); a trailing
// newline of the source is dropped like jinja2's keep_trailing_newline=False.
std::vector<Token> lex(const std::string& source, bool trim_blocks = true,
                       bool lstrip_blocks = true);

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  Literal,   // value
  Name,      // name
  List,      // items
  Tuple,     // items
  Dict,      // keys (items) + values (items2)
  GetAttr,   // a.name
  GetItem,   // a[b]
  Slice,     // a[b:c:d] (items: start, stop, step; null for omitted)
  Call,      // a(args, kwargs)
  Filter,    // a | name(args, kwargs); a null for a filter block's body
  Test,      // a is [not] name(args)
  Unary,     // op a: "not", "-", "+"
  Binary,    // a op b: + - * / // % ** ~ and or
  Compare,   // a op b op c ...: ops, items are the right operands
  CondExpr,  // b if a else c
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                  // Literal
  std::string name;             // Name, GetAttr attribute, Call/Filter/Test name, Unary/Binary op
  ExprPtr a, b, c;              // operands
  std::vector<ExprPtr> items;   // List/Tuple/Dict keys/Call args/Compare operands/Slice parts
  std::vector<ExprPtr> items2;  // Dict values
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call/Filter/Test
  std::vector<std::string> ops;                         // Compare operators
  bool negated = false;                                 // Test: `is not`
};

enum class StmtKind {
  Text,       // text
  Output,     // {{ expr }}
  If,         // conds[i] -> bodies[i]; else_body
  For,        // for targets in expr [if cond] ... [else ...]
  Set,        // set targets = expr | set ns.attr = expr
  SetBlock,   // set name %}body{% endset (optional filter)
  Macro,      // macro name(params) body
  CallBlock,  // call macro(...) body: `caller()` renders body
  FilterBlock,
  Break,
  Continue,
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                  // Text; Macro name; Set attribute (ns.attr)
  ExprPtr expr;                      // Output, For iterable, Set value, CallBlock call
  ExprPtr cond;                      // For filter; SetBlock / FilterBlock filter chain
  std::vector<ExprPtr> conds;        // If
  std::vector<Body> bodies;          // If branches
  Body body, else_body;              // For, SetBlock, Macro, CallBlock, FilterBlock
  std::vector<std::string> targets;  // For/Set names (several: tuple unpacking)
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro parameters and defaults
};

// Parses a token stream; throws TemplateError with the line of the offending token.
Body parse(const std::vector<Token>& tokens);

}  // namespace basalt::tok::jinja
