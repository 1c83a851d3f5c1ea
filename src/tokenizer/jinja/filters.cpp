// Filters (`x | f(...)`) and tests (`x is t(...)`), as jinja2 defines them, with
// transformers' own `tojson` (json.dumps with ensure_ascii=False, no HTML escaping).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "tokenizer/jinja/eval.h"

namespace basalt::tok::jinja {
namespace {

const Value* opt(const CallArgs& a, size_t i, const char* name) {
  return a.get(i, name);
}

bool opt_bool(const CallArgs& a, size_t i, const char* name, bool def) {
  const Value* v = a.get(i, name);
  return v ? truthy(*v) : def;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Jinja's title filter: words start after whitespace or - ( { [ <.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool start = true;
  for (uint32_t cp : utf8_decode(s)) {
    std::string one;
    utf8_append(one, cp);
    out += start ? str_upper(one) : str_lower(one);
    start = cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cp == '-' || cp == '(' ||
            cp == '{' || cp == '[' || cp == '<';
  }
  return out;
}

std::string indent(const std::string& s0, const Value* width, bool first, bool blank) {
  std::string ind =
      width ? (width->is_string() ? width->str()
                                  : std::string(static_cast<size_t>(width->as_int()), ' '))
            : std::string(4, ' ');
  std::string s = s0 + "\n";
  std::vector<std::string> lines;
  size_t b = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == '\n') lines.push_back(s.substr(b, i - b)), b = i + 1;
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv.append("\n").append(ind);
      rv += lines[i];
    }
  } else {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += '\n';
      if (!lines[i].empty()) rv.append(ind).append(lines[i]);
    }
  }
  return first ? ind + rv : rv;
}

Value sort_key(Evaluator& ev, const Value& v, const Value* attribute, bool case_sensitive) {
  Value k = attribute && !attribute->is_none() ? ev.get_path(v, to_str(*attribute)) : v;
  if (!case_sensitive && k.is_string()) return Value(str_lower(k.str()));
  return k;
}

}  // namespace

bool builtin_has_test(const std::string& name);

