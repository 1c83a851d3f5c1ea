// Evaluator: statements, expressions, operators and scoping, following jinja2 (a `set` inside a
// for loop is local to that iteration; namespace() objects carry values out of loops).
#include "tokenizer/jinja/eval.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace basalt::tok::jinja {
namespace {

constexpr int kMaxMacroDepth = 64;

// Rethrows a TemplateError with the line of the node being evaluated, unless an inner node
// already set one.
template <typename Fn>
auto at_line(int line, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (TemplateError& e) {
    if (e.line == 0) e.line = line;
    throw;
  }
}

[[noreturn]] void undefined_error(const Value& v) {
  const std::string& hint = v.undefined_hint();
  throw TemplateError(hint.empty() ? "value is undefined" : hint);
}

std::string obj_name(const Value& v) {
  // jinja2's object_type_repr: "dict object", "list object", "'None'"
  if (v.is_none()) return "'None'";
  return std::string("'") + type_name(v) + " object'";
}

int64_t py_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

void Evaluator::render(const Body& body, std::string& out) {
  if (exec(body, out) != Flow::Normal) throw TemplateError("break or continue outside a loop");
}

Value Evaluator::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return f->second;
  }
  if (const Value* v = vars_.find(name)) return *v;
  Value g = builtin_global(name);
  if (!g.is_undefined()) return g;
  return Value::undefined(std::string("'") + name + "' is undefined");
}

Evaluator::Flow Evaluator::exec(const Body& body, std::string& out) {
  for (const auto& s : body) {
    Flow f = at_line(s->line, [&] { return exec_stmt(*s, out); });
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

void Evaluator::assign(const std::vector<std::string>& targets, const Value& v) {
  auto& scope = scopes_.back();
  if (targets.size() == 1) {
    scope[targets[0]] = v;
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() != targets.size())
    throw TemplateError("cannot unpack " + std::to_string(items.size()) + " values into " +
                        std::to_string(targets.size()) + " names");
  for (size_t i = 0; i < targets.size(); ++i) scope[targets[i]] = items[i];
}

Evaluator::Flow Evaluator::exec_stmt(const Stmt& s, std::string& out) {
  switch (s.kind) {
    case StmtKind::Text:
      out += s.text;
      return Flow::Normal;
    case StmtKind::Output:
      out += to_str(eval(*s.expr));
      return Flow::Normal;
    case StmtKind::If:
      for (size_t i = 0; i < s.conds.size(); ++i)
        if (truthy(eval(*s.conds[i]))) return exec(s.bodies[i], out);
      return exec(s.else_body, out);
    case StmtKind::For:
      exec_for(s, out);
      return Flow::Normal;
    case StmtKind::Set: {
      Value v = eval(*s.expr);
      if (s.text.empty()) {
        assign(s.targets, v);
        return Flow::Normal;
      }
      Value ns = lookup(s.targets[0]);
      if (!ns.is_namespace())
        throw TemplateError("cannot assign attribute on non-namespace object '" + s.targets[0] +
                            "'");
      if (!s.text.empty() && s.text[0] == '_')
        throw TemplateError("cannot store underscore-prefixed attribute '" + s.text + "'");
      std::get<Namespace>(ns.v).attrs->set(s.text, std::move(v));
      return Flow::Normal;
    }
    case StmtKind::SetBlock: {
      std::string body;
      scopes_.emplace_back();
      exec(s.body, body);
      scopes_.pop_back();
      Value v(std::move(body));
      if (s.cond) {
        // the filter chain's innermost operand is the body
        std::vector<const Expr*> chain;
        for (const Expr* f = s.cond.get(); f; f = f->a.get()) chain.push_back(f);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          CallArgs args;
          for (const auto& a : (*it)->items) args.pos.push_back(eval(*a));
          for (const auto& [k, a] : (*it)->kwargs) args.kw.emplace_back(k, eval(*a));
          v = apply_filter((*it)->name, v, args);
        }
      }
      assign(s.targets, v);
      return Flow::Normal;
    }
    case StmtKind::FilterBlock: {
      std::string body;
      Flow f = exec(s.body, body);
      Value v(std::move(body));
      std::vector<const Expr*> chain;
      for (const Expr* e = s.cond.get(); e; e = e->a.get()) chain.push_back(e);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        CallArgs args;
        for (const auto& a : (*it)->items) args.pos.push_back(eval(*a));
        for (const auto& [k, a] : (*it)->kwargs) args.kw.emplace_back(k, eval(*a));
        v = apply_filter((*it)->name, v, args);
      }
      out += to_str(v);
      return f;
    }
    case StmtKind::Macro: {
      const Stmt* m = &s;
      scopes_.back()[s.text] = make_function(
          s.text, [m](Evaluator& ev, CallArgs& args) { return ev.call_macro(*m, args, Value()); });
      return Flow::Normal;
    }
    case StmtKind::CallBlock: {
      const Stmt* cb = &s;
      Value caller = make_function("caller", [cb](Evaluator& ev, CallArgs&) {
        std::string body;
        ev.scopes_.emplace_back();
        ev.exec(cb->body, body);
        ev.scopes_.pop_back();
        return Value(std::move(body));
      });
      const Expr& call = *s.expr;
      Value fn = eval(*call.a);
      CallArgs args;
      for (const auto& a : call.items) args.pos.push_back(eval(*a));
      for (const auto& [k, a] : call.kwargs) args.kw.emplace_back(k, eval(*a));
      args.kw.emplace_back("caller", caller);
      out += to_str(this->call(fn, args));
      return Flow::Normal;
    }
    case StmtKind::Break:
      return Flow::Break;
    case StmtKind::Continue:
      return Flow::Continue;
  }
  return Flow::Normal;
}

