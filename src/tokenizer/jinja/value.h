// Values of the Jinja engine: what a chat template computes with. They follow Python's
// semantics where templates can tell (str() of a dict, `1 == 1.0`, integer division), because
// the reference renderer is jinja2 inside transformers.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>
#include "tokenizer/unicode.h"  // utf8_append

namespace basalt::tok::jinja {

// An error while parsing or rendering; `line` is filled in by the innermost node that knows
// it. `raised` marks raise_exception() from the template itself.
struct TemplateError : std::runtime_error {
  explicit TemplateError(const std::string& msg, int line_ = 0, bool raised_ = false)
      : std::runtime_error(msg), line(line_), raised(raised_) {}
  int line;
  bool raised;
};

struct Value;
struct ListObj;
struct DictObj;
struct CallArgs;
class Evaluator;

using ListPtr = std::shared_ptr<ListObj>;
using DictPtr = std::shared_ptr<DictObj>;

// jinja2's default Undefined: prints as "", is false, iterates as empty; most other uses fail
// with `hint` ("'dict object' has no attribute 'content'").
struct Undefined {
  std::string hint;
};
struct None {};
// namespace(): the one mutable object templates can make (`{% set ns.x = 1 %}`).
struct Namespace {
  DictPtr attrs;
};
// A global function, a macro, or a bound method ("abc".upper).
struct Function {
  std::string name;
  std::function<Value(Evaluator&, CallArgs&)> call;
};
using FunctionPtr = std::shared_ptr<const Function>;

struct Value {
  std::variant<Undefined, None, bool, int64_t, double, std::string, ListPtr, DictPtr, Namespace,
               FunctionPtr>
      v;

  Value() : v(Undefined{}) {}
  Value(None n) : v(n) {}
  Value(bool b) : v(b) {}
  Value(int64_t i) : v(i) {}
  Value(int i) : v(int64_t{i}) {}
  Value(double d) : v(d) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(const char* s) : v(std::string(s)) {}
  Value(ListPtr l) : v(std::move(l)) {}
  Value(DictPtr d) : v(std::move(d)) {}
  Value(Namespace n) : v(std::move(n)) {}
  Value(FunctionPtr f) : v(std::move(f)) {}
  static Value undefined(std::string hint = {}) {
    Value r;
    r.v = Undefined{std::move(hint)};
    return r;
  }

  bool is_undefined() const { return std::holds_alternative<Undefined>(v); }
  bool is_none() const { return std::holds_alternative<None>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }
  bool is_float() const { return std::holds_alternative<double>(v); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_list() const { return std::holds_alternative<ListPtr>(v); }
  bool is_dict() const { return std::holds_alternative<DictPtr>(v); }
  bool is_namespace() const { return std::holds_alternative<Namespace>(v); }
  bool is_function() const { return std::holds_alternative<FunctionPtr>(v); }

  bool as_bool() const { return std::get<bool>(v); }
  int64_t as_int() const;    // int or bool
  double as_double() const;  // int, float or bool
  const std::string& str() const { return std::get<std::string>(v); }
  const ListObj& list() const { return *std::get<ListPtr>(v); }
  const DictObj& dict() const { return *std::get<DictPtr>(v); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v).hint; }
};

struct ListObj {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b); items() yields these
};

// Insertion-ordered, string keys (JSON objects and Jinja dict literals): tojson of a tool
// schema must keep the caller's key order.
struct DictObj {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value value);
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument at position i or named `name`; nullptr when absent.
  const Value* get(size_t i, std::string_view name) const;
};

Value make_list(std::vector<Value> items, bool tuple = false);
Value make_dict(std::vector<std::pair<std::string, Value>> items = {});
Value make_function(std::string name, std::function<Value(Evaluator&, CallArgs&)> fn);

// "dict", "list", "str", "int", ... (Python's type names, used in messages).
std::string type_name(const Value& v);
// Python truthiness; Undefined is false.
bool truthy(const Value& v);
// Python str(v): None -> "None", True -> "True", 1.0 -> "1.0", dict -> "{'a': 1}".
std::string to_str(const Value& v);
// Python repr(v): strings quoted the way Python does.
std::string repr(const Value& v);
std::string float_repr(double d);
// json.dumps(v, ensure_ascii=False, indent=indent (<0: none), separators, sort_keys), which is
// what transformers registers as the `tojson` filter. Undefined and functions are errors.
std::string to_json(const Value& v, int indent, std::string_view item_sep, std::string_view key_sep,
                    bool sort_keys);
// Python ==; int, float and bool compare by value.
bool equals(const Value& a, const Value& b);
// Python <: numbers with numbers, strings with strings (by code point), lists element-wise.
// Throws TemplateError for other pairs.
int compare(const Value& a, const Value& b);

// UTF-8 helpers for Python's code-point indexing of str.
std::vector<uint32_t> utf8_decode(std::string_view s);
std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end);


}  // namespace basalt::tok::jinja