Value Evaluator::apply_filter(const std::string& name, const Value& v, CallArgs& a) {
  auto need_str = [&](const Value& x) { return x.is_string() ? x.str() : to_str(x); };
  if (name == "tojson") {
    const Value* ind = opt(a, 1, "indent");
    int indent_n = ind && !ind->is_none() ? static_cast<int>(ind->as_int()) : -1;
    std::string item_sep = indent_n >= 0 ? "," : ", ", key_sep = ": ";
    if (const Value* sep = opt(a, 2, "separators");
        sep && sep->is_list() && sep->list().items.size() == 2) {
      item_sep = to_str(sep->list().items[0]);
      key_sep = to_str(sep->list().items[1]);
    }
    if (v.is_undefined()) throw TemplateError("Object of type Undefined is not JSON serializable");
    return Value(to_json(v, indent_n, item_sep, key_sep, opt_bool(a, 3, "sort_keys", false)));
  }
  if (name == "safe" || name == "string") return name == "safe" ? v : Value(to_str(v));
  if (name == "e" || name == "escape" || name == "forceescape")
    return Value(html_escape(to_str(v)));
  if (name == "trim") return Value(str_strip(need_str(v), opt(a, 0, "chars"), true, true));
  if (name == "lower") return Value(str_lower(need_str(v)));
  if (name == "upper") return Value(str_upper(need_str(v)));
  if (name == "capitalize") return Value(str_capitalize(need_str(v)));
  if (name == "title") return Value(jinja_title(need_str(v)));
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value(static_cast<int64_t>(utf8_decode(v.str()).size()));
    if (v.is_list()) return Value(static_cast<int64_t>(v.list().items.size()));
    if (v.is_dict()) return Value(static_cast<int64_t>(v.dict().items.size()));
    if (v.is_undefined()) return Value(0);
    throw TemplateError("object of type '" + type_name(v) + "' has no len()");
  }
  if (name == "replace") {
    const Value* old = opt(a, 0, "old");
    const Value* with = opt(a, 1, "new");
    if (!old || !with) throw TemplateError("replace filter needs 'old' and 'new'");
    const Value* c = opt(a, 2, "count");
    return Value(str_replace(need_str(v), to_str(*old), to_str(*with),
                             c && !c->is_none() ? c->as_int() : -1));
  }
  if (name == "join") {
    const Value* d = opt(a, 0, "d");
    const Value* attr = opt(a, 1, "attribute");
    std::string sep = d ? to_str(*d) : "", out;
    bool first = true;
    for (const auto& x : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += to_str(attr && !attr->is_none() ? get_path(x, to_str(*attr)) : x);
    }
    return Value(std::move(out));
  }
  if (name == "default" || name == "d") {
    const Value* def = opt(a, 0, "default_value");
    bool boolean = opt_bool(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !truthy(v))) return def ? *def : Value("");
    return v;
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return make_list(iterate(v));
  if (name == "reverse") {
    if (v.is_string()) {
      auto cps = utf8_decode(v.str());
      std::reverse(cps.begin(), cps.end());
      return Value(utf8_encode(cps, 0, cps.size()));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return make_list(std::move(items));
  }
  if (name == "int" || name == "float") {
    bool is_int = name == "int";
    const Value* def = opt(a, 0, "default");
    Value dflt = def ? *def : (is_int ? Value(0) : Value(0.0));
    if (v.is_int() || v.is_bool()) return is_int ? Value(v.as_int()) : Value(v.as_double());
    if (v.is_float()) return is_int ? Value(static_cast<int64_t>(std::trunc(v.as_double()))) : v;
    if (v.is_string()) {
      std::string s = str_strip(v.str(), nullptr, true, true);
      const char* b = s.c_str();
      char* e = nullptr;
      if (is_int) {
        const Value* base = opt(a, 1, "base");
        long long x = std::strtoll(b, &e, base ? static_cast<int>(base->as_int()) : 10);
        if (!s.empty() && *e == 0) return Value(static_cast<int64_t>(x));
      }
      double d = std::strtod(b, &e);
      if (!s.empty() && *e == 0)
        return is_int ? Value(static_cast<int64_t>(std::trunc(d))) : Value(d);
    }
    return dflt;
  }
  if (name == "abs") {
    if (v.is_float()) return Value(std::fabs(v.as_double()));
    if (v.is_number()) return Value(static_cast<int64_t>(std::llabs(v.as_int())));
    throw TemplateError("bad operand type for abs(): '" + type_name(v) + "'");
  }
  if (name == "round") {
    const Value* p = opt(a, 0, "precision");
    const Value* m = opt(a, 1, "method");
    std::string method = m ? to_str(*m) : "common";
    double scale = std::pow(10.0, p ? static_cast<double>(p->as_int()) : 0.0);
    double x = v.as_double() * scale;
    x = method == "ceil"    ? std::ceil(x)
        : method == "floor" ? std::floor(x)
                            : std::nearbyint(x);  // Python rounds halves to even
    return Value(x / scale);
  }
  if (name == "items") {
    if (v.is_undefined()) return make_list({});
    if (!v.is_dict()) throw TemplateError("items filter needs a mapping, got " + type_name(v));
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict().items) out.push_back(make_list({Value(k), x}, true));
    return make_list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) throw TemplateError("dictsort filter needs a mapping, got " + type_name(v));
    bool cs = opt_bool(a, 0, "case_sensitive", false);
    const Value* by = opt(a, 1, "by");
    bool by_value = by && to_str(*by) == "value";
    bool rev = opt_bool(a, 2, "reverse", false);
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict().items) out.push_back(make_list({Value(k), x}, true));
    std::stable_sort(out.begin(), out.end(), [&](const Value& p, const Value& q) {
      const Value& x = p.list().items[by_value ? 1 : 0];
      const Value& y = q.list().items[by_value ? 1 : 0];
      int c = compare(sort_key(*this, x, nullptr, cs), sort_key(*this, y, nullptr, cs));
      return rev ? c > 0 : c < 0;
    });
    return make_list(std::move(out));
  }
  if (name == "sort") {
    bool rev = opt_bool(a, 0, "reverse", false);
    bool cs = opt_bool(a, 1, "case_sensitive", false);
    const Value* attr = opt(a, 2, "attribute");
    std::vector<Value> items = iterate(v);
    std::vector<std::pair<Value, Value>> keyed;
    for (auto& x : items) keyed.emplace_back(sort_key(*this, x, attr, cs), x);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& p, const auto& q) {
      int c = compare(p.first, q.first);
      return rev ? c > 0 : c < 0;
    });
    std::vector<Value> out;
    for (auto& [k, x] : keyed) out.push_back(std::move(x));
    return make_list(std::move(out));
  }
  if (name == "unique") {
    bool cs = opt_bool(a, 0, "case_sensitive", false);
    const Value* attr = opt(a, 1, "attribute");
    std::vector<Value> out, seen;
    for (const auto& x : iterate(v)) {
      Value k = sort_key(*this, x, attr, cs);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
        seen.push_back(k);
        out.push_back(x);
      }
    }
    return make_list(std::move(out));
  }
  if (name == "min" || name == "max") {
    bool cs = opt_bool(a, 0, "case_sensitive", false);
    const Value* attr = opt(a, 1, "attribute");
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      int c = compare(sort_key(*this, items[i], attr, cs), sort_key(*this, items[best], attr, cs));
      if (name == "min" ? c < 0 : c > 0) best = i;
    }
    return items[best];
  }
  if (name == "sum") {
    const Value* attr = opt(a, 0, "attribute");
    const Value* start = opt(a, 1, "start");
    Value acc = start ? *start : Value(0);
    for (const auto& x : iterate(v)) {
      Value y = attr && !attr->is_none() ? get_path(x, to_str(*attr)) : x;
      if (!acc.is_number() || !y.is_number())
        throw TemplateError("unsupported operand type(s) for +: '" + type_name(acc) + "' and '" +
                            type_name(y) + "'");
      acc = acc.is_float() || y.is_float() ? Value(acc.as_double() + y.as_double())
                                           : Value(acc.as_int() + y.as_int());
    }
    return acc;
  }
  if (name == "indent") {
    return Value(indent(need_str(v), opt(a, 0, "width"), opt_bool(a, 1, "first", false),
                        opt_bool(a, 2, "blank", false)));
  }
  if (name == "format") {
    std::vector<Value> args = a.pos;
    return Value(str_printf(need_str(v), args));
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in = false;
    for (char c : need_str(v)) {
      bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (c & 0x80);
      if (w && !in) ++n;
      in = w;
    }
    return Value(n);
  }
  if (name == "attr") return get_attr(v, to_str(*opt(a, 0, "name")));
  if (name == "map") {
    std::vector<Value> out;
    if (const Value* attr = opt(a, 99, "attribute")) {
      const Value* def = nullptr;
      for (const auto& [k, x] : a.kw)
        if (k == "default") def = &x;
      for (const auto& x : iterate(v)) {
        Value y = get_path(x, to_str(*attr));
        out.push_back(y.is_undefined() && def ? *def : y);
      }
      return make_list(std::move(out));
    }
    if (a.pos.empty()) throw TemplateError("map filter needs a filter name or attribute=");
    std::string f = to_str(a.pos[0]);
    CallArgs rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const auto& x : iterate(v)) out.push_back(apply_filter(f, x, rest));
    return make_list(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    bool by_attr = name == "selectattr" || name == "rejectattr";
    bool want = name == "select" || name == "selectattr";
    size_t k = 0;
    std::string attr;
    if (by_attr) {
      if (a.pos.empty()) throw TemplateError(name + " filter needs an attribute name");
      attr = to_str(a.pos[k++]);
    }
    std::string test;
    if (k < a.pos.size()) test = to_str(a.pos[k++]);
    CallArgs rest;
    rest.pos.assign(a.pos.begin() + static_cast<ptrdiff_t>(std::min(k, a.pos.size())), a.pos.end());
    rest.kw = a.kw;
    std::vector<Value> out;
    for (const auto& x : iterate(v)) {
      Value y = by_attr ? get_path(x, attr) : x;
      bool r = test.empty() ? truthy(y) : apply_test(test, y, rest);
      if (r == want) out.push_back(x);
    }
    return make_list(std::move(out));
  }
  if (name == "batch" || name == "slice") {
    throw TemplateError("filter '" + name + "' is not supported");
  }
  throw TemplateError("no filter named '" + name + "'");
}

