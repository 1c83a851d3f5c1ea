#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace basalt::tok {

namespace {

// Length of the valid sequence at s[i], or 0 if the bytes there are not valid UTF-8.
size_t utf8_valid_len(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + i;
  size_t avail = s.size() - i;
  uint8_t c = p[0];
  if (c < 0x80) return 1;
  auto cont = [&](size_t k) { return k < avail && (p[k] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && p[1] < 0xA0) return 0;   // overlong
    if (c == 0xED && p[1] >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && p[1] < 0x90) return 0;   // overlong
    if (c == 0xF4 && p[1] >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

size_t utf8_find_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = utf8_valid_len(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

void utf8_require_valid(std::string_view s) {
  size_t bad = utf8_find_invalid(s);
  if (bad != std::string_view::npos) fail("[tokenizer] input is not valid UTF-8 at byte {}", bad);
}

char32_t utf8_next(std::string_view s, size_t& i) {
  auto c = static_cast<uint8_t>(s[i]);
  size_t n = utf8_len(c);
  if (i + n > s.size()) n = 1;
  char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t utf8_incomplete_tail(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    auto c = static_cast<uint8_t>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation: keep looking for the lead
    size_t need = utf8_len(c);
    if (need <= back) return 0;  // complete (or a stray byte)
    // Must be a valid prefix: check with the bytes present padded by a continuation.
    std::string probe(s.substr(s.size() - back));
    while (probe.size() < need) probe += '\x80';
    // 0x80 padding can make E0/F0 overlong checks fail for valid prefixes; use 0xBF too.
    std::string probe2(s.substr(s.size() - back));
    while (probe2.size() < need) probe2 += '\xBF';
    return utf8_valid_len(probe, 0) == need || utf8_valid_len(probe2, 0) == need ? back : 0;
  }
  return 0;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t n = utf8_valid_len(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string unicode_normalize(std::string_view s, NormalForm form) {
  bool ascii = true;
  for (char c : s) ascii &= static_cast<uint8_t>(c) < 0x80;
  if (ascii) return std::string(s);  // ASCII is invariant under every normal form
  int opts = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC:
      opts |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::NFD:
      opts |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::NFKC:
      opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::NFKD:
      opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &out,
                                    static_cast<utf8proc_option_t>(opts));
  if (n < 0) fail("[tokenizer] unicode normalization failed: {}", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> hold(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

std::string unicode_lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) utf8_append(out, utf8proc_tolower(static_cast<int32_t>(utf8_next(s, i))));
  return out;
}

bool unicode_is_alnum(char32_t cp) {
  auto cat = utf8proc_category(static_cast<int32_t>(cp));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

namespace {

struct ByteLevelTables {
  std::array<std::string, 256> to_char;
  std::array<int16_t, 512> to_byte;  // code point -> byte, -1 outside the alphabet
  ByteLevelTables() {
    to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char32_t cp = printable ? char32_t(b) : char32_t(256 + extra++);
      utf8_append(to_char[b], cp);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables t;
  return t;
}

}  // namespace

const std::string& byte_level_char(uint8_t b) {
  return byte_level_tables().to_char[b];
}

bool byte_level_decode(std::string_view s, std::string& out) {
  const auto& t = byte_level_tables();
  size_t start = out.size();
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = utf8_next(s, i);
    if (cp >= t.to_byte.size() || t.to_byte[cp] < 0) {
      out.resize(start);
      return false;
    }
    out += static_cast<char>(t.to_byte[cp]);
  }
  return true;
}

std::string byte_level_encode(std::string_view bytes) {
  const auto& t = byte_level_tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.to_char[static_cast<uint8_t>(c)];
  return out;
}

}  // namespace basalt::tok
