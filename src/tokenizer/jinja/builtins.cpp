// Builtins templates call as functions: globals (range, namespace, dict, raise_exception,
// strftime_now — the ones transformers registers) and methods of str, dict and list.
#include <fmt/format.h>
#include <utf8proc.h>

#include <ctime>

#include "tokenizer/jinja/eval.h"

namespace basalt::tok::jinja {
namespace {

constexpr int64_t kMaxRange = 1'000'000;

// Python's str.isspace() for one code point.
bool py_space(uint32_t cp) {
  return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

const Value& arg(const CallArgs& a, size_t i, const char* name, const char* fn) {
  const Value* v = a.get(i, name);
  if (!v) throw TemplateError(std::string(fn) + "() missing required argument '" + name + "'");
  return *v;
}

const std::string& str_arg(const CallArgs& a, size_t i, const char* name, const char* fn) {
  const Value& v = arg(a, i, name, fn);
  if (!v.is_string())
    throw TemplateError(std::string(fn) + "() argument '" + name + "' must be str, not " +
                        type_name(v));
  return v.str();
}

Value bind_method(const Value& self, const std::string& name,
                  std::function<Value(const Value&, CallArgs&)> fn) {
  return make_function(name,
                       [self, fn = std::move(fn)](Evaluator&, CallArgs& a) { return fn(self, a); });
}

bool affix_match(const std::string& s, const Value& affix, bool start, const char* fn) {
  auto one = [&](const Value& x) {
    if (!x.is_string())
      throw TemplateError(std::string(fn) + " first arg must be str or a tuple of str, not " +
                          type_name(x));
    const std::string& p = x.str();
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0
                 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (affix.is_list()) {
    for (const auto& x : affix.list().items)
      if (one(x)) return true;
    return false;
  }
  return one(affix);
}

std::vector<Value> str_split(const std::string& s, const Value* sep, int64_t maxsplit, bool right) {
  std::vector<std::string> parts;
  if (!sep || sep->is_none()) {
    // whitespace runs; no empty strings
    auto cps = utf8_decode(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      size_t b = i;
      while (i < cps.size() && !py_space(cps[i])) ++i;
      words.emplace_back(b, i);
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      if (!right) {
        size_t keep = static_cast<size_t>(maxsplit);
        size_t rest_b = words[keep].first;
        size_t end = cps.size();
        while (end > rest_b && py_space(cps[end - 1])) --end;
        words.resize(keep);
        words.emplace_back(rest_b, end);
      } else {
        size_t drop = words.size() - static_cast<size_t>(maxsplit);
        size_t b = 0;
        while (b < cps.size() && py_space(cps[b])) ++b;
        std::vector<std::pair<size_t, size_t>> w2{{b, words[drop - 1].second}};
        w2.insert(w2.end(), words.begin() + static_cast<ptrdiff_t>(drop), words.end());
        words = std::move(w2);
      }
    }
    std::vector<Value> out;
    for (auto [b, e] : words) out.emplace_back(utf8_encode(cps, b, e));
    return out;
  }
  if (!sep->is_string()) throw TemplateError("must be str or None, not " + type_name(*sep));
  const std::string& d = sep->str();
  if (d.empty()) throw TemplateError("empty separator");
  if (!right) {
    size_t start = 0;
    int64_t n = 0;
    while (true) {
      size_t p = (maxsplit < 0 || n < maxsplit) ? s.find(d, start) : std::string::npos;
      if (p == std::string::npos) {
        parts.push_back(s.substr(start));
        break;
      }
      parts.push_back(s.substr(start, p - start));
      start = p + d.size();
      ++n;
    }
  } else {
    size_t end = s.size();
    int64_t n = 0;
    while (true) {
      size_t p = (maxsplit < 0 || n < maxsplit) && end >= d.size() ? s.rfind(d, end - d.size())
                                                                   : std::string::npos;
      if (p == std::string::npos) {
        parts.insert(parts.begin(), s.substr(0, end));
        break;
      }
      parts.insert(parts.begin(), s.substr(p + d.size(), end - p - d.size()));
      end = p;
      ++n;
    }
  }
  std::vector<Value> out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

std::string str_title(const std::string& s) {
  // Python str.title(): a cased letter after an uncased one starts a word.
  std::string out;
  bool prev_cased = false;
  for (uint32_t cp : utf8_decode(s)) {
    auto c = static_cast<utf8proc_int32_t>(cp);
    bool upper = utf8proc_toupper(c) != c || utf8proc_tolower(c) != c;
    if (upper) {
      utf8_append(out,
                  static_cast<uint32_t>(prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c)));
      prev_cased = true;
    } else {
      utf8_append(out, cp);
      prev_cased = false;
    }
  }
  return out;
}

// Python str.format with {} / {0} / {name} fields (no format specs beyond that).
std::string str_format(const std::string& f, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t e = f.find('}', i);
      if (e == std::string::npos) throw TemplateError("Single '{' encountered in format string");
      std::string field = f.substr(i + 1, e - i - 1);
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_idx < a.pos.size()) v = &a.pos[auto_idx++];
      } else if (field.find_first_not_of("0123456789") == std::string::npos) {
        size_t k = std::stoul(field);
        if (k < a.pos.size()) v = &a.pos[k];
      } else {
        for (const auto& [k, val] : a.kw)
          if (k == field) v = &val;
      }
      if (!v) throw TemplateError("format field '" + field + "' has no argument");
      out += to_str(*v);
      i = e;
    } else {
      out += c;
    }
  }
  return out;
}

