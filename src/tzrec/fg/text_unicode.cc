#include "tzrec/fg/text_unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "tzrec/common/error.h"

namespace tzrec::fg::text {

namespace {

constexpr uint32_t Bits(std::initializer_list<int> categories) {
  uint32_t mask = 0;
  for (int c : categories) mask |= 1u << c;
  return mask;
}

}  // namespace

const uint32_t kLetterMask = Bits({UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT,
                                   UTF8PROC_CATEGORY_LM, UTF8PROC_CATEGORY_LO});
const uint32_t kMarkMask = Bits({UTF8PROC_CATEGORY_MN, UTF8PROC_CATEGORY_MC, UTF8PROC_CATEGORY_ME});
const uint32_t kNumberMask =
    Bits({UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NL, UTF8PROC_CATEGORY_NO});
const uint32_t kPunctuationMask =
    Bits({UTF8PROC_CATEGORY_PC, UTF8PROC_CATEGORY_PD, UTF8PROC_CATEGORY_PS, UTF8PROC_CATEGORY_PE,
          UTF8PROC_CATEGORY_PI, UTF8PROC_CATEGORY_PF, UTF8PROC_CATEGORY_PO});
const uint32_t kSymbolMask =
    Bits({UTF8PROC_CATEGORY_SM, UTF8PROC_CATEGORY_SC, UTF8PROC_CATEGORY_SK, UTF8PROC_CATEGORY_SO});
const uint32_t kSeparatorMask =
    Bits({UTF8PROC_CATEGORY_ZS, UTF8PROC_CATEGORY_ZL, UTF8PROC_CATEGORY_ZP});
const uint32_t kOtherMask = Bits({UTF8PROC_CATEGORY_CC, UTF8PROC_CATEGORY_CF, UTF8PROC_CATEGORY_CS,
                                  UTF8PROC_CATEGORY_CO, UTF8PROC_CATEGORY_CN});

std::u32string DecodeUtf8(std::string_view text, InvalidUtf8 invalid) {
  std::u32string out;
  out.reserve(text.size());
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    unsigned char b = bytes[i];
    if (b < 0x80) {  // ASCII fast path
      out.push_back(b);
      ++i;
      continue;
    }
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n =
        utf8proc_iterate(bytes + i, static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n > 0) {
      out.push_back(static_cast<char32_t>(cp));
      i += static_cast<size_t>(n);
    } else {
      out.push_back(invalid == InvalidUtf8::kReplace ? char32_t{0xFFFD} : kRawByteBase + b);
      ++i;
    }
  }
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < kRawByteBase) {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(c - kRawByteBase));
  }
}

std::string EncodeUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) AppendUtf8(c, &out);
  return out;
}

int Category(char32_t c) {
  if (c >= kRawByteBase) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool IsWhiteSpace(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool IsWordChar(char32_t c) {
  if (c < 0x80) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  static const uint32_t kWordMask =
      kLetterMask | kMarkMask | Bits({UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_PC});
  return InCategories(c, kWordMask);
}

bool IsAlphanumeric(char32_t c) {
  if (c < 0x80) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  }
  return InCategories(c, kLetterMask | kNumberMask);
}

bool IsCjkIdeograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

char32_t ToLower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= kRawByteBase) return c;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

char32_t ToUpper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  // utf8proc maps 'ß' to 'ẞ' (U+1E9E), which UnicodeData's simple mapping does not: keep it.
  if (c >= kRawByteBase || c == 0xDF) return c;
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}

void AppendLowerFull(char32_t c, std::u32string* out) {
  if (c == 0x130) {  // SpecialCasing.txt: the only unconditional one-to-many lowercase mapping
    out->push_back('i');
    out->push_back(0x307);
    return;
  }
  out->push_back(ToLower(c));
}

namespace {

std::u32string NormalizeValid(std::u32string_view text, NormalForm form) {
  if (text.empty()) return {};
  utf8proc_option_t options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc:
      options = static_cast<utf8proc_option_t>(options | UTF8PROC_COMPOSE);
      break;
    case NormalForm::kNfd:
      options = static_cast<utf8proc_option_t>(options | UTF8PROC_DECOMPOSE);
      break;
    case NormalForm::kNfkc:
      options = static_cast<utf8proc_option_t>(options | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
      break;
    case NormalForm::kNfkd:
      options = static_cast<utf8proc_option_t>(options | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
      break;
  }
  std::string utf8 = EncodeUtf8(text);
  utf8proc_uint8_t* mapped = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                                    static_cast<utf8proc_ssize_t>(utf8.size()), &mapped, options);
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(mapped, &std::free);
  // Input is valid UTF-8 by construction, so utf8proc cannot fail short of running out of
  // memory.
  TZREC_CHECK(n >= 0, "utf8proc_map: ", utf8proc_errmsg(n));
  return DecodeUtf8(
      std::string_view(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n)));
}

}  // namespace

std::u32string Normalize(std::u32string_view text, NormalForm form) {
  bool ascii = true;
  bool raw = false;
  for (char32_t c : text) {
    ascii = ascii && c < 0x80;
    raw = raw || IsRawByte(c);
  }
  if (ascii) return std::u32string(text);  // every form leaves ASCII unchanged
  if (!raw) return NormalizeValid(text, form);
  std::u32string out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || IsRawByte(text[i])) {
      out += NormalizeValid(text.substr(start, i - start), form);
      if (i < text.size()) out.push_back(text[i]);
      start = i + 1;
    }
  }
  return out;
}

}  // namespace tzrec::fg::text
