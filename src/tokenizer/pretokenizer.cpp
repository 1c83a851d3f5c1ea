// Pre-tokenizers of HF tokenizers: Split (PCRE2 regex or literal, five delimiter behaviours,
// invert), ByteLevel (GPT-2 regex + byte -> printable-character mapping), Metaspace, Sequence.
#include <functional>
#include <memory>

#include "core/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace basalt::tok {

// GPT-2's pattern as HF ByteLevel writes it.
const char* const kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Span {
  size_t b, e;
  bool is_match;
};

// Applies a delimiter behaviour to the alternating match / non-match spans of one piece
// (HF NormalizedString::split).
std::vector<std::pair<size_t, size_t>> split_spans(std::vector<Span> spans, SplitBehavior bh) {
  std::vector<std::pair<size_t, size_t>> out;
  switch (bh) {
    case SplitBehavior::Isolated:
      for (auto& s : spans) out.emplace_back(s.b, s.e);
      break;
    case SplitBehavior::Removed:
      for (auto& s : spans)
        if (!s.is_match) out.emplace_back(s.b, s.e);
      break;
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (auto& s : spans) {
        if (s.is_match && !prev_match && !out.empty())
          out.back().second = s.e;
        else
          out.emplace_back(s.b, s.e);
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev_match = false;
      for (auto& s : spans) {
        if (prev_match && !s.is_match && !out.empty())
          out.back().second = s.e;
        else
          out.emplace_back(s.b, s.e);
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::Contiguous: {
      bool prev_match = false;
      for (auto& s : spans) {
        if (s.is_match == prev_match && !out.empty())
          out.back().second = s.e;
        else
          out.emplace_back(s.b, s.e);
        prev_match = s.is_match;
      }
      break;
    }
  }
  return out;
}

// Matches and the text between them as spans covering [0, size).
std::vector<Span> to_spans(const std::vector<std::pair<size_t, size_t>>& matches, size_t size,
                           bool invert) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < size) spans.push_back({prev, size, invert});
  return spans;
}

void split_pieces(
    std::vector<PreToken>& pieces,
    const std::function<std::vector<std::pair<size_t, size_t>>(const PreToken&)>& split_one) {
  std::vector<PreToken> out;
  out.reserve(pieces.size());
  for (auto& p : pieces) {
    bool first = true;
    for (auto [b, e] : split_one(p)) {
      if (e <= b) continue;  // HF drops empty splits
      out.push_back({p.text.substr(b, e - b), p.at_start && first && b == 0});
      first = false;
    }
  }
  pieces = std::move(out);
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> re, std::string literal, SplitBehavior bh, bool invert)
      : re_(std::move(re)), literal_(std::move(literal)), bh_(bh), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_pieces(pieces, [&](const PreToken& p) {
      std::vector<std::pair<size_t, size_t>> m;
      if (re_) {
        m = re_->find_all(p.text);
      } else if (!literal_.empty()) {
        for (size_t at = p.text.find(literal_); at != std::string::npos;
             at = p.text.find(literal_, at + literal_.size()))
          m.emplace_back(at, at + literal_.size());
      }
      return split_spans(to_spans(m, p.text.size(), invert_), bh_);
    });
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string literal_;
  SplitBehavior bh_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) re_ = std::make_unique<Regex>(kGpt2Regex);
  }
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_)
      for (auto& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text = " " + p.text;
    if (re_)
      split_pieces(pieces, [&](const PreToken& p) {
        return split_spans(to_spans(re_->find_all(p.text), p.text.size(), false),
                           SplitBehavior::Isolated);
      });
    for (auto& p : pieces) p.text = byte_level_encode(p.text);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;
};

enum class PrependScheme { Always, First, Never };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : repl_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (auto& p : pieces) {
      std::string t;
      for (char c : p.text) c == ' ' ? t += repl_ : t += c;
      bool prepend =
          scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && p.at_start);
      if (prepend && t.compare(0, repl_.size(), repl_) != 0) t.insert(0, repl_);
      p.text = std::move(t);
    }
    if (split_)
      split_pieces(pieces, [&](const PreToken& p) {
        std::vector<std::pair<size_t, size_t>> m;
        for (size_t at = p.text.find(repl_); at != std::string::npos;
             at = p.text.find(repl_, at + repl_.size()))
          m.emplace_back(at, at + repl_.size());
        return split_spans(to_spans(m, p.text.size(), false), SplitBehavior::MergedWithNext);
      });
  }

 private:
  std::string repl_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

SplitBehavior behavior_from_string(const std::string& s) {
  if (s == "Removed") return SplitBehavior::Removed;
  if (s == "Isolated") return SplitBehavior::Isolated;
  if (s == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (s == "Contiguous") return SplitBehavior::Contiguous;
  fail("[tokenizer] tokenizer.json: unsupported Split behavior '{}'", s);
}

}  // namespace

std::unique_ptr<PreTokenizer> pre_tokenizer_split_isolated(const std::string& regex) {
  return std::make_unique<SplitPreTokenizer>(std::make_unique<Regex>(regex), "",
                                             SplitBehavior::Isolated, false);
}
std::unique_ptr<PreTokenizer> pre_tokenizer_byte_level(bool add_prefix_space, bool use_regex) {
  return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, use_regex);
}
std::unique_ptr<PreTokenizer> pre_tokenizer_sequence(
    std::vector<std::unique_ptr<PreTokenizer>> parts) {
  return std::make_unique<SequencePreTokenizer>(std::move(parts));
}

std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  std::string type = j.value("type", "");
  if (type == "Split") {
    const auto& pat = j.at("pattern");
    SplitBehavior bh = behavior_from_string(j.value("behavior", "Isolated"));
    bool invert = j.value("invert", false);
    if (pat.contains("Regex"))
      return std::make_unique<SplitPreTokenizer>(std::make_unique<Regex>(pat["Regex"]), "", bh,
                                                 invert);
    return std::make_unique<SplitPreTokenizer>(nullptr, pat.at("String"), bh, invert);
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(j.value("add_prefix_space", true),
                                                   j.value("use_regex", true));
  if (type == "Metaspace") {
    PrependScheme scheme = PrependScheme::Always;
    if (j.contains("prepend_scheme")) {
      std::string s = j["prepend_scheme"];
      scheme = s == "first"   ? PrependScheme::First
               : s == "never" ? PrependScheme::Never
                              : PrependScheme::Always;
    } else if (j.contains("add_prefix_space") && !j["add_prefix_space"].get<bool>()) {
      scheme = PrependScheme::Never;
    }
    return std::make_unique<MetaspacePreTokenizer>(j.value("replacement", "\u2581"), scheme,
                                                   j.value("split", true));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& p : j.at("pretokenizers"))
      if (auto q = pre_tokenizer_from_json(p)) parts.push_back(std::move(q));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  fail("[tokenizer] tokenizer.json: unsupported pre-tokenizer type '{}'", type);
}

}  // namespace basalt::tok