void Evaluator::exec_for(const Stmt& s, std::string& out) {
  Value seq = eval(*s.expr);
  if (seq.is_none() || seq.is_number() || seq.is_function() || seq.is_namespace())
    throw TemplateError(std::string("'") + type_name(seq) + "' object is not iterable");
  std::vector<Value> items = iterate(seq);
  if (s.cond) {  // `for x in xs if cond`: loop.index counts the kept items only
    std::vector<Value> kept;
    for (auto& it : items) {
      scopes_.emplace_back();
      assign(s.targets, it);
      bool keep = truthy(eval(*s.cond));
      scopes_.pop_back();
      if (keep) kept.push_back(std::move(it));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(s.else_body, out);
    return;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    scopes_.emplace_back();
    auto loop = std::make_shared<DictObj>();
    loop->items = {
        {"index", Value(i + 1)},
        {"index0", Value(i)},
        {"revindex", Value(n - i)},
        {"revindex0", Value(n - i - 1)},
        {"first", Value(i == 0)},
        {"last", Value(i == n - 1)},
        {"length", Value(n)},
        {"depth", Value(1)},
        {"depth0", Value(0)},
        {"previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
        {"nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item")},
    };
    loop->items.emplace_back("cycle", make_function("cycle", [i](Evaluator&, CallArgs& a) {
                               if (a.pos.empty()) throw TemplateError("no items for cycling given");
                               return a.pos[static_cast<size_t>(i) % a.pos.size()];
                             }));
    scopes_.back()["loop"] = Value(std::move(loop));
    assign(s.targets, items[i]);
    Flow f = exec(s.body, out);
    scopes_.pop_back();
    if (f == Flow::Break) break;
  }
}

Value Evaluator::call_macro(const Stmt& m, CallArgs& args, const Value& caller) {
  if (depth_ >= kMaxMacroDepth) throw TemplateError("macro recursion too deep in '" + m.text + "'");
  if (args.pos.size() > m.params.size())
    throw TemplateError("macro '" + m.text + "' takes not more than " +
                        std::to_string(m.params.size()) + " argument(s)");
  std::unordered_map<std::string, Value> frame;
  for (size_t i = 0; i < m.params.size(); ++i) {
    const auto& [pname, pdefault] = m.params[i];
    if (const Value* v = args.get(i, pname))
      frame[pname] = *v;
    else if (pdefault)
      frame[pname] = eval(*pdefault);
    else
      frame[pname] = Value::undefined("parameter '" + pname + "' was not provided");
  }
  for (const auto& [k, v] : args.kw) {
    if (k == "caller") frame["caller"] = v;
  }
  if (!caller.is_undefined()) frame["caller"] = caller;
  ++depth_;
  scopes_.push_back(std::move(frame));
  std::string out;
  try {
    exec(m.body, out);
  } catch (...) {
    scopes_.pop_back();
    --depth_;
    throw;
  }
  scopes_.pop_back();
  --depth_;
  return Value(std::move(out));
}

Value Evaluator::call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) undefined_error(fn);
  if (!fn.is_function())
    throw TemplateError(std::string("'") + type_name(fn) + "' object is not callable");
  return std::get<FunctionPtr>(fn.v)->call(*this, args);
}

Value Evaluator::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_namespace()) {
    if (const Value* v = std::get<Namespace>(obj.v).attrs->find(name)) return *v;
    return Value::undefined("'Namespace' object has no attribute '" + name + "'");
  }
  Value m = builtin_method(obj, name);
  if (!m.is_undefined()) return m;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
  }
  return Value::undefined(obj_name(obj) + " has no attribute '" + name + "'");
}