Value str_method(const Value& self, const std::string& name) {
  using A = CallArgs;
  auto S = [](const Value& v) -> const std::string& { return v.str(); };
  if (name == "startswith" || name == "endswith") {
    bool start = name == "startswith";
    return bind_method(self, name, [start, name](const Value& v, A& a) {
      return Value(affix_match(v.str(), arg(a, 0, "prefix", name.c_str()), start, name.c_str()));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return bind_method(self, name, [l, r](const Value& v, A& a) {
      return Value(str_strip(v.str(), a.get(0, "chars"), l, r));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return bind_method(self, name, [right](const Value& v, A& a) {
      const Value* ms = a.get(1, "maxsplit");
      return make_list(str_split(v.str(), a.get(0, "sep"), ms ? ms->as_int() : -1, right));
    });
  }
  if (name == "upper")
    return bind_method(self, name, [S](const Value& v, A&) { return Value(str_upper(S(v))); });
  if (name == "lower")
    return bind_method(self, name, [S](const Value& v, A&) { return Value(str_lower(S(v))); });
  if (name == "title")
    return bind_method(self, name, [S](const Value& v, A&) { return Value(str_title(S(v))); });
  if (name == "capitalize")
    return bind_method(self, name, [S](const Value& v, A&) { return Value(str_capitalize(S(v))); });
  if (name == "replace") {
    return bind_method(self, name, [](const Value& v, A& a) {
      const Value* c = a.get(2, "count");
      return Value(str_replace(v.str(), str_arg(a, 0, "old", "replace"),
                               str_arg(a, 1, "new", "replace"), c ? c->as_int() : -1));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return bind_method(self, name, [name](const Value& v, A& a) {
      const std::string& sub = str_arg(a, 0, "sub", name.c_str());
      const std::string& s = v.str();
      if (name == "count") {
        if (sub.empty()) return Value(static_cast<int64_t>(utf8_decode(s).size() + 1));
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value(n);
      }
      size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
      if (p == std::string::npos) {
        if (name == "index" || name == "rindex") throw TemplateError("substring not found");
        return Value(-1);
      }
      return Value(static_cast<int64_t>(utf8_decode(s.substr(0, p)).size()));
    });
  }
  if (name == "join") {
    return bind_method(self, name, [](const Value& v, A& a) {
      std::string out;
      bool first = true;
      for (const auto& x : iterate(arg(a, 0, "iterable", "join"))) {
        if (!first) out += v.str();
        first = false;
        if (!x.is_string())
          throw TemplateError("sequence item: expected str instance, " + type_name(x) + " found");
        out += x.str();
      }
      return Value(std::move(out));
    });
  }
  if (name == "splitlines") {
    return bind_method(self, name, [](const Value& v, A&) {
      std::vector<Value> out;
      const std::string& s = v.str();
      size_t b = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          out.emplace_back(s.substr(b, i - b));
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          b = i + 1;
        }
      }
      if (b < s.size()) out.emplace_back(s.substr(b));
      return make_list(std::move(out));
    });
  }
  if (name == "format")
    return bind_method(self, name,
                       [](const Value& v, A& a) { return Value(str_format(v.str(), a)); });
  if (name == "removeprefix" || name == "removesuffix") {
    bool pre = name == "removeprefix";
    return bind_method(self, name, [pre, name](const Value& v, A& a) {
      const std::string& s = v.str();
      const std::string& x = str_arg(a, 0, "prefix", name.c_str());
      if (x.size() <= s.size()) {
        if (pre && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
        if (!pre && s.compare(s.size() - x.size(), x.size(), x) == 0)
          return Value(s.substr(0, s.size() - x.size()));
      }
      return v;
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "isupper" || name == "islower") {
    return bind_method(self, name, [name](const Value& v, A&) {
      auto cps = utf8_decode(v.str());
      if (cps.empty()) return Value(false);
      bool any_cased = false;
      for (uint32_t cp : cps) {
        auto c = static_cast<utf8proc_int32_t>(cp);
        auto cat = utf8proc_category(c);
        bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        bool ok = name == "isdigit"   ? digit
                  : name == "isalpha" ? alpha
                  : name == "isalnum" ? (alpha || digit)
                  : name == "isspace" ? py_space(cp)
                                      : true;
        if (name == "isupper" || name == "islower") {
          bool cased = utf8proc_toupper(c) != c || utf8proc_tolower(c) != c;
          if (cased) {
            any_cased = true;
            if (name == "isupper" ? utf8proc_toupper(c) != c : utf8proc_tolower(c) != c)
              return Value(false);
          }
        } else if (!ok) {
          return Value(false);
        }
      }
      return Value(name == "isupper" || name == "islower" ? any_cased : true);
    });
  }
  return Value();
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return bind_method(self, name, [name](const Value& v, CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, val] : v.dict().items) {
        if (name == "items")
          out.push_back(make_list({Value(k), val}, true));
        else if (name == "keys")
          out.emplace_back(k);
        else
          out.push_back(val);
      }
      return make_list(std::move(out));
    });
  }
  if (name == "get") {
    return bind_method(self, name, [](const Value& v, CallArgs& a) {
      const Value& key = arg(a, 0, "key", "get");
      const Value* def = a.get(1, "default");
      if (key.is_string())
        if (const Value* x = v.dict().find(key.str())) return *x;
      return def ? *def : Value(None{});
    });
  }
  return Value();
}

Value list_method(const Value& self, const std::string& name) {
  if (name == "index" || name == "count") {
    return bind_method(self, name, [name](const Value& v, CallArgs& a) {
      const Value& x = arg(a, 0, "value", name.c_str());
      int64_t n = 0, i = 0;
      for (const auto& it : v.list().items) {
        if (equals(it, x)) {
          if (name == "index") return Value(i);
          ++n;
        }
        ++i;
      }
      if (name == "index") throw TemplateError(repr(x) + " is not in list");
      return Value(n);
    });
  }
  return Value();
}

}  // namespace

std::string str_strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto cps = utf8_decode(s);
  std::vector<uint32_t> set;
  bool ws = !chars || chars->is_none() || chars->is_undefined();
  if (!ws) {
    if (!chars->is_string()) throw TemplateError("strip arg must be None or str");
    set = utf8_decode(chars->str());
  }
  auto strip = [&](uint32_t cp) {
    return ws ? py_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip(cps[b])) ++b;
  if (right)
    while (e > b && strip(cps[e - 1])) --e;
  if (b == 0 && e == cps.size()) return s;
  return utf8_encode(cps, b, e);
}

std::string str_lower(const std::string& s) {
  std::string out;
  for (uint32_t cp : utf8_decode(s))
    utf8_append(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
  return out;
}

std::string str_upper(const std::string& s) {
  std::string out;
  for (uint32_t cp : utf8_decode(s))
    utf8_append(out, static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))));
  return out;
}

