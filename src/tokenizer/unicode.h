// UTF-8 helpers shared by the tokenizers: validation, code point decoding, Unicode
// normalization (utf8proc) and GPT-2's byte <-> printable-character mapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace basalt::tok {

// Index of the first byte that does not start a valid UTF-8 sequence (strict: no overlongs,
// no surrogates, nothing above U+10FFFF), or std::string_view::npos if all of s is valid.
size_t utf8_find_invalid(std::string_view s);
// Throws basalt::Error("[tokenizer] input is not valid UTF-8 at byte N") unless s is valid.
void utf8_require_valid(std::string_view s);
// Length of the (valid) UTF-8 sequence starting with lead byte c; 1 for a stray byte.
inline size_t utf8_len(uint8_t c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}
// Decodes the valid UTF-8 character at s[i]; advances i past it.
char32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, char32_t cp);
// Bytes of a valid prefix of a multi-byte character at the end of s that is not yet
// complete (0..3): what a stream decoder must hold back.
size_t utf8_incomplete_tail(std::string_view s);
// Replaces every byte that is not part of a valid character by U+FFFD.
std::string utf8_sanitize(std::string_view s);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string unicode_normalize(std::string_view s, NormalForm form);
std::string unicode_lowercase(std::string_view s);
bool unicode_is_alnum(char32_t cp);  // letter or number (for added tokens' single_word)

// GPT-2 byte-level alphabet: every byte maps to one printable code point (' ' -> 'Ġ').
const std::string& byte_level_char(uint8_t b);  // UTF-8 of the code point for byte b
// Appends the bytes a byte-level string stands for; false if a character is outside the
// alphabet (then nothing is appended).
bool byte_level_decode(std::string_view s, std::string& out);
std::string byte_level_encode(std::string_view bytes);

}  // namespace basalt::tok
