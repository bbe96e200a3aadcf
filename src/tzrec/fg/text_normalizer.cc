// TextNormalizer: TorchEasyRec's text_normalizer for tokenize_feature.
//
// Steps, in this fixed order (each only when its option bit is set):
//   1. kTextSbc2Dbc      full-width forms U+FF01..U+FF5E -> ASCII, ideographic space U+3000 -> ' '
//   2. kTextCht2Chs      traditional -> simplified Chinese (OpenCC t2s.json, phrase-aware)
//   3. kTextLower2Upper  to upper case; then kTextUpper2Lower to lower case (so with both set
//                        the text ends up lower case). Simple Unicode case mappings (utf8proc):
//                        'é' <-> 'É', 'σ' <-> 'Σ'; characters without a one-to-one mapping
//                        ('ß') are kept.
//   4. kTextFilter       removes the stop characters
//   5. kTextRemoveSpace  removes whitespace (Unicode White_Space: ' ', \t, \n, U+3000, ...)
//   6. kTextSplitChars   puts single spaces around each CJK ideograph: "中国a" -> "中 国 a",
//                        "我爱NLP模型" -> "我 爱 NLP 模 型". Runs of other characters stay
//                        together, existing spaces are kept and never doubled.
// Full-width conversion runs first so that full-width letters and punctuation are then cased
// and filtered like their ASCII forms; spaces are removed before CJK splitting so that the
// separators it inserts survive.
//
// Stop characters: with an empty stop_char_file, every punctuation or symbol character
// (general categories P* and S*) that is ASCII or lies in Latin-1 Supplement, General
// Punctuation (U+2000-U+206F), CJK Symbols and Punctuation (U+3000-U+303F), CJK
// Compatibility/Small Form Variants (U+FE30-U+FE6F), Vertical Forms (U+FE10-U+FE1F) or
// Halfwidth and Fullwidth Forms (U+FF00-U+FFEF): ASCII !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~,
// full-width ！，。？：；、“”‘’（）《》【】「」『』…—～￥ and the like. Letters, digits, spaces,
// CJK ideographs and emoji are kept. A stop_char_file is UTF-8 with one character per line;
// every character on a line is a stop character, except that whitespace counts only on lines
// holding nothing else (so "，  " with a stray trailing space does not make ' ' a stop
// character, while a line " " does).
//
// Invalid UTF-8 bytes pass through unchanged: they are kept as raw bytes (text::kKeepRaw), no
// step changes them, and OpenCC only ever sees the valid runs between them.
//
// Thread safety: immutable after Create. The OpenCC converter is shared by all normalizers
// and threads without a lock: its conversion path is const and every dictionary lookup uses a
// call-local marisa agent (OpenCC 1.1 source), which tokenizer_test's concurrency test runs.
#include <opencc/opencc.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/fg/text_unicode.h"
#include "tzrec/fg/tokenizer.h"

namespace tzrec::fg {

namespace {

constexpr uint32_t kKnownOptions = kTextLower2Upper | kTextUpper2Lower | kTextSbc2Dbc |
                                   kTextCht2Chs | kTextFilter | kTextSplitChars | kTextRemoveSpace;

bool InDefaultStopBlocks(char32_t c) {
  return c < 0x80 || (c >= 0xA0 && c <= 0xFF) || (c >= 0x2000 && c <= 0x206F) ||
         (c >= 0x3000 && c <= 0x303F) || (c >= 0xFE10 && c <= 0xFE1F) ||
         (c >= 0xFE30 && c <= 0xFE6F) || (c >= 0xFF00 && c <= 0xFFEF);
}

bool IsDefaultStopChar(char32_t c) {
  return InDefaultStopBlocks(c) &&
         text::InCategories(c, text::kPunctuationMask | text::kSymbolMask);
}

std::unordered_set<char32_t> ReadStopChars(const std::string& path, const std::string& where) {
  if (!PathExists(path)) Fail(where, ": stop_char_file '", path, "' not found");
  std::u32string content = text::DecodeUtf8(ReadFileToString(path), text::InvalidUtf8::kKeepRaw);
  std::unordered_set<char32_t> stop_chars;
  size_t line_no = 0;
  for (std::u32string_view rest = content; !rest.empty();) {
    size_t newline = rest.find(U'\n');
    std::u32string_view line = rest.substr(0, newline);
    rest = newline == std::u32string_view::npos ? std::u32string_view() : rest.substr(newline + 1);
    ++line_no;
    if (!line.empty() && line.back() == U'\r') line.remove_suffix(1);
    if (line_no == 1 && !line.empty() && line.front() == 0xFEFF) line.remove_prefix(1);  // BOM
    bool all_space = std::all_of(line.begin(), line.end(), text::IsWhiteSpace);
    for (char32_t c : line) {
      if (text::IsRawByte(c)) {
        Fail(where, ": stop_char_file '", path, "' line ", line_no, " is not valid UTF-8");
      }
      if (all_space || !text::IsWhiteSpace(c)) stop_chars.insert(c);
    }
  }
  return stop_chars;
}

// One traditional -> simplified converter for the process: t2s dictionaries take a few MB
// and tens of milliseconds to load, and every feature uses the same ones.
std::shared_ptr<const opencc::SimpleConverter> T2sConverter(const std::string& where) {
  static std::mutex mu;
  static std::shared_ptr<const opencc::SimpleConverter> converter;
  std::lock_guard<std::mutex> lock(mu);
  if (!converter) {
    try {
      converter = std::make_shared<const opencc::SimpleConverter>("t2s.json");
    } catch (const std::exception& e) {
      Fail(where,
           ": TEXT_CHT2CHS needs OpenCC's t2s.json (Debian package libopencc-data): ", e.what());
    }
  }
  return converter;
}

class TextNormalizerImpl final : public TextNormalizer {
 public:
  TextNormalizerImpl(uint32_t options, int64_t max_length, std::unordered_set<char32_t> stop_chars,
                     bool default_stop_chars, std::shared_ptr<const opencc::SimpleConverter> t2s)
      : options_(options),
        max_length_(max_length),
        stop_chars_(std::move(stop_chars)),
        default_stop_chars_(default_stop_chars),
        t2s_(std::move(t2s)) {}

