#include "server/json_scanner.h"

#include <string_view>

namespace basalt::server {
namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool valid_number(std::string_view s) {
  size_t i = 0, n = s.size();
  if (i < n && s[i] == '-') ++i;
  if (i >= n || !is_digit(s[i])) return false;
  if (s[i] == '0') {
    ++i;
  } else {
    while (i < n && is_digit(s[i])) ++i;
  }
  if (i < n && s[i] == '.') {
    ++i;
    if (i >= n || !is_digit(s[i])) return false;
    while (i < n && is_digit(s[i])) ++i;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    if (i >= n || !is_digit(s[i])) return false;
    while (i < n && is_digit(s[i])) ++i;
  }
  return i == n;
}

}  // namespace

void JsonScanner::reset() {
  stack_.clear();
  st_ = St::Value;
  tok_.clear();
}

void JsonScanner::reset_in_object_after_value() {
  stack_.assign(1, '{');
  st_ = St::After;
  tok_.clear();
}

bool JsonScanner::complete_at_end() const {
  return st_ == St::End || (st_ == St::Num && stack_.empty() && valid_number(tok_));
}

JsonScanner::Step JsonScanner::value_end() {
  if (stack_.empty()) {
    st_ = St::End;
    return Step::Done;
  }
  st_ = St::After;
  return Step::More;
}

JsonScanner::Step JsonScanner::feed(char c) {
  switch (st_) {
    case St::Value:
      if (is_ws(c)) return Step::More;
      if (c == '{') {
        stack_.push_back('{');
        st_ = St::ObjFirst;
      } else if (c == '[') {
        stack_.push_back('[');
        st_ = St::ArrFirst;
      } else if (c == '"') {
        key_ = false;
        st_ = St::Str;
      } else if (c == '-' || is_digit(c)) {
        tok_.assign(1, c);
        st_ = St::Num;
      } else if (c == 't' || c == 'f' || c == 'n') {
        tok_.assign(1, c);
        st_ = St::Lit;
      } else {
        return Step::Error;
      }
      return Step::More;
    case St::ObjFirst:
    case St::ObjKey:
      if (is_ws(c)) return Step::More;
      if (c == '}' && st_ == St::ObjFirst) {
        stack_.pop_back();
        return value_end();
      }
      if (c != '"') return Step::Error;
      key_ = true;
      st_ = St::Str;
      return Step::More;
    case St::Colon:
      if (is_ws(c)) return Step::More;
      if (c != ':') return Step::Error;
      st_ = St::Value;
      return Step::More;
    case St::After:
      if (is_ws(c)) return Step::More;
      if (c == ',') {
        st_ = stack_.back() == '{' ? St::ObjKey : St::Value;
        return Step::More;
      }
      if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
        stack_.pop_back();
        return value_end();
      }
      return Step::Error;
    case St::ArrFirst:
      if (is_ws(c)) return Step::More;
      if (c == ']') {
        stack_.pop_back();
        return value_end();
      }
      st_ = St::Value;
      return feed(c);
    case St::Str:
      if (c == '\\') {
        st_ = St::Esc;
      } else if (c == '"') {
        if (key_) {
          st_ = St::Colon;
          return Step::More;
        }
        return value_end();
      }
      // Raw control characters are invalid JSON; the caller escapes them (a lenient repair).
      return Step::More;
    case St::Esc:
      if (c == 'u') {
        hex_ = 0;
        st_ = St::Hex;
        return Step::More;
      }
      if (std::string_view("\"\\/bfnrt").find(c) == std::string_view::npos) return Step::Error;
      st_ = St::Str;
      return Step::More;
    case St::Hex:
      if (!is_hex(c)) return Step::Error;
      if (++hex_ == 4) st_ = St::Str;
      return Step::More;
    case St::Num: {
      if (is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        tok_ += c;
        return Step::More;
      }
      if (!valid_number(tok_)) return Step::Error;
      if (stack_.empty()) {
        st_ = St::End;
        return Step::DoneBefore;
      }
      st_ = St::After;
      return feed(c);
    }
    case St::Lit: {
      tok_ += c;
      for (std::string_view lit : {"true", "false", "null"}) {
        if (lit == tok_) return value_end();
        if (lit.starts_with(tok_)) return Step::More;
      }
      return Step::Error;
    }
    case St::End:
      return Step::Error;
  }
  return Step::Error;
}

}  // namespace basalt::server