std::string str_capitalize(const std::string& s) {
  auto cps = utf8_decode(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    auto c = static_cast<utf8proc_int32_t>(cps[i]);
    utf8_append(out, static_cast<uint32_t>(i == 0 ? utf8proc_totitle(c) : utf8proc_tolower(c)));
  }
  return out;
}

std::string str_replace(const std::string& s, const std::string& old, const std::string& with,
                        int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `with` between every character
    auto cps = utf8_decode(s);
    int64_t n = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || n < count) out += with, ++n;
      if (i < cps.size()) utf8_append(out, cps[i]);
    }
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t p = s.find(old, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += with;
    start = p + old.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::string str_printf(const std::string& f, const std::vector<Value>& args) {
  std::string out;
  size_t ai = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '%') {
      out += '%';
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < f.size() && std::string_view("-+ #0123456789.").find(f[j]) != std::string_view::npos)
      ++j;
    if (j >= f.size()) throw TemplateError("incomplete format");
    std::string spec = f.substr(i + 1, j - i - 1);
    char conv = f[j];
    if (ai >= args.size()) throw TemplateError("not enough arguments for format string");
    const Value& v = args[ai++];
    std::string printed;
    switch (conv) {
      case 's':
        printed = to_str(v);
        break;
      case 'r':
        printed = repr(v);
        break;
      case 'd':
      case 'i':
        if (!v.is_number())
          throw TemplateError("%d format: a real number is required, not " + type_name(v));
        printed = fmt::format(fmt::runtime("{:" + spec + "d}"),
                              v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int());
        spec.clear();
        break;
      case 'f':
      case 'e':
      case 'g':
        if (!v.is_number()) throw TemplateError("must be real number, not " + type_name(v));
        printed = fmt::format(
            fmt::runtime("{:" + (spec.empty() ? std::string(conv == 'f' ? ".6" : "") : spec) +
                         conv + "}"),
            v.as_double());
        spec.clear();
        break;
      default:
        throw TemplateError(std::string("unsupported format character '") + conv + "'");
    }
    if (!spec.empty() && conv != 'd') {  // width for %s / %r
      bool left = spec[0] == '-';
      size_t w = static_cast<size_t>(std::atoi(spec.c_str() + (left ? 1 : 0)));
      size_t len = utf8_decode(printed).size();
      if (len < w)
        printed = left ? printed + std::string(w - len, ' ') : std::string(w - len, ' ') + printed;
    }
    out += printed;
    i = j;
  }
  if (ai < args.size()) throw TemplateError("not all arguments converted during string formatting");
  return out;
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;  // jinja2's Undefined iterates as empty
  if (container.is_string()) {
    if (item.is_undefined()) return false;
    if (!item.is_string())
      throw TemplateError("'in <string>' requires string as left operand, not " + type_name(item));
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& x : container.list().items)
      if (equals(x, item)) return true;
    return false;
  }
  if (container.is_dict()) return item.is_string() && container.dict().find(item.str()) != nullptr;
  throw TemplateError("argument of type '" + type_name(container) + "' is not iterable");
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_list()) return v.list().items;
  std::vector<Value> out;
  if (v.is_dict()) {
    for (const auto& [k, val] : v.dict().items) out.emplace_back(k);
  } else if (v.is_string()) {
    auto cps = utf8_decode(v.str());
    for (size_t i = 0; i < cps.size(); ++i) out.emplace_back(utf8_encode(cps, i, i + 1));
  } else if (!v.is_undefined()) {
    throw TemplateError("'" + type_name(v) + "' object is not iterable");
  }
  return out;
}

