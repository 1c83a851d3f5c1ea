// Decoders of HF tokenizers (ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace,
// Sequence) and the post-processors that add special tokens (TemplateProcessing, ByteLevel,
// Sequence).
//
// One deliberate difference from HF: ByteFallback (and ByteLevel) keep raw bytes even when
// they are not valid UTF-8 on their own (HF turns them into U+FFFD). decode() returns bytes
// and StreamDecoder needs a partial character to stay partial until the next token.
#include <memory>

#include "core/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/unicode.h"

namespace basalt::tok {

namespace {

class ByteLevelDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::string bytes;
      // A token with characters outside the byte alphabet (an added token like "\n\n")
      // stands for its own UTF-8 bytes, as in HF.
      if (byte_level_decode(t, bytes)) t = std::move(bytes);
    }
  }
};

// "<0x0A>" -> byte 0x0A; -1 if t is not a byte token.
int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class ByteFallbackDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      int b = parse_byte_token(t);
      if (b >= 0) t = std::string(1, static_cast<char>(b));
    }
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string all;
    for (auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing occurrences of `content` per token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens) const override {
    if (content_.empty()) return;
    for (auto& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && t.compare(b, content_.size(), content_) == 0; ++k)
        b += content_.size();
      for (size_t k = 0; k < stop_ && e >= b + content_.size() &&
                         t.compare(e - content_.size(), content_.size(), content_) == 0;
           ++k)
        e -= content_.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode(std::vector<std::string>& tokens) const override {
    if (pattern_.empty()) return;
    for (auto& t : tokens) {
      std::string out;
      size_t prev = 0;
      for (size_t p = t.find(pattern_); p != std::string::npos; p = t.find(pattern_, prev)) {
        out.append(t, prev, p - prev);
        out += content_;
        prev = p + pattern_.size();
      }
      out.append(t, prev, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::string pattern_, content_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : repl_(std::move(replacement)), strip_first_(strip_first) {}
  // As HF: in the first token every replacement character is dropped (not only a leading
  // one) unless the prepend scheme is "never"; elsewhere it becomes a space.
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t p = 0; p < t.size();) {
        if (t.compare(p, repl_.size(), repl_) == 0) {
          if (!(i == 0 && strip_first_)) out += ' ';
          p += repl_.size();
        } else {
          out += t[p++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string repl_;
  bool strip_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::unique_ptr<Decoder> decoder_byte_level() {
  return std::make_unique<ByteLevelDecoder>();
}

std::unique_ptr<Decoder> decoder_from_json(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  std::string type = j.value("type", "");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(j.at("content"), j.value("start", 0), j.value("stop", 0));
  if (type == "Replace") {
    const auto& pat = j.at("pattern");
    if (!pat.contains("String"))
      fail("[tokenizer] tokenizer.json: Replace decoder with a regex pattern is not supported");
    return std::make_unique<ReplaceDecoder>(pat["String"], j.at("content"));
  }
  if (type == "Metaspace") {
    bool strip = true;
    if (j.contains("prepend_scheme"))
      strip = j["prepend_scheme"].get<std::string>() != "never";
    else if (j.contains("add_prefix_space"))
      strip = j["add_prefix_space"].get<bool>();
    return std::make_unique<MetaspaceDecoder>(j.value("replacement", "\u2581"), strip);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& d : j.at("decoders"))
      if (auto p = decoder_from_json(d)) parts.push_back(std::move(p));
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  fail("[tokenizer] tokenizer.json: unsupported decoder type '{}'", type);
}

PostProcessor post_processor_from_json(const nlohmann::json& j) {
  PostProcessor pp;
  if (j.is_null()) return pp;
  std::string type = j.value("type", "");
  if (type == "ByteLevel") return pp;  // only adjusts offsets
  if (type == "Sequence") {
    for (const auto& p : j.at("processors")) {
      PostProcessor q = post_processor_from_json(p);
      pp.prefix.insert(pp.prefix.end(), q.prefix.begin(), q.prefix.end());
      pp.suffix.insert(pp.suffix.begin(), q.suffix.begin(), q.suffix.end());
      pp.present |= q.present;
    }
    return pp;
  }
  if (type == "TemplateProcessing") {
    const auto& specials = j.value("special_tokens", nlohmann::json::object());
    bool seen_seq = false;
    for (const auto& item : j.at("single")) {
      if (item.contains("Sequence")) {
        seen_seq = true;
        continue;
      }
      std::string name = item.at("SpecialToken").at("id");
      if (!specials.contains(name))
        fail("[tokenizer] tokenizer.json: TemplateProcessing names unknown token '{}'", name);
      for (const auto& id : specials[name].at("ids"))
        (seen_seq ? pp.suffix : pp.prefix).push_back(id.get<int32_t>());
    }
    pp.present = true;
    return pp;
  }
  fail("[tokenizer] tokenizer.json: unsupported post-processor type '{}'", type);
}

}  // namespace basalt::tok