Value Evaluator::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict().find(key.str())) return *v;
    return Value::undefined(obj_name(obj) + " has no attribute '" + key.str() + "'");
  }
  if (obj.is_namespace() && key.is_string()) return get_attr(obj, key.str());
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto& items = obj.list().items;
      int64_t n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
    } else {
      auto cps = utf8_decode(obj.str());
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value(utf8_encode(cps, i, i + 1));
    }
    return Value::undefined(obj_name(obj) + " has no element " + std::to_string(key.as_int()));
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined(obj_name(obj) + " has no element " + repr(key));
}

Value Evaluator::get_path(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    cur = digits ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part))))
                 : get_item(cur, Value(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

Value Evaluator::eval(const Expr& e) {
  return at_line(e.line, [&]() -> Value {
    switch (e.kind) {
      case ExprKind::Literal:
        return e.value;
      case ExprKind::Name:
        return lookup(e.name);
      case ExprKind::List:
      case ExprKind::Tuple: {
        std::vector<Value> items;
        for (const auto& it : e.items) items.push_back(eval(*it));
        return make_list(std::move(items), e.kind == ExprKind::Tuple);
      }
      case ExprKind::Dict: {
        auto d = std::make_shared<DictObj>();
        for (size_t i = 0; i < e.items.size(); ++i) {
          Value k = eval(*e.items[i]);
          if (!k.is_string()) k = Value(to_str(k));  // keys are strings in this engine
          d->set(k.str(), eval(*e.items2[i]));
        }
        return Value(std::move(d));
      }
      case ExprKind::GetAttr:
        return get_attr(eval(*e.a), e.name);
      case ExprKind::GetItem:
        return get_item(eval(*e.a), eval(*e.b));
      case ExprKind::Slice: {
        Value obj = eval(*e.a);
        if (obj.is_undefined()) undefined_error(obj);
        Value parts[3];
        for (int i = 0; i < 3; ++i)
          if (e.items[i]) parts[i] = eval(*e.items[i]);
        auto opt = [&](int i) -> std::optional<int64_t> {
          if (parts[i].is_undefined() || parts[i].is_none()) return std::nullopt;
          if (!parts[i].is_int()) throw TemplateError("slice indices must be integers or None");
          return parts[i].as_int();
        };
        auto step_o = opt(2);
        int64_t step = step_o.value_or(1);
        if (step == 0) throw TemplateError("slice step cannot be zero");
        std::vector<Value> src;
        std::vector<uint32_t> cps;
        int64_t n;
        if (obj.is_list()) {
          n = static_cast<int64_t>(obj.list().items.size());
        } else if (obj.is_string()) {
          cps = utf8_decode(obj.str());
          n = static_cast<int64_t>(cps.size());
        } else {
          throw TemplateError(std::string("'") + type_name(obj) + "' object is not subscriptable");
        }
        // Python's slice.indices()
        auto clamp = [&](std::optional<int64_t> v, int64_t def) {
          if (!v) return def;
          int64_t x = *v;
          if (x < 0) x += n;
          if (step > 0) return std::clamp<int64_t>(x, 0, n);
          return std::clamp<int64_t>(x, -1, n - 1);
        };
        int64_t start = clamp(opt(0), step > 0 ? 0 : n - 1);
        int64_t stop = clamp(opt(1), step > 0 ? n : -1);
        if (obj.is_list()) {
          std::vector<Value> out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            out.push_back(obj.list().items[static_cast<size_t>(i)]);
          return make_list(std::move(out), obj.list().tuple);
        }
        std::string out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
          utf8_append(out, cps[static_cast<size_t>(i)]);
        return Value(std::move(out));
      }
      case ExprKind::Call: {
        Value fn = eval(*e.a);
        CallArgs args;
        for (const auto& a : e.items) args.pos.push_back(eval(*a));
        for (const auto& [k, a] : e.kwargs) args.kw.emplace_back(k, eval(*a));
        return call(fn, args);
      }
      case ExprKind::Filter: {
        Value v = eval(*e.a);
        CallArgs args;
        for (const auto& a : e.items) args.pos.push_back(eval(*a));
        for (const auto& [k, a] : e.kwargs) args.kw.emplace_back(k, eval(*a));
        return apply_filter(e.name, v, args);
      }
      case ExprKind::Test: {
        Value v = eval(*e.a);
        CallArgs args;
        for (const auto& a : e.items) args.pos.push_back(eval(*a));
        for (const auto& [k, a] : e.kwargs) args.kw.emplace_back(k, eval(*a));
        return Value(apply_test(e.name, v, args) != e.negated);
      }
      case ExprKind::Unary: {
        Value v = eval(*e.a);
        if (e.name == "not") return Value(!truthy(v));
        if (v.is_undefined()) undefined_error(v);
        if (!v.is_number())
          throw TemplateError("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
        if (e.name == "+") return v.is_float() ? v : Value(v.as_int());
        return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
      }
      case ExprKind::Binary:
        return eval_binary(e);
      case ExprKind::Compare:
        return eval_compare(e);
      case ExprKind::CondExpr:
        if (truthy(eval(*e.a))) return eval(*e.b);
        if (e.c) return eval(*e.c);
        return Value::undefined(
            "the inline if-expression evaluated to false and no else "
            "section was defined");
    }
    return Value();
  });
}

Value Evaluator::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and") {
    Value a = eval(*e.a);
    return truthy(a) ? eval(*e.b) : a;
  }
  if (op == "or") {
    Value a = eval(*e.a);
    return truthy(a) ? a : eval(*e.b);
  }
  Value a = eval(*e.a), b = eval(*e.b);
  if (op == "~") return Value(to_str(a) + to_str(b));
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  auto unsupported = [&]() -> TemplateError {
    if (op == "+" && a.is_string())
      return TemplateError("can only concatenate str (not \"" + type_name(b) + "\") to str");
    if (op == "+" && a.is_list())
      return TemplateError("can only concatenate list (not \"" + type_name(b) + "\") to list");
    return TemplateError("unsupported operand type(s) for " + op + ": '" + type_name(a) +
                         "' and '" + type_name(b) + "'");
  };
  if (a.is_number() && b.is_number()) {
    bool ints = !a.is_float() && !b.is_float();
    if (op == "+")
      return ints ? Value(a.as_int() + b.as_int()) : Value(a.as_double() + b.as_double());
    if (op == "-")
      return ints ? Value(a.as_int() - b.as_int()) : Value(a.as_double() - b.as_double());
    if (op == "*")
      return ints ? Value(a.as_int() * b.as_int()) : Value(a.as_double() * b.as_double());
    if (op == "/") {
      if (b.as_double() == 0) throw TemplateError("division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
      if (b.as_double() == 0)
        throw TemplateError(op == "%" ? "integer modulo by zero" : "integer division by zero");
      if (ints) {
        int64_t q = py_floordiv(a.as_int(), b.as_int());
        return op == "//" ? Value(q) : Value(a.as_int() - q * b.as_int());
      }
      double x = a.as_double(), y = b.as_double();
      double q = std::floor(x / y);
      return op == "//" ? Value(q) : Value(x - q * y);
    }
    if (op == "**") {
      if (ints && b.as_int() >= 0) {
        int64_t r = 1, base = a.as_int();
        for (int64_t i = 0; i < b.as_int() && i < 64; ++i) r *= base;
        return Value(r);
      }
      return Value(std::pow(a.as_double(), b.as_double()));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_list() && b.is_list()) {
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return make_list(std::move(items), a.list().tuple);
    }
  }
  if (op == "*") {
    const Value* seq =
        a.is_string() || a.is_list() ? &a : (b.is_string() || b.is_list() ? &b : nullptr);
    const Value* cnt = seq == &a ? &b : &a;
    if (seq && (cnt->is_int() || cnt->is_bool())) {
      int64_t n = std::max<int64_t>(0, cnt->as_int());
      if (n > 100000) throw TemplateError("repetition count too large");
      if (seq->is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq->str();
        return Value(std::move(out));
      }
      std::vector<Value> out;
      for (int64_t i = 0; i < n; ++i)
        out.insert(out.end(), seq->list().items.begin(), seq->list().items.end());
      return make_list(std::move(out), seq->list().tuple);
    }
  }
  if (op == "%" && a.is_string()) {
    CallArgs args;
    if (b.is_list() && b.list().tuple)
      args.pos = b.list().items;
    else
      args.pos.push_back(b);
    return apply_filter("format", a, args);
  }
  throw unsupported();
}

Value Evaluator::eval_compare(const Expr& e) {
  Value left = eval(*e.a);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.items[i]);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==")
      r = equals(left, right);
    else if (op == "!=")
      r = !equals(left, right);
    else if (op == "in" || op == "notin")
      r = contains(right, left) == (op == "in");
    else {
      if (left.is_undefined()) undefined_error(left);
      if (right.is_undefined()) undefined_error(right);
      int c = compare(left, right);
      if (op == "<")
        r = c < 0;
      else if (op == "<=")
        r = c <= 0;
      else if (op == ">")
        r = c > 0;
      else
        r = c >= 0;
    }
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

}  // namespace basalt::tok::jinja
