// Values: Python-compatible printing (str, repr, json.dumps), equality and ordering.
#include "tokenizer/jinja/value.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <cmath>

namespace basalt::tok::jinja {

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<int64_t>(v);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(v);
  return static_cast<double>(as_int());
}

const Value* DictObj::find(std::string_view key) const {
  for (const auto& [k, val] : items)
    if (k == key) return &val;
  return nullptr;
}

Value* DictObj::find(std::string_view key) {
  for (auto& [k, val] : items)
    if (k == key) return &val;
  return nullptr;
}

void DictObj::set(const std::string& key, Value value) {
  if (Value* slot = find(key))
    *slot = std::move(value);
  else
    items.emplace_back(key, std::move(value));
}

const Value* CallArgs::get(size_t i, std::string_view name) const {
  if (i < pos.size()) return &pos[i];
  for (const auto& [k, val] : kw)
    if (k == name) return &val;
  return nullptr;
}

Value make_list(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<ListObj>();
  l->items = std::move(items);
  l->tuple = tuple;
  return Value(std::move(l));
}

Value make_dict(std::vector<std::pair<std::string, Value>> items) {
  auto d = std::make_shared<DictObj>();
  d->items = std::move(items);
  return Value(std::move(d));
}

Value make_function(std::string name, std::function<Value(Evaluator&, CallArgs&)> fn) {
  return Value(std::make_shared<const Function>(Function{std::move(name), std::move(fn)}));
}

std::string type_name(const Value& v) {
  switch (v.v.index()) {
    case 0:
      return "Undefined";
    case 1:
      return "NoneType";
    case 2:
      return "bool";
    case 3:
      return "int";
    case 4:
      return "float";
    case 5:
      return "str";
    case 6:
      return v.list().tuple ? "tuple" : "list";
    case 7:
      return "dict";
    case 8:
      return "Namespace";
    default:
      return "function";
  }
}

bool truthy(const Value& v) {
  switch (v.v.index()) {
    case 0:
    case 1:
      return false;
    case 2:
      return v.as_bool();
    case 3:
      return std::get<int64_t>(v.v) != 0;
    case 4:
      return std::get<double>(v.v) != 0.0;
    case 5:
      return !v.str().empty();
    case 6:
      return !v.list().items.empty();
    case 7:
      return !v.dict().items.empty();
    default:
      return true;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Python's repr: shortest round-trip digits, exponent form outside 1e-4 <= |d| < 1e16.
  std::string s = fmt::format("{}", d);
  double a = std::fabs(d);
  if (a != 0.0 && (a < 1e-4 || a >= 1e16)) {
    s = fmt::format("{:e}", d);  // fallback shape; redo with shortest digits below
    std::string digits = fmt::format("{}", d);
    if (digits.find('e') != std::string::npos) {
      s = digits;
    } else {
      // fmt printed fixed notation; rebuild as mantissa e exponent from the shortest digits.
      int exp10 = static_cast<int>(std::floor(std::log10(a)));
      double mant = d / std::pow(10.0, exp10);
      s = fmt::format("{}e{}{:02d}", mant, exp10 < 0 ? '-' : '+', std::abs(exp10));
    }
    // Python writes 1e-05 and 1e+16: exponent at least two digits, with its sign.
    size_t e = s.find('e');
    std::string mant = s.substr(0, e), ex = s.substr(e + 1);
    char sign = '+';
    if (!ex.empty() && (ex[0] == '+' || ex[0] == '-')) sign = ex[0], ex = ex.substr(1);
    while (ex.size() > 2 && ex[0] == '0') ex = ex.substr(1);
    if (ex.size() < 2) ex = "0" + ex;
    if (mant.size() > 2 && mant.find('.') != std::string::npos) {
      while (mant.back() == '0') mant.pop_back();
      if (mant.back() == '.') mant.pop_back();
    }
    return mant + "e" + sign + ex;
  }
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}


std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                              static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {  // invalid byte: keep it as a Latin-1 code point rather than fail
      out.push_back(static_cast<unsigned char>(s[i]));
      ++i;
      continue;
    }
    out.push_back(static_cast<uint32_t>(cp));
    i += static_cast<size_t>(n);
  }
  return out;
}

std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) utf8_append(out, cps[i]);
  return out;
}

