// Lexer: template text -> tokens, applying jinja2's whitespace control (`-`, `+`,
// trim_blocks, lstrip_blocks) so that the parser sees text exactly as it will be printed.
#include <cctype>
#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace basalt::tok::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.rstrip() / lstrip() of whitespace.
void rstrip_ws(std::string& s) {
  while (!s.empty() && is_space(s.back())) s.pop_back();
}

class Lexer {
 public:
  Lexer(std::string src, bool trim_blocks, bool lstrip_blocks)
      : src_(std::move(src)), trim_(trim_blocks), lstrip_(lstrip_blocks) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t open = find_open(pos_);
      std::string text = src_.substr(pos_, open - pos_);
      if (open == src_.size()) {
        emit_text(std::move(text), pos_);
        break;
      }
      char kind = src_[open + 1];  // '{', '%' or '#'
      char mod = open + 2 < src_.size() ? src_[open + 2] : 0;
      if (mod == '-') {
        rstrip_ws(text);
      } else if (kind != '{' && lstrip_ && mod != '+') {
        lstrip_line(text, pos_);
      }
      emit_text(std::move(text), pos_);
      advance_to(open);
      pos_ = open + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        comment();
      } else if (kind == '%' && raw_block()) {
        // handled
      } else {
        tag(kind);
      }
    }
    advance_to(src_.size());
    toks_.push_back({Tok::End, "", line_});
    return std::move(toks_);
  }

 private:
  std::string src_;
  bool trim_, lstrip_;
  size_t pos_ = 0;
  size_t line_pos_ = 0;  // position up to which line_ has been counted
  int line_ = 1;
  bool strip_next_ = false;  // the previous tag ended with '-'
  std::vector<Token> toks_;

  void advance_to(size_t p) {
    for (; line_pos_ < p && line_pos_ < src_.size(); ++line_pos_)
      if (src_[line_pos_] == '\n') ++line_;
  }

  [[noreturn]] void error(const std::string& msg) {
    advance_to(pos_);
    throw TemplateError(msg, line_);
  }

  size_t find_open(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return src_.size();
  }

  // lstrip_blocks: spaces and tabs between the start of the line and a block tag go.
  void lstrip_line(std::string& text, size_t text_start) {
    size_t nl = text.rfind('\n');
    size_t from;
    if (nl != std::string::npos)
      from = nl + 1;
    else if (text_start == 0 || src_[text_start - 1] == '\n')
      from = 0;
    else
      return;
    for (size_t i = from; i < text.size(); ++i)
      if (text[i] != ' ' && text[i] != '\t') return;
    text.resize(from);
  }

  void emit_text(std::string text, size_t text_start) {
    if (strip_next_) {
      size_t i = 0;
      while (i < text.size() && is_space(text[i])) ++i;
      text.erase(0, i);
      strip_next_ = false;
    }
    advance_to(text_start);
    if (!text.empty()) toks_.push_back({Tok::Text, std::move(text), line_});
  }

  // After a block or comment tag: '-' strips all following whitespace; otherwise trim_blocks
  // removes one newline.
  void after_tag(char mod, bool is_block) {
    if (mod == '-') {
      strip_next_ = true;
    } else if (is_block && trim_ && mod != '+') {
      if (pos_ < src_.size() && src_[pos_] == '\n') ++pos_;
    }
  }

  void comment() {
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) error("missing end of comment tag");
    char mod = (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) ? src_[end - 1] : 0;
    pos_ = end + 2;
    after_tag(mod, true);
  }

  // {% raw %}...{% endraw %}: the body is text, verbatim.
  bool raw_block() {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    char mod = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) mod = src_[p++];
    if (src_.compare(p, 2, "%}") != 0) return false;
    pos_ = p + 2;
    after_tag(mod, true);
    // find {% endraw %}
    for (size_t q = src_.find("{%", pos_); q != std::string::npos; q = src_.find("{%", q + 2)) {
      size_t r = q + 2;
      char m1 = (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) ? src_[r++] : 0;
      while (r < src_.size() && is_space(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && is_space(src_[r])) ++r;
      char m2 = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) m2 = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos_, q - pos_);
      if (m1 == '-')
        rstrip_ws(text);
      else if (lstrip_ && m1 != '+')
        lstrip_line(text, pos_);
      emit_text(std::move(text), pos_);
      pos_ = r + 2;
      after_tag(m2, true);
      return true;
    }
    error("missing endraw for raw block");
  }

  void tag(char kind) {
    advance_to(pos_);
    toks_.push_back({kind == '{' ? Tok::OutputBegin : Tok::BlockBegin, "", line_});
    int depth = 0;  // open ( [ { inside the tag: "}}" inside a dict literal is not the end
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size())
        error(kind == '{' ? "unexpected end of template, expected '}}'"
                          : "unexpected end of template, expected '%}'");
      advance_to(pos_);
      char c = src_[pos_];
      // End of tag, possibly with a whitespace modifier.
      char mod = 0;
      size_t p = pos_;
      if ((c == '-' || c == '+') && depth == 0) mod = c, ++p;
      if (depth == 0 && p + 1 < src_.size()) {
        if (kind == '{' && src_[p] == '}' && src_[p + 1] == '}') {
          if (mod == '+') error("unexpected '+'");
          pos_ = p + 2;
          toks_.push_back({Tok::OutputEnd, "", line_});
          after_tag(mod, false);
          return;
        }
        if (kind == '%' && src_[p] == '%' && src_[p + 1] == '}') {
          pos_ = p + 2;
          toks_.push_back({Tok::BlockEnd, "", line_});
          after_tag(mod, true);
          return;
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t s = pos_;
        while (pos_ < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
          ++pos_;
        toks_.push_back({Tok::Name, src_.substr(s, pos_ - s), line_});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number();
      } else if (c == '\'' || c == '"') {
        string_literal(c);
      } else {
        static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* t : two)
          if (src_.compare(pos_, 2, t) == 0) op = t;
        if (std::string_view("+-*/%~=()[]{},.:|<>!").find(c) == std::string_view::npos || op == "!")
          error(std::string("unexpected char '") + c + "'");
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        pos_ += op.size();
        toks_.push_back({Tok::Op, op, line_});
      }
    }
  }

  void number() {
    size_t s = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (pos_ < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
        ++pos_;
    };
    digits();
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        pos_ = p;
        digits();
      }
    }
    std::string text;
    for (size_t i = s; i < pos_; ++i)
      if (src_[i] != '_') text += src_[i];
    toks_.push_back({is_float ? Tok::Float : Tok::Int, text, line_});
  }

  void string_literal(char q) {
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) error("unterminated string");
      char c = src_[pos_++];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= src_.size()) error("unterminated string");
      char e = src_[pos_++];
      auto hex = [&](int n) {
        if (pos_ + n > src_.size()) error("truncated escape in string");
        uint32_t cp = static_cast<uint32_t>(std::stoul(src_.substr(pos_, n), nullptr, 16));
        pos_ += n;
        utf8_append(out, cp);
      };
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case 'a':
          out += '\a';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        default:  // Python keeps unknown escapes as written
          out += '\\';
          out += e;
      }
    }
    toks_.push_back({Tok::String, std::move(out), line_});
  }
};

}  // namespace

std::vector<Token> lex(const std::string& source, bool trim_blocks, bool lstrip_blocks) {
  // jinja2 normalizes newlines to "\n" and, with keep_trailing_newline=False, drops one
  // trailing newline of the source.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), trim_blocks, lstrip_blocks).run();
}

}  // namespace basalt::tok::jinja
