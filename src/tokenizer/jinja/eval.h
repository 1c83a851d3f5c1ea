// Evaluator: renders a syntax tree against a dict of variables. The builtins it calls
// (filters, tests, methods of str/dict/list, global functions) live in builtins.cpp.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja/ast.h"

namespace basalt::tok::jinja {

class Evaluator {
 public:
  explicit Evaluator(const DictObj& vars) : vars_(vars) {}

  void render(const Body& body, std::string& out);

  Value eval(const Expr& e);
  Value call(const Value& fn, CallArgs& args);
  // jinja2's environment.getattr / getitem: a dict's keys are its attributes too.
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  // "a.b.0" as used by map(attribute=...), sort(attribute=...).
  Value get_path(const Value& obj, const std::string& path);
  Value lookup(const std::string& name) const;

  Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
  bool apply_test(const std::string& name, const Value& v, CallArgs& args);

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, std::string& out);
  Flow exec_stmt(const Stmt& s, std::string& out);
  void exec_for(const Stmt& s, std::string& out);
  void assign(const std::vector<std::string>& targets, const Value& v);
  Value eval_binary(const Expr& e);
  Value eval_compare(const Expr& e);
  Value call_macro(const Stmt& m, CallArgs& args, const Value& caller);

  const DictObj& vars_;
  std::vector<std::unordered_map<std::string, Value>> scopes_{1};
  int depth_ = 0;  // macro nesting, to stop runaway recursion
};

// Builtins (builtins.cpp).
Value builtin_global(const std::string& name);  // range, namespace, dict, ...; undefined if none
Value builtin_method(const Value& obj, const std::string& name);  // "abc".upper; undefined if none
bool builtin_has_filter(const std::string& name);
bool builtin_has_test(const std::string& name);
// Python's `a in b` (b a str, list, dict).
bool contains(const Value& container, const Value& item);
// list(v): the items iterated by `for` (dict: keys, str: characters).
std::vector<Value> iterate(const Value& v);

// Python str methods shared by filters and methods. chars: null for whitespace.
std::string str_strip(const std::string& s, const Value* chars, bool left, bool right);
std::string str_lower(const std::string& s);
std::string str_upper(const std::string& s);
std::string str_capitalize(const std::string& s);
std::string str_replace(const std::string& s, const std::string& old, const std::string& with,
                        int64_t count);
// printf-style formatting: "%s-%d" % (a, b), the `format` filter.
std::string str_printf(const std::string& fmt, const std::vector<Value>& args);

}  // namespace basalt::tok::jinja