Value builtin_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return str_method(obj, name);
  if (obj.is_dict()) return dict_method(obj, name);
  if (obj.is_list()) return list_method(obj, name);
  return Value();
}

Value builtin_global(const std::string& name) {
  if (name == "range") {
    return make_function("range", [](Evaluator&, CallArgs& a) {
      if (a.pos.empty() || a.pos.size() > 3) throw TemplateError("range expected 1 to 3 arguments");
      for (const auto& x : a.pos)
        if (!x.is_int() && !x.is_bool())
          throw TemplateError("'" + type_name(x) + "' object cannot be interpreted as an integer");
      int64_t start = 0, stop, step = 1;
      if (a.pos.size() == 1)
        stop = a.pos[0].as_int();
      else
        start = a.pos[0].as_int(), stop = a.pos[1].as_int();
      if (a.pos.size() == 3) step = a.pos[2].as_int();
      if (step == 0) throw TemplateError("range() arg 3 must not be zero");
      std::vector<Value> out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (static_cast<int64_t>(out.size()) >= kMaxRange) throw TemplateError("range too big");
        out.emplace_back(i);
      }
      return make_list(std::move(out));
    });
  }
  if (name == "namespace" || name == "dict") {
    bool ns = name == "namespace";
    return make_function(name, [ns](Evaluator&, CallArgs& a) {
      auto d = std::make_shared<DictObj>();
      for (const auto& p : a.pos) {
        if (!p.is_dict()) throw TemplateError("namespace() positional argument must be a dict");
        for (const auto& [k, v] : p.dict().items) d->set(k, v);
      }
      for (const auto& [k, v] : a.kw) {
        if (ns && !k.empty() && k[0] == '_')
          throw TemplateError("cannot store underscore-prefixed attribute '" + k +
                              "' on a namespace");
        d->set(k, v);
      }
      if (ns) return Value(Namespace{std::move(d)});
      return Value(std::move(d));
    });
  }
  if (name == "raise_exception") {
    return make_function(name, [](Evaluator&, CallArgs& a) -> Value {
      throw TemplateError(a.pos.empty() ? std::string() : to_str(a.pos[0]), 0, true);
    });
  }
  if (name == "strftime_now") {
    return make_function(name, [](Evaluator&, CallArgs& a) {
      const std::string& f = str_arg(a, 0, "format", "strftime_now");
      std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      char buf[256];
      size_t n = std::strftime(buf, sizeof buf, f.c_str(), &tm);
      return Value(std::string(buf, n));
    });
  }
  return Value();
}

}  // namespace basalt::tok::jinja