bool Evaluator::apply_test(const std::string& name, const Value& v, CallArgs& a) {
  auto arg0 = [&]() -> const Value& {
    if (a.pos.empty()) throw TemplateError("test '" + name + "' needs an argument");
    return a.pos[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return v.is_function();
  if (name == "lower") return v.is_string() && str_lower(v.str()) == v.str();
  if (name == "upper") return v.is_string() && str_upper(v.str()) == v.str();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) {
      if (v.is_undefined()) throw TemplateError(v.undefined_hint());
      throw TemplateError("test '" + name + "' needs an integer, got " + type_name(v));
    }
    int64_t x = v.as_int();
    if (name == "odd") return x % 2 != 0;
    if (name == "even") return x % 2 == 0;
    int64_t d = arg0().as_int();
    if (d == 0) throw TemplateError("integer modulo by zero");
    return x % d == 0;
  }
  if (name == "equalto" || name == "eq" || name == "==") return equals(v, arg0());
  if (name == "ne" || name == "!=") return !equals(v, arg0());
  if (name == "sameas") {
    const Value& o = arg0();
    if (v.is_bool() || o.is_bool()) return v.is_bool() && o.is_bool() && v.as_bool() == o.as_bool();
    if (v.is_none() || o.is_none()) return v.is_none() && o.is_none();
    return equals(v, o) && v.v.index() == o.v.index();
  }
  if (name == "lt" || name == "<" || name == "lessthan") return compare(v, arg0()) < 0;
  if (name == "le" || name == "<=") return compare(v, arg0()) <= 0;
  if (name == "gt" || name == ">" || name == "greaterthan") return compare(v, arg0()) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg0()) >= 0;
  if (name == "in") return contains(arg0(), v);
  if (name == "filter") return builtin_has_filter(to_str(v));
  if (name == "test") return builtin_has_test(to_str(v));
  throw TemplateError("no test named '" + name + "'");
}

bool builtin_has_filter(const std::string& name) {
  static const char* names[] = {
      "tojson", "safe",    "string",     "e",      "escape",     "forceescape", "trim",
      "lower",  "upper",   "capitalize", "title",  "length",     "count",       "replace",
      "join",   "default", "d",          "first",  "last",       "list",        "reverse",
      "int",    "float",   "abs",        "round",  "items",      "dictsort",    "sort",
      "unique", "min",     "max",        "sum",    "indent",     "format",      "wordcount",
      "attr",   "map",     "select",     "reject", "selectattr", "rejectattr"};
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

bool builtin_has_test(const std::string& name) {
  static const char* names[] = {
      "defined", "undefined", "none",  "string",  "number",      "integer",  "float",
      "boolean", "true",      "false", "mapping", "iterable",    "sequence", "callable",
      "lower",   "upper",     "odd",   "even",    "divisibleby", "equalto",  "eq",
      "==",      "ne",        "!=",    "sameas",  "lt",          "<",        "lessthan",
      "le",      "<=",        "gt",    ">",       "greaterthan", "ge",       ">=",
      "in",      "filter",    "test"};
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

}  // namespace basalt::tok::jinja