namespace {

bool py_printable(uint32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string str_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (uint32_t cp : utf8_decode(s)) {
    if (cp == '\\')
      out += "\\\\";
    else if (cp == static_cast<uint32_t>(q))
      out += std::string("\\") + q;
    else if (cp == '\n')
      out += "\\n";
    else if (cp == '\r')
      out += "\\r";
    else if (cp == '\t')
      out += "\\t";
    else if (!py_printable(cp)) {
      if (cp <= 0xFF)
        out += fmt::format("\\x{:02x}", cp);
      else if (cp <= 0xFFFF)
        out += fmt::format("\\u{:04x}", cp);
      else
        out += fmt::format("\\U{:08x}", cp);
    } else {
      utf8_append(out, cp);
    }
  }
  out += q;
  return out;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, int indent, int depth, std::string_view item_sep,
                std::string_view key_sep, bool sort_keys) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.v.index()) {
    case 1:
      out += "null";
      return;
    case 2:
      out += v.as_bool() ? "true" : "false";
      return;
    case 3:
      out += std::to_string(std::get<int64_t>(v.v));
      return;
    case 4: {
      double d = std::get<double>(v.v);
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d > 0 ? "Infinity" : "-Infinity";
      else
        out += float_repr(d);
      return;
    }
    case 5:
      json_string(out, v.str());
      return;
    case 6: {
      const auto& items = v.list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_value(out, items[i], indent, depth + 1, item_sep, key_sep, sort_keys);
      }
      newline(depth);
      out += ']';
      return;
    }
    case 7: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(out, items[i]->first);
        out += key_sep;
        json_value(out, items[i]->second, indent, depth + 1, item_sep, key_sep, sort_keys);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      throw TemplateError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

void str_into(std::string& out, const Value& v, bool quote_strings) {
  switch (v.v.index()) {
    case 0:
      return;
    case 1:
      out += "None";
      return;
    case 2:
      out += v.as_bool() ? "True" : "False";
      return;
    case 3:
      out += std::to_string(std::get<int64_t>(v.v));
      return;
    case 4:
      out += float_repr(std::get<double>(v.v));
      return;
    case 5:
      out += quote_strings ? str_repr(v.str()) : v.str();
      return;
    case 6: {
      const auto& l = v.list();
      out += l.tuple ? '(' : '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        str_into(out, l.items[i], true);
      }
      if (l.tuple && l.items.size() == 1) out += ',';
      out += l.tuple ? ')' : ']';
      return;
    }
    case 7: {
      out += '{';
      bool first = true;
      for (const auto& [k, val] : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        out += str_repr(k);
        out += ": ";
        str_into(out, val, true);
      }
      out += '}';
      return;
    }
    case 8:
      out += "<Namespace>";
      return;
    default:
      out += "<function " + std::get<FunctionPtr>(v.v)->name + ">";
      return;
  }
}

}  // namespace

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  str_into(out, v, false);
  return out;
}

std::string repr(const Value& v) {
  std::string out;
  str_into(out, v, true);
  return out;
}

std::string to_json(const Value& v, int indent, std::string_view item_sep, std::string_view key_sep,
                    bool sort_keys) {
  std::string out;
  json_value(out, v, indent, 0, item_sep, key_sep, sort_keys);
  return out;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.v.index() != b.v.index()) return false;
  switch (a.v.index()) {
    case 0:
    case 1:
      return true;
    case 5:
      return a.str() == b.str();
    case 6: {
      const auto &x = a.list().items, &y = b.list().items;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case 7: {
      const auto& x = a.dict().items;
      const auto& y = b.dict();
      if (x.size() != y.items.size()) return false;
      for (const auto& [k, val] : x) {
        const Value* o = y.find(k);
        if (!o || !equals(val, *o)) return false;
      }
      return true;
    }
    case 8:
      return std::get<Namespace>(a.v).attrs == std::get<Namespace>(b.v).attrs;
    default:
      return std::get<FunctionPtr>(a.v) == std::get<FunctionPtr>(b.v);
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list().items, &y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (int c = compare(x[i], y[i])) return c;
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw TemplateError("'<' not supported between instances of '" + type_name(a) + "' and '" +
                      type_name(b) + "'");
}

}  // namespace basalt::tok::jinja