  std::string Normalize(std::string_view input) const override {
    if (max_length_ > 0 && static_cast<int64_t>(input.size()) > max_length_) {
      return std::string(input);
    }
    std::u32string text = text::DecodeUtf8(input, text::InvalidUtf8::kKeepRaw);
    if (options_ & kTextSbc2Dbc) {
      for (char32_t& c : text) {
        if (c >= 0xFF01 && c <= 0xFF5E) {
          c -= 0xFEE0;
        } else if (c == 0x3000) {
          c = ' ';
        }
      }
    }
    if (options_ & kTextCht2Chs) text = ToSimplified(text);
    if (options_ & kTextLower2Upper) {
      for (char32_t& c : text) c = text::ToUpper(c);
    }
    if (options_ & kTextUpper2Lower) {
      for (char32_t& c : text) c = text::ToLower(c);
    }
    if (options_ & kTextFilter) {
      text.erase(std::remove_if(text.begin(), text.end(),
                                [this](char32_t c) {
                                  return default_stop_chars_ ? IsDefaultStopChar(c)
                                                             : stop_chars_.count(c) > 0;
                                }),
                 text.end());
    }
    if (options_ & kTextRemoveSpace) {
      text.erase(std::remove_if(text.begin(), text.end(), text::IsWhiteSpace), text.end());
    }
    if (options_ & kTextSplitChars) text = SplitCjk(text);
    return text::EncodeUtf8(text);
  }

 private:
  // Converts each run of valid, non-NUL characters separately: OpenCC rejects invalid UTF-8
  // and reads its input as a C string.
  std::u32string ToSimplified(const std::u32string& text) const {
    std::u32string out;
    out.reserve(text.size());
    size_t start = 0;
    for (size_t i = 0; i <= text.size(); ++i) {
      if (i < text.size() && !text::IsRawByte(text[i]) && text[i] != 0) continue;
      if (i > start) {
        bool ascii = std::all_of(text.begin() + start, text.begin() + i,
                                 [](char32_t c) { return c < 0x80; });
        if (ascii) {
          out.append(text, start, i - start);
        } else {
          std::string utf8 = text::EncodeUtf8(std::u32string_view(text).substr(start, i - start));
          out += text::DecodeUtf8(t2s_->Convert(utf8.data(), utf8.size()));
        }
      }
      if (i < text.size()) out.push_back(text[i]);
      start = i + 1;
    }
    return out;
  }

  static std::u32string SplitCjk(const std::u32string& text) {
    std::u32string out;
    out.reserve(text.size() * 2);
    bool prev_cjk = false;
    for (char32_t c : text) {
      bool cjk = text::IsCjkIdeograph(c);
      bool space = text::IsWhiteSpace(c);
      if (!out.empty() && (cjk || prev_cjk) && !space && !text::IsWhiteSpace(out.back())) {
        out.push_back(' ');
      }
      out.push_back(c);
      prev_cjk = cjk;
    }
    return out;
  }

  uint32_t options_;
  int64_t max_length_;
  std::unordered_set<char32_t> stop_chars_;
  bool default_stop_chars_;
  std::shared_ptr<const opencc::SimpleConverter> t2s_;
};

}  // namespace

std::unique_ptr<TextNormalizer> TextNormalizer::Create(uint32_t options, int64_t max_length,
                                                       const std::string& stop_char_file,
                                                       const std::string& where) {
  if (options & ~kKnownOptions) {
    Fail(where, ": unknown text_normalizer option bits ", options & ~kKnownOptions,
         " (known: 2 LOWER2UPPER, 4 UPPER2LOWER, 8 SBC2DBC, 16 CHT2CHS, 32 FILTER, 512 SPLITCHRS, "
         "1024 REMOVE_SPACE)");
  }
  std::unordered_set<char32_t> stop_chars;
  bool default_stop_chars = stop_char_file.empty();
  if ((options & kTextFilter) && !default_stop_chars) {
    stop_chars = ReadStopChars(stop_char_file, where);
  }
  std::shared_ptr<const opencc::SimpleConverter> t2s;
  if (options & kTextCht2Chs) t2s = T2sConverter(where);
  return std::make_unique<TextNormalizerImpl>(options, max_length, std::move(stop_chars),
                                              default_stop_chars, std::move(t2s));
}

}  // namespace tzrec::fg
