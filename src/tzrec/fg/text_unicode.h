// Unicode helpers shared by the tokenizers and the text normalizer (internal to src/tzrec/fg/).
//
// Text is processed as code points (std::u32string) because every rule we implement —
// Hugging Face normalizers, pre-tokenizer regexes, CJK splitting — is defined per character,
// not per byte. Character data (general category, case mapping, normalization forms) comes
// from utf8proc so that non-ASCII text ('É', 'Σ', full-width forms) is handled the same way
// as ASCII.
//
// Thread safety: all functions are pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tzrec::fg::text {

// What DecodeUtf8 does with bytes that are not part of a valid UTF-8 sequence (overlong forms,
// surrogates, truncated sequences, stray continuation bytes).
enum class InvalidUtf8 {
  // Each invalid byte becomes U+FFFD (Python's errors="replace", byte by byte).
  kReplace,
  // Each invalid byte b becomes the out-of-range value kRawByteBase + b, which EncodeUtf8 writes
  // back as the byte b: text passes through byte-exact, and no rule ever matches such a value.
  kKeepRaw,
};
constexpr char32_t kRawByteBase = 0x110000;
inline bool IsRawByte(char32_t c) { return c >= kRawByteBase; }

std::u32string DecodeUtf8(std::string_view text, InvalidUtf8 invalid = InvalidUtf8::kReplace);
void AppendUtf8(char32_t c, std::string* out);
std::string EncodeUtf8(std::u32string_view text);

// utf8proc's general category (UTF8PROC_CATEGORY_*; 0 = Cn for unassigned and raw bytes).
int Category(char32_t c);
// Bit (1 << category) for masks over categories.
inline uint32_t CategoryBit(int category) { return 1u << category; }
extern const uint32_t kLetterMask;       // L: Lu Ll Lt Lm Lo
extern const uint32_t kMarkMask;         // M: Mn Mc Me
extern const uint32_t kNumberMask;       // N: Nd Nl No
extern const uint32_t kPunctuationMask;  // P: Pc Pd Ps Pe Pi Pf Po
extern const uint32_t kSymbolMask;       // S: Sm Sc Sk So
extern const uint32_t kSeparatorMask;    // Z: Zs Zl Zp
extern const uint32_t kOtherMask;        // C: Cc Cf Cs Co Cn
inline bool InCategories(char32_t c, uint32_t mask) {
  return (mask & CategoryBit(Category(c))) != 0;
}

// The Unicode White_Space property (what Rust's char::is_whitespace and Oniguruma's \s accept).
bool IsWhiteSpace(char32_t c);
// Oniguruma's \w: letters, marks, decimal digits, connector punctuation.
bool IsWordChar(char32_t c);
// Rust's char::is_alphanumeric, approximated by the general categories L and N.
bool IsAlphanumeric(char32_t c);
// A CJK ideograph as BERT defines "Chinese character" (Hugging Face's ranges, which start the
// Extension E block at U+2B920).
bool IsCjkIdeograph(char32_t c);

// Simple (one-to-one) case mappings of UnicodeData ('ß' has none to upper case and is kept).
// AppendLowerFull adds the one unconditional multi-character lowercase mapping
// (U+0130 'İ' -> "i̇"), which Rust's char::to_lowercase applies.
char32_t ToLower(char32_t c);
char32_t ToUpper(char32_t c);
void AppendLowerFull(char32_t c, std::u32string* out);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// Unicode normalization of valid code points (raw bytes, if any, are kept in place).
std::u32string Normalize(std::u32string_view text, NormalForm form);

}  // namespace tzrec::fg::text
