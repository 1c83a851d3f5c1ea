// Normalizers of HF tokenizers: NFC/NFD/NFKC/NFKD, Lowercase, Prepend, Replace, Strip,
// Sequence. Each rewrites one piece of text (a split between added tokens).
#include <memory>

#include "core/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace basalt::tok {

namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm f) : form_(f) {}
  void normalize(std::string& s) const override { s = unicode_normalize(s, form_); }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::string& s) const override { s = unicode_lowercase(s); }
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prepend_(std::move(p)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prepend_);  // HF prepends only to non-empty text
  }

 private:
  std::string prepend_;
};

// Replaces a literal string or every match of a regex by `content`.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::unique_ptr<Regex> re, std::string content)
      : literal_(std::move(literal)), re_(std::move(re)), content_(std::move(content)) {}
  void normalize(std::string& s) const override {
    std::string out;
    size_t prev = 0;
    if (re_) {
      for (auto [b, e] : re_->find_all(s)) {
        out.append(s, prev, b - prev);
        out += content_;
        prev = e;
      }
    } else {
      if (literal_.empty()) return;
      for (size_t p = s.find(literal_); p != std::string::npos; p = s.find(literal_, prev)) {
        out.append(s, prev, p - prev);
        out += content_;
        prev = p + literal_.size();
      }
    }
    out.append(s, prev, std::string::npos);
    s = std::move(out);
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> re_;
  std::string content_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    size_t b = 0, e = s.size();
    if (left_)
      while (b < e && ws(s[b])) ++b;
    if (right_)
      while (e > b && ws(s[e - 1])) --e;
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void normalize(std::string& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> normalizer_nfc() {
  return std::make_unique<UnicodeNormalizer>(NormalForm::NFC);
}

std::unique_ptr<Normalizer> normalizer_from_json(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  std::string type = j.value("type", "");
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::NFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(j.at("prepend"));
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(j.value("strip_left", true),
                                             j.value("strip_right", true));
  if (type == "Replace") {
    const auto& pat = j.at("pattern");
    std::string content = j.at("content");
    if (pat.contains("Regex"))
      return std::make_unique<ReplaceNormalizer>("", std::make_unique<Regex>(pat["Regex"]),
                                                 content);
    return std::make_unique<ReplaceNormalizer>(pat.at("String"), nullptr, content);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& n : j.at("normalizers"))
      if (auto p = normalizer_from_json(n)) parts.push_back(std::move(p));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  fail("[tokenizer] tokenizer.json: unsupported normalizer type '{}'", type);
}

}  // namespace basalt::tok
