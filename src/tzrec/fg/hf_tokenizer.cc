#include "tzrec/fg/hf_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/fg/hf_regex.h"
#include "tzrec/fg/text_unicode.h"

namespace tzrec::fg {

namespace {

using nlohmann::json;

// ------------------------------------------------------------------------------ loading helpers

// Names the file and the JSON path of the component in every load error.
class LoadContext {
 public:
  LoadContext(const std::string& where, const std::string& path) : where_(where), path_(path) {}

  template <typename... Args>
  [[noreturn]] void Fail(const std::string& component, Args&&... args) const {
    ::tzrec::Fail(where_, ": tokenizer file '", path_, "': ", component, ": ",
                  std::forward<Args>(args)...);
  }

 private:
  const std::string& where_;
  const std::string& path_;
};

// The member `key` of `obj`, or nullptr when it is absent or null.
const json* Member(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool GetBool(const LoadContext& ctx, const json& obj, const std::string& path, const char* key,
             bool default_value) {
  const json* value = Member(obj, key);
  if (value == nullptr) return default_value;
  if (!value->is_boolean())
    ctx.Fail(path + "." + key, "expected true or false, got ", value->dump());
  return value->get<bool>();
}

std::optional<std::string> GetOptionalString(const LoadContext& ctx, const json& obj,
                                             const std::string& path, const char* key) {
  const json* value = Member(obj, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) ctx.Fail(path + "." + key, "expected a string, got ", value->dump());
  return value->get<std::string>();
}

std::string GetString(const LoadContext& ctx, const json& obj, const std::string& path,
                      const char* key, const std::string& default_value) {
  return GetOptionalString(ctx, obj, path, key).value_or(default_value);
}

int64_t GetInt(const LoadContext& ctx, const json& obj, const std::string& path, const char* key,
               int64_t default_value) {
  const json* value = Member(obj, key);
  if (value == nullptr) return default_value;
  if (!value->is_number_integer())
    ctx.Fail(path + "." + key, "expected an integer, got ", value->dump());
  return value->get<int64_t>();
}

std::string RequireType(const LoadContext& ctx, const json& obj, const std::string& path) {
  if (!obj.is_object()) ctx.Fail(path, "expected an object, got ", obj.dump());
  std::optional<std::string> type = GetOptionalString(ctx, obj, path, "type");
  if (!type) ctx.Fail(path, "missing \"type\"");
  return *type;
}

std::u32string U32(const std::string& utf8) { return text::DecodeUtf8(utf8); }

// GPT-2's reversible byte -> printable character table (ByteLevel pre-tokenizer/normalizer):
// printable Latin-1 bytes map to themselves, the other 68 to U+0100 onwards.
const std::array<char32_t, 256>& ByteToUnicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

std::u32string ByteLevelMap(const std::u32string& text) {
  const auto& table = ByteToUnicode();
  std::string bytes = text::EncodeUtf8(text);
  std::u32string out;
  out.reserve(bytes.size());
  for (unsigned char b : bytes) out.push_back(table[b]);
  return out;
}

// ------------------------------------------------------------------------------ pieces & splits

// A part of the text being encoded. Added tokens are kept whole (token_id >= 0) and skip the
// normalizer, pre-tokenizer and model.
struct Piece {
  std::u32string text;
  int64_t token_id = -1;
  // Whether the piece starts at offset 0 of the input (Metaspace's prepend_scheme "first").
  bool at_start = false;
};

// A span of a piece from a pattern search: [start, end) in characters; is_match marks the
// pattern's occurrences.
struct Span {
  size_t start, end;
  bool is_match;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Hugging Face's Pattern::find_matches for a regex: the whole text covered by alternating
// non-match and match spans (empty text: one empty non-match).
std::vector<Span> RegexSpans(const HfRegex& regex, const std::u32string& text) {
  if (text.empty()) return {{0, 0, false}};
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  regex.FindAll(text, &matches);
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [start, end] : matches) {
    if (prev != start) spans.push_back({prev, start, false});
    spans.push_back({start, end, true});
    prev = end;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), false});
  return spans;
}

// find_matches for a character predicate: every matching character is a match of its own.
template <typename Pred>
std::vector<Span> CharSpans(const std::u32string& text, Pred pred) {
  if (text.empty()) return {{0, 0, false}};
  std::vector<Span> spans;
  size_t last = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (pred(text[i])) {
      if (last < i) spans.push_back({last, i, false});
      spans.push_back({i, i + 1, true});
      last = i + 1;
    }
  }
  if (last < text.size()) spans.push_back({last, text.size(), false});
  return spans;
}

// NormalizedString::split: applies the delimiter behaviour to the spans and appends the kept,
// non-empty parts of `piece` to `out`.
void SplitPiece(const Piece& piece, std::vector<Span> spans, SplitBehavior behavior, bool invert,
                std::vector<Piece>* out) {
  if (invert) {
    for (Span& span : spans) span.is_match = !span.is_match;
  }
  // (start, end, remove)
  std::vector<Span> parts;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& span : spans) parts.push_back({span.start, span.end, false});
      break;
    case SplitBehavior::kRemoved:
      parts = spans;
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Span& span : spans) {
        if (span.is_match == previous_match && !parts.empty()) {
          parts.back().end = span.end;
        } else {
          parts.push_back({span.start, span.end, false});
        }
        previous_match = span.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& span : spans) {
        if (span.is_match && !previous_match && !parts.empty()) {
          parts.back().end = span.end;
        } else {
          parts.push_back({span.start, span.end, false});
        }
        previous_match = span.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !parts.empty()) {
          parts.back().start = it->start;
        } else {
          parts.push_back({it->start, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    }
  }
  for (const Span& part : parts) {
    // In kRemoved the matches themselves are dropped; is_match doubles as "remove" there.
    if (behavior == SplitBehavior::kRemoved && part.is_match) continue;
    if (part.end <= part.start) continue;  // PreTokenizedString drops empty splits
    Piece sub;
    sub.text = piece.text.substr(part.start, part.end - part.start);
    sub.at_start = piece.at_start && part.start == 0;
    out->push_back(std::move(sub));
  }
}

SplitBehavior ParseBehavior(const LoadContext& ctx, const json& obj, const std::string& path,
                            SplitBehavior default_value) {
  std::optional<std::string> name = GetOptionalString(ctx, obj, path, "behavior");
  if (!name) return default_value;
  if (*name == "Removed") return SplitBehavior::kRemoved;
  if (*name == "Isolated") return SplitBehavior::kIsolated;
  if (*name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (*name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (*name == "Contiguous") return SplitBehavior::kContiguous;
  ctx.Fail(path + ".behavior", "unknown split behavior '", *name,
           "' (known: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
}

// `pattern`: {"String": "..."} (matched literally) or {"Regex": "..."}.
HfRegex ParsePattern(const LoadContext& ctx, const json& obj, const std::string& path) {
  const json* pattern = Member(obj, "pattern");
  std::string where = path + ".pattern";
  if (pattern == nullptr || !pattern->is_object() || pattern->size() != 1) {
    ctx.Fail(where, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  auto it = pattern->begin();
  if (!it.value().is_string()) ctx.Fail(where, "expected a string pattern");
  std::u32string value = U32(it.value().get<std::string>());
  if (it.key() == "String") return HfRegex::Literal(value);
  if (it.key() != "Regex")
    ctx.Fail(where, "unknown pattern kind '", it.key(), "' (known: String, Regex)");
  try {
    return HfRegex(value);
  } catch (const Error& e) {
    ctx.Fail(where, e.what());
  }
}

bool IsBertPunctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
           (c >= '{' && c <= '~');
  }
  return text::InCategories(c, text::kPunctuationMask);
}

bool IsNumeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return text::InCategories(c, text::kNumberMask);
}

// ------------------------------------------------------------------------------ normalizers

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::u32string* text) const = 0;
};

class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool handle_chinese_chars, bool strip_accents, bool lowercase)
      : clean_text_(clean_text),
        handle_chinese_chars_(handle_chinese_chars),
        strip_accents_(strip_accents),
        lowercase_(lowercase) {}

  void Normalize(std::u32string* text) const override {
    std::u32string out;
    out.reserve(text->size());
    if (clean_text_) {
      for (char32_t c : *text) {
        if (c == 0 || c == 0xFFFD || IsControl(c)) continue;
        out.push_back(c == '\t' || c == '\n' || c == '\r' || text::IsWhiteSpace(c) ? U' ' : c);
      }
      text->swap(out);
      out.clear();
    }
    if (handle_chinese_chars_) {
      for (char32_t c : *text) {
        if (text::IsCjkIdeograph(c)) {
          out.push_back(' ');
          out.push_back(c);
          out.push_back(' ');
        } else {
          out.push_back(c);
        }
      }
      text->swap(out);
      out.clear();
    }
    if (strip_accents_) {
      for (char32_t c : text::Normalize(*text, text::NormalForm::kNfd)) {
        if (text::Category(c) != UTF8PROC_CATEGORY_MN) out.push_back(c);
      }
      text->swap(out);
      out.clear();
    }
    if (lowercase_) {
      for (char32_t c : *text) text::AppendLowerFull(c, &out);
      text->swap(out);
    }
  }

 private:
  static bool IsControl(char32_t c) {
    if (c == '\t' || c == '\n' || c == '\r') return false;
    return text::InCategories(c, text::kOtherMask);  // Cc Cf Cn Co Cs, as Rust's is_other
  }

  bool clean_text_, handle_chinese_chars_, strip_accents_, lowercase_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void Normalize(std::u32string* text) const override {
    std::u32string out;
    out.reserve(text->size());
    for (char32_t c : *text) text::AppendLowerFull(c, &out);
    text->swap(out);
  }
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(text::NormalForm form) : form_(form) {}
  void Normalize(std::u32string* text) const override { *text = text::Normalize(*text, form_); }

 private:
  text::NormalForm form_;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::u32string* text) const override {
    size_t begin = 0, end = text->size();
    if (left_) {
      while (begin < end && text::IsWhiteSpace((*text)[begin])) ++begin;
    }
    if (right_) {
      while (end > begin && text::IsWhiteSpace((*text)[end - 1])) --end;
    }
    *text = text->substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class StripAccentsNormalizer final : public Normalizer {
 public:
  void Normalize(std::u32string* text) const override {
    std::u32string out;
    for (char32_t c : *text) {
      if (!text::InCategories(c, text::kMarkMask)) out.push_back(c);
    }
    text->swap(out);
  }
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(HfRegex pattern, std::u32string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Normalize(std::u32string* text) const override {
    thread_local std::vector<std::pair<size_t, size_t>> matches;
    pattern_.FindAll(*text, &matches);
    if (matches.empty()) return;
    std::u32string out;
    size_t prev = 0;
    for (auto [start, end] : matches) {
      out.append(*text, prev, start - prev);
      out += content_;
      prev = end;
    }
    out.append(*text, prev, std::u32string::npos);
    text->swap(out);
  }

 private:
  HfRegex pattern_;
  std::u32string content_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::u32string prepend) : prepend_(std::move(prepend)) {}
  void Normalize(std::u32string* text) const override {
    if (!text->empty()) text->insert(0, prepend_);
  }

 private:
  std::u32string prepend_;
};

// SentencePiece's NMT normalization: drops control characters, maps odd spaces to ' '.
class NmtNormalizer final : public Normalizer {
 public:
  void Normalize(std::u32string* text) const override {
    std::u32string out;
    out.reserve(text->size());
    for (char32_t c : *text) {
      if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
          c == 0x8F || c == 0x9F) {
        continue;
      }
      bool space = c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 ||
                   (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 ||
                   c == 0xFEFF || c == 0xFFFD;
      out.push_back(space ? U' ' : c);
    }
    text->swap(out);
  }
};

class ByteLevelNormalizer final : public Normalizer {
 public:
  void Normalize(std::u32string* text) const override { *text = ByteLevelMap(*text); }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void Normalize(std::u32string* text) const override {
    for (const auto& step : steps_) step->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

std::unique_ptr<Normalizer> ParseNormalizer(const LoadContext& ctx, const json& obj,
                                            const std::string& path) {
  std::string type = RequireType(ctx, obj, path);
  if (type == "BertNormalizer") {
    bool lowercase = GetBool(ctx, obj, path, "lowercase", true);
    return std::make_unique<BertNormalizer>(GetBool(ctx, obj, path, "clean_text", true),
                                            GetBool(ctx, obj, path, "handle_chinese_chars", true),
                                            GetBool(ctx, obj, path, "strip_accents", lowercase),
                                            lowercase);
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(text::NormalForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(text::NormalForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(text::NormalForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(text::NormalForm::kNfkd);
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(GetBool(ctx, obj, path, "strip_left", true),
                                             GetBool(ctx, obj, path, "strip_right", true));
  }
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "Replace") {
    HfRegex pattern = ParsePattern(ctx, obj, path);
    std::string content = GetString(ctx, obj, path, "content", "");
    // Newer `tokenizers` expand $1-style group references in regex replacements; we report
    // no captures, so refuse rather than insert the text "$1".
    if (obj.at("pattern").contains("Regex") && content.find('$') != std::string::npos) {
      ctx.Fail(path + ".content", "group references ($n) in Replace content are not supported");
    }
    return std::make_unique<ReplaceNormalizer>(std::move(pattern), U32(content));
  }
  if (type == "Prepend") {
    return std::make_unique<PrependNormalizer>(U32(GetString(ctx, obj, path, "prepend", "")));
  }
  if (type == "Nmt") return std::make_unique<NmtNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Sequence") {
    const json* list = Member(obj, "normalizers");
    if (list == nullptr || !list->is_array()) ctx.Fail(path + ".normalizers", "expected an array");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      steps.push_back(ParseNormalizer(ctx, (*list)[i], StrCat(path, ".normalizers[", i, "]")));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  ctx.Fail(path, "unsupported normalizer type '", type,
           "' (supported: BertNormalizer, Lowercase, NFC, NFD, NFKC, NFKD, Strip, StripAccents, "
           "Replace, Prepend, Nmt, ByteLevel, Sequence)");
}

// ------------------------------------------------------------------------------ pre-tokenizers

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits (and possibly rewrites) one piece that is not an added token into `out`.
  virtual void Split(const Piece& piece, std::vector<Piece>* out) const = 0;
};

// Runs `pre` over every non-token piece.
void ApplyPreTokenizer(const PreTokenizer& pre, std::vector<Piece>* pieces) {
  std::vector<Piece> out;
  out.reserve(pieces->size());
  for (Piece& piece : *pieces) {
    if (piece.token_id >= 0) {
      out.push_back(std::move(piece));
    } else {
      pre.Split(piece, &out);
    }
  }
  pieces->swap(out);
}

// The GPT-2 split ByteLevel applies (Hugging Face compiles the same pattern with Oniguruma).
const HfRegex& Gpt2Regex() {
  static const HfRegex regex(
      U"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
  return regex;
}

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}

  void Split(const Piece& piece, std::vector<Piece>* out) const override {
    Piece prefixed = piece;
    if (add_prefix_space_ && (prefixed.text.empty() || prefixed.text[0] != ' ')) {
      prefixed.text.insert(prefixed.text.begin(), U' ');
    }
    size_t first = out->size();
    if (use_regex_) {
      SplitPiece(prefixed, RegexSpans(Gpt2Regex(), prefixed.text), SplitBehavior::kIsolated, false,
                 out);
    } else if (!prefixed.text.empty()) {
      out->push_back(std::move(prefixed));
    }
    for (size_t i = first; i < out->size(); ++i) (*out)[i].text = ByteLevelMap((*out)[i].text);
  }

 private:
  bool add_prefix_space_, use_regex_;
};

// Splits with a regex (Whitespace, Split).
class RegexPreTokenizer final : public PreTokenizer {
 public:
  RegexPreTokenizer(HfRegex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void Split(const Piece& piece, std::vector<Piece>* out) const override {
    SplitPiece(piece, RegexSpans(regex_, piece.text), behavior_, invert_, out);
  }

 private:
  HfRegex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

// Splits on single characters chosen by a predicate (WhitespaceSplit, Punctuation, Digits,
// CharDelimiterSplit).
class CharPreTokenizer final : public PreTokenizer {
 public:
  using Predicate = bool (*)(char32_t c, char32_t arg);
  CharPreTokenizer(Predicate pred, char32_t arg, SplitBehavior behavior)
      : pred_(pred), arg_(arg), behavior_(behavior) {}
  void Split(const Piece& piece, std::vector<Piece>* out) const override {
    SplitPiece(piece, CharSpans(piece.text, [this](char32_t c) { return pred_(c, arg_); }),
               behavior_, false, out);
  }

 private:
  Predicate pred_;
  char32_t arg_;
  SplitBehavior behavior_;
};

class BertPreTokenizer final : public PreTokenizer {
 public:
  void Split(const Piece& piece, std::vector<Piece>* out) const override {
    std::vector<Piece> words;
    SplitPiece(piece, CharSpans(piece.text, text::IsWhiteSpace), SplitBehavior::kRemoved, false,
               &words);
    for (const Piece& word : words) {
      SplitPiece(word, CharSpans(word.text, IsBertPunctuation), SplitBehavior::kIsolated, false,
                 out);
    }
  }
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(char32_t replacement, Prepend prepend, bool split)
      : replacement_(replacement), prepend_(prepend), split_(split) {}

  void Split(const Piece& piece, std::vector<Piece>* out) const override {
    Piece replaced = piece;
    for (char32_t& c : replaced.text) {
      if (c == ' ') c = replacement_;
    }
    bool starts = !replaced.text.empty() && replaced.text[0] == replacement_;
    if (!starts &&
        (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && piece.at_start))) {
      replaced.text.insert(replaced.text.begin(), replacement_);
    }
    if (!split_) {
      if (!replaced.text.empty()) out->push_back(std::move(replaced));
      return;
    }
    char32_t r = replacement_;
    SplitPiece(replaced, CharSpans(replaced.text, [r](char32_t c) { return c == r; }),
               SplitBehavior::kMergedWithNext, false, out);
  }

 private:
  char32_t replacement_;
  Prepend prepend_;
  bool split_;
};

class FixedLengthPreTokenizer final : public PreTokenizer {
 public:
  explicit FixedLengthPreTokenizer(size_t length) : length_(length) {}
  void Split(const Piece& piece, std::vector<Piece>* out) const override {
    for (size_t start = 0; start < piece.text.size(); start += length_) {
      Piece sub;
      sub.text = piece.text.substr(start, length_);
      sub.at_start = piece.at_start && start == 0;
      out->push_back(std::move(sub));
    }
  }

 private:
  size_t length_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void Split(const Piece& piece, std::vector<Piece>* out) const override {
    std::vector<Piece> pieces{piece};
    for (const auto& step : steps_) ApplyPreTokenizer(*step, &pieces);
    for (Piece& p : pieces) out->push_back(std::move(p));
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

char32_t GetSingleChar(const LoadContext& ctx, const json& obj, const std::string& path,
                       const char* key, const std::string& default_value) {
  std::u32string value = U32(GetString(ctx, obj, path, key, default_value));
  if (value.size() != 1) ctx.Fail(path + "." + key, "expected a single character");
  return value[0];
}

std::unique_ptr<PreTokenizer> ParsePreTokenizer(const LoadContext& ctx, const json& obj,
                                                const std::string& path) {
  std::string type = RequireType(ctx, obj, path);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(
        GetBool(ctx, obj, path, "add_prefix_space", true),
        GetBool(ctx, obj, path, "use_regex", true));
  }
  if (type == "Whitespace") {
    // \w+|[^\w\s]+, keeping the matches and dropping what lies between them.
    return std::make_unique<RegexPreTokenizer>(HfRegex(U"\\w+|[^\\w\\s]+"), SplitBehavior::kRemoved,
                                               /*invert=*/true);
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<CharPreTokenizer>(
        [](char32_t c, char32_t) { return text::IsWhiteSpace(c); }, 0, SplitBehavior::kRemoved);
  }
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "Metaspace") {
    char32_t replacement = GetSingleChar(ctx, obj, path, "replacement", "\xE2\x96\x81");
    // Files from tokenizers < 0.19 carry add_prefix_space instead of prepend_scheme.
    auto prepend = MetaspacePreTokenizer::Prepend::kAlways;
    std::optional<std::string> scheme = GetOptionalString(ctx, obj, path, "prepend_scheme");
    if (scheme) {
      if (*scheme == "always") {
        prepend = MetaspacePreTokenizer::Prepend::kAlways;
      } else if (*scheme == "first") {
        prepend = MetaspacePreTokenizer::Prepend::kFirst;
      } else if (*scheme == "never") {
        prepend = MetaspacePreTokenizer::Prepend::kNever;
      } else {
        ctx.Fail(path + ".prepend_scheme", "unknown value '", *scheme,
                 "' (known: always, first, never)");
      }
    } else if (!GetBool(ctx, obj, path, "add_prefix_space", true)) {
      prepend = MetaspacePreTokenizer::Prepend::kNever;
    }
    return std::make_unique<MetaspacePreTokenizer>(replacement, prepend,
                                                   GetBool(ctx, obj, path, "split", true));
  }
  if (type == "Split") {
    HfRegex pattern = ParsePattern(ctx, obj, path);
    const json* behavior = Member(obj, "behavior");
    if (behavior == nullptr) ctx.Fail(path + ".behavior", "missing");
    return std::make_unique<RegexPreTokenizer>(
        std::move(pattern), ParseBehavior(ctx, obj, path, SplitBehavior::kIsolated),
        GetBool(ctx, obj, path, "invert", false));
  }
  if (type == "Punctuation") {
    return std::make_unique<CharPreTokenizer>(
        [](char32_t c, char32_t) { return IsBertPunctuation(c); }, 0,
        ParseBehavior(ctx, obj, path, SplitBehavior::kIsolated));
  }
  if (type == "Digits") {
    bool individual = GetBool(ctx, obj, path, "individual_digits", false);
    return std::make_unique<CharPreTokenizer>(
        [](char32_t c, char32_t) { return IsNumeric(c); }, 0,
        individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  if (type == "CharDelimiterSplit") {
    char32_t delimiter = GetSingleChar(ctx, obj, path, "delimiter", "");
    return std::make_unique<CharPreTokenizer>([](char32_t c, char32_t d) { return c == d; },
                                              delimiter, SplitBehavior::kRemoved);
  }
  if (type == "FixedLength") {
    int64_t length = GetInt(ctx, obj, path, "length", 5);
    if (length <= 0) ctx.Fail(path + ".length", "must be positive");
    return std::make_unique<FixedLengthPreTokenizer>(static_cast<size_t>(length));
  }
  if (type == "Sequence") {
    const json* list = Member(obj, "pretokenizers");
    if (list == nullptr || !list->is_array())
      ctx.Fail(path + ".pretokenizers", "expected an array");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      steps.push_back(ParsePreTokenizer(ctx, (*list)[i], StrCat(path, ".pretokenizers[", i, "]")));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  ctx.Fail(path, "unsupported pre_tokenizer type '", type,
           "' (supported: ByteLevel, Whitespace, WhitespaceSplit, BertPreTokenizer, Metaspace, "
           "Split, Punctuation, Digits, CharDelimiterSplit, FixedLength, Sequence)");
}

// ------------------------------------------------------------------------------ models

using Vocab = std::unordered_map<std::string, int64_t>;

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-token (UTF-8, not empty).
  virtual void Tokenize(const std::string& word, std::vector<int64_t>* ids) const = 0;

  const Vocab& vocab() const { return vocab_; }
  int64_t Find(const std::string& token) const {
    auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }
  // "<where>: tokenizer file '<path>'", for errors found while encoding.
  void set_origin(std::string origin) { origin_ = std::move(origin); }

 protected:
  // `tokenizers` accepts an unk_token missing from the vocab and fails only when a word needs
  // it; so do we, naming the file.
  [[noreturn]] void FailMissingUnk(const std::string& unk_token) const {
    Fail(origin_, ": model: unk_token '", unk_token, "' is not in the vocab");
  }

  Vocab vocab_;
  std::string origin_;
};

Vocab ParseVocab(const LoadContext& ctx, const json& model, const std::string& path) {
  const json* vocab = Member(model, "vocab");
  if (vocab == nullptr || !vocab->is_object())
    ctx.Fail(path + ".vocab", "expected an object of token: id");
  Vocab out;
  out.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > std::numeric_limits<uint32_t>::max()) {
      ctx.Fail(path + ".vocab", "id of '", it.key(), "' is not a non-negative 32-bit integer");
    }
    out[it.key()] = it.value().get<int64_t>();
  }
  return out;
}

// Byte offsets where each UTF-8 character of `word` starts, plus word.size().
std::vector<size_t> CharBoundaries(const std::string& word) {
  std::vector<size_t> bounds;
  bounds.reserve(word.size() + 1);
  for (size_t i = 0; i < word.size(); ++i) {
    if ((static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) bounds.push_back(i);
  }
  bounds.push_back(word.size());
  return bounds;
}

class BpeModel final : public Model {
 public:
  BpeModel(const LoadContext& ctx, const json& obj, const std::string& path) {
    vocab_ = ParseVocab(ctx, obj, path);
    if (const json* dropout = Member(obj, "dropout")) {
      if (!dropout->is_number() || dropout->get<double>() != 0.0) {
        ctx.Fail(path + ".dropout", "BPE dropout (random merges) is not supported; set it to null");
      }
    }
    unk_token_ = GetOptionalString(ctx, obj, path, "unk_token");
    prefix_ = GetString(ctx, obj, path, "continuing_subword_prefix", "");
    suffix_ = GetString(ctx, obj, path, "end_of_word_suffix", "");
    fuse_unk_ = GetBool(ctx, obj, path, "fuse_unk", false);
    byte_fallback_ = GetBool(ctx, obj, path, "byte_fallback", false);
    ignore_merges_ = GetBool(ctx, obj, path, "ignore_merges", false);
    if (unk_token_) unk_id_ = Find(*unk_token_);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      byte_ids_[b] = Find(name);
    }
    ParseMerges(ctx, obj, path);
  }

  void Tokenize(const std::string& word, std::vector<int64_t>* ids) const override {
    if (ignore_merges_) {
      int64_t id = Find(word);
      if (id >= 0) {
        ids->push_back(id);
        return;
      }
    }
    std::vector<Symbol> symbols;
    InitialSymbols(word, &symbols);
    MergeAll(&symbols);
    for (const Symbol& s : symbols) {
      if (s.len > 0) ids->push_back(s.id);
    }
  }

 private:
  struct Symbol {
    int64_t id;
    int prev, next;
    size_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
  };
  struct MergeInfo {
    int64_t rank;
    int64_t new_id;
  };
  static uint64_t PairKey(int64_t a, int64_t b) {
    return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b);
  }

  void ParseMerges(const LoadContext& ctx, const json& obj, const std::string& path) {
    const json* merges = Member(obj, "merges");
    if (merges == nullptr) return;
    if (!merges->is_array()) ctx.Fail(path + ".merges", "expected an array");
    merges_.reserve(merges->size());
    for (size_t rank = 0; rank < merges->size(); ++rank) {
      const json& merge = (*merges)[rank];
      std::string a, b;
      if (merge.is_string()) {
        // Old format "a b": exactly one space (tokens with spaces need the pair format).
        const std::string& line = merge.get_ref<const std::string&>();
        size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
          ctx.Fail(StrCat(path, ".merges[", rank, "]"), "expected \"a b\", got '", line, "'");
        }
        a = line.substr(0, space);
        b = line.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                 merge[1].is_string()) {
        a = merge[0].get<std::string>();
        b = merge[1].get<std::string>();
      } else {
        ctx.Fail(StrCat(path, ".merges[", rank, "]"), "expected \"a b\" or [\"a\", \"b\"], got ",
                 merge.dump());
      }
      int64_t a_id = Find(a), b_id = Find(b);
      // The merged token drops b's continuing_subword_prefix ("he" + "##llo" -> "hello").
      std::string merged =
          a + (b.size() >= prefix_.size() ? b.substr(prefix_.size()) : std::string());
      int64_t new_id = Find(merged);
      const std::string& missing = a_id < 0 ? a : b_id < 0 ? b : merged;
      if (a_id < 0 || b_id < 0 || new_id < 0) {
        ctx.Fail(StrCat(path, ".merges[", rank, "]"), "token '", missing, "' is not in the vocab");
      }
      // A repeated pair keeps its last rank, as the Rust HashMap it is collected into.
      merges_[PairKey(a_id, b_id)] = {static_cast<int64_t>(rank), new_id};
    }
  }

  void InitialSymbols(const std::string& word, std::vector<Symbol>* symbols) const {
    std::vector<size_t> bounds = CharBoundaries(word);
    size_t chars = bounds.size() - 1;
    symbols->reserve(chars);
    auto add = [symbols](int64_t id, size_t len) {
      int index = static_cast<int>(symbols->size());
      symbols->push_back({id, index - 1, -1, len});
      if (index > 0) (*symbols)[index - 1].next = index;
    };
    // A pending unknown character (fuse_unk joins consecutive ones).
    bool have_unk = false;
    size_t unk_len = 0;
    std::string piece;
    for (size_t i = 0; i < chars; ++i) {
      size_t byte_len = bounds[i + 1] - bounds[i];
      piece.clear();
      if (i > 0) piece += prefix_;
      piece.append(word, bounds[i], byte_len);
      if (i + 1 == chars) piece += suffix_;
      int64_t id = Find(piece);
      if (id >= 0) {
        if (have_unk) {
          add(unk_id_, unk_len);
          have_unk = false;
        }
        add(id, byte_len);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (unsigned char b : piece) all = all && byte_ids_[b] >= 0;
        if (all) {
          for (unsigned char b : piece) add(byte_ids_[b], 1);
          continue;
        }
      }
      if (unk_token_) {
        if (unk_id_ < 0) FailMissingUnk(*unk_token_);
        if (have_unk && fuse_unk_) {
          unk_len += byte_len;
        } else {
          if (have_unk) add(unk_id_, unk_len);
          have_unk = true;
          unk_len = byte_len;
        }
      }
      // Without unk_token an unknown character is dropped, as in `tokenizers`.
    }
    if (have_unk) add(unk_id_, unk_len);
  }

  // Applies merges lowest rank first (leftmost first among equal ranks), as tokenizers' Word.
  void MergeAll(std::vector<Symbol>* symbols) const {
    struct Candidate {
      int64_t rank;
      int pos;
      int64_t new_id;
      bool operator>(const Candidate& o) const {
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    auto& sym = *symbols;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = merges_.find(PairKey(sym[i].id, sym[i + 1].id));
      if (it != merges_.end())
        queue.push({it->second.rank, static_cast<int>(i), it->second.new_id});
    }
    while (!queue.empty()) {
      Candidate top = queue.top();
      queue.pop();
      Symbol& left = sym[top.pos];
      if (left.len == 0 || left.next < 0) continue;
      Symbol right = sym[left.next];
      auto it = merges_.find(PairKey(left.id, right.id));
      if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
      int right_pos = left.next;
      left.id = top.new_id;
      left.len += right.len;
      left.next = right.next;
      sym[right_pos].len = 0;
      if (right.next >= 0) sym[right.next].prev = top.pos;
      if (left.prev >= 0) {
        auto p = merges_.find(PairKey(sym[left.prev].id, left.id));
        if (p != merges_.end()) queue.push({p->second.rank, left.prev, p->second.new_id});
      }
      if (left.next >= 0) {
        auto n = merges_.find(PairKey(left.id, sym[left.next].id));
        if (n != merges_.end()) queue.push({n->second.rank, top.pos, n->second.new_id});
      }
    }
  }

  std::unordered_map<uint64_t, MergeInfo> merges_;
  std::optional<std::string> unk_token_;
  int64_t unk_id_ = -1;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int64_t, 256> byte_ids_{};
};

class WordPieceModel final : public Model {
 public:
  WordPieceModel(const LoadContext& ctx, const json& obj, const std::string& path) {
    vocab_ = ParseVocab(ctx, obj, path);
    unk_token_ = GetString(ctx, obj, path, "unk_token", "[UNK]");
    prefix_ = GetString(ctx, obj, path, "continuing_subword_prefix", "##");
    max_chars_ = GetInt(ctx, obj, path, "max_input_chars_per_word", 100);
    unk_id_ = Find(unk_token_);
  }

  // Greedy longest-match-first; a word with any unmatched part becomes one unk_token.
  void Tokenize(const std::string& word, std::vector<int64_t>* ids) const override {
    std::vector<size_t> bounds = CharBoundaries(word);
    size_t chars = bounds.size() - 1;
    if (static_cast<int64_t>(chars) > max_chars_) {
      ids->push_back(UnkId());
      return;
    }
    size_t first = ids->size();
    std::string candidate;
    size_t start = 0;  // in characters
    while (start < chars) {
      size_t end = chars;
      int64_t found = -1;
      while (start < end) {
        candidate.clear();
        if (start > 0) candidate += prefix_;
        candidate.append(word, bounds[start], bounds[end] - bounds[start]);
        found = Find(candidate);
        if (found >= 0) break;
        --end;
      }
      if (found < 0) {
        ids->resize(first);
        ids->push_back(UnkId());
        return;
      }
      ids->push_back(found);
      start = end;
    }
  }

 private:
  int64_t UnkId() const {
    if (unk_id_ < 0) FailMissingUnk(unk_token_);
    return unk_id_;
  }

  std::string unk_token_, prefix_;
  int64_t max_chars_ = 100;
  int64_t unk_id_ = -1;
};

class WordLevelModel final : public Model {
 public:
  WordLevelModel(const LoadContext& ctx, const json& obj, const std::string& path) {
    vocab_ = ParseVocab(ctx, obj, path);
    unk_token_ = GetString(ctx, obj, path, "unk_token", "<unk>");
    unk_id_ = Find(unk_token_);
  }
  void Tokenize(const std::string& word, std::vector<int64_t>* ids) const override {
    int64_t id = Find(word);
    if (id < 0) {
      if (unk_id_ < 0) FailMissingUnk(unk_token_);
      id = unk_id_;
    }
    ids->push_back(id);
  }

 private:
  std::string unk_token_;
  int64_t unk_id_ = -1;
};

std::unique_ptr<Model> ParseModel(const LoadContext& ctx, const json& obj,
                                  const std::string& path) {
  if (!obj.is_object()) ctx.Fail(path, "expected an object");
  std::optional<std::string> type = GetOptionalString(ctx, obj, path, "type");
  if (!type) {
    // Very old files omit the model type; the fields tell which one it is.
    if (obj.contains("merges")) {
      type = "BPE";
    } else if (obj.contains("max_input_chars_per_word")) {
      type = "WordPiece";
    } else {
      ctx.Fail(path, "missing \"type\"");
    }
  }
  if (*type == "BPE") return std::make_unique<BpeModel>(ctx, obj, path);
  if (*type == "WordPiece") return std::make_unique<WordPieceModel>(ctx, obj, path);
  if (*type == "WordLevel") return std::make_unique<WordLevelModel>(ctx, obj, path);
  ctx.Fail(path, "unsupported model type '", *type,
           "' (supported: BPE, WordPiece, WordLevel; for a SentencePiece Unigram model use "
           "tokenizer_type \"sentencepiece\" with its .model file)");
}

// ------------------------------------------------------------------------------ added tokens

struct AddedToken {
  std::u32string content;  // as matched: normalized when `normalized`
  int64_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false;
};

// Tokens matched by leftmost-longest search (Aho-Corasick's LeftmostLongest in `tokenizers`):
// the earliest occurrence wins, and the longest token among those starting there. A trie over
// code points finds the longest token at a position in one walk, however many tokens there are
// (Gemma 3 has 6415).
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() : nodes_(1) {}

  void Add(AddedToken token) {
    if (token.content.empty()) return;
    size_t node = 0;
    for (char32_t c : token.content) {
      auto it = nodes_[node].children.find(c);
      if (it == nodes_[node].children.end()) {
        nodes_.emplace_back();
        it = nodes_[node].children.emplace(c, nodes_.size() - 1).first;
      }
      node = it->second;
    }
    if (nodes_[node].token < 0) {  // the first of two equal contents wins
      nodes_[node].token = static_cast<int>(tokens_.size());
      tokens_.push_back(std::move(token));
    }
  }

  // Splits every non-token piece around the added tokens it contains.
  void SplitPieces(std::vector<Piece>* pieces) const {
    if (tokens_.empty()) return;
    std::vector<Piece> out;
    for (Piece& piece : *pieces) {
      if (piece.token_id >= 0) {
        out.push_back(std::move(piece));
      } else {
        SplitOne(piece, &out);
      }
    }
    pieces->swap(out);
  }

 private:
  struct Node {
    std::unordered_map<char32_t, size_t> children;
    int token = -1;
  };

  // The longest token starting at s[pos], or nullptr.
  const AddedToken* LongestAt(const std::u32string& s, size_t pos) const {
    const AddedToken* match = nullptr;
    size_t node = 0;
    for (size_t i = pos; i < s.size(); ++i) {
      auto it = nodes_[node].children.find(s[i]);
      if (it == nodes_[node].children.end()) break;
      node = it->second;
      if (nodes_[node].token >= 0) match = &tokens_[static_cast<size_t>(nodes_[node].token)];
    }
    return match;
  }

  void SplitOne(const Piece& piece, std::vector<Piece>* out) const {
    const std::u32string& s = piece.text;
    size_t n = s.size();
    auto emit = [&](size_t start, size_t end, int64_t id) {
      if (end <= start) return;
      Piece sub;
      sub.text = s.substr(start, end - start);
      sub.token_id = id;
      sub.at_start = piece.at_start && start == 0;
      out->push_back(std::move(sub));
    };
    size_t start_offset = 0;  // end of the previous accepted token
    size_t pos = 0;
    while (pos < n) {
      const AddedToken* match = LongestAt(s, pos);
      if (match == nullptr) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + match->content.size();
      pos = stop;  // the search resumes after this occurrence even when it is rejected below
      if (match->single_word) {
        bool start_space = start == 0 || !text::IsWordChar(s[start - 1]);
        bool stop_space = stop == n || !text::IsWordChar(s[stop]);
        if (!start_space || !stop_space) continue;
      }
      if (match->lstrip) {
        size_t new_start = start;
        while (new_start > 0 && text::IsWhiteSpace(s[new_start - 1])) --new_start;
        start = std::max(new_start, start_offset);
      }
      if (match->rstrip) {
        while (stop < n && text::IsWhiteSpace(s[stop])) ++stop;
        pos = stop;
      }
      emit(start_offset, start, -1);
      emit(start, stop, match->id);
      start_offset = stop;
    }
    emit(start_offset, n, -1);
  }

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
};

// ------------------------------------------------------------------------------ the tokenizer

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(const std::string& path, const std::string& where, const json& root) {
    LoadContext ctx(where, path);
    if (!root.is_object()) ctx.Fail("(top level)", "expected a JSON object");
    const json* model = Member(root, "model");
    if (model == nullptr) ctx.Fail("model", "missing");
    model_ = ParseModel(ctx, *model, "model");
    model_->set_origin(StrCat(where, ": tokenizer file '", path, "'"));
    if (const json* normalizer = Member(root, "normalizer")) {
      normalizer_ = ParseNormalizer(ctx, *normalizer, "normalizer");
    }
    if (const json* pre = Member(root, "pre_tokenizer")) {
      pre_tokenizer_ = ParsePreTokenizer(ctx, *pre, "pre_tokenizer");
    }
    ParseAddedTokens(ctx, root);
    ParseTruncation(ctx, root);
    ParsePadding(ctx, root);
    for (const auto& [token, id] : model_->vocab()) vocab_size_ = std::max(vocab_size_, id + 1);
    for (const auto& [content, id] : added_ids_) vocab_size_ = std::max(vocab_size_, id + 1);
  }

  void Encode(std::string_view input, std::vector<int64_t>* ids) const override {
    std::vector<Piece> pieces(1);
    pieces[0].text = text::DecodeUtf8(input);
    pieces[0].at_start = true;
    if (pieces[0].text.empty()) pieces.clear();
    raw_tokens_.SplitPieces(&pieces);
    if (normalizer_) {
      for (Piece& piece : pieces) {
        if (piece.token_id < 0) normalizer_->Normalize(&piece.text);
      }
      pieces.erase(std::remove_if(pieces.begin(), pieces.end(),
                                  [](const Piece& p) { return p.text.empty(); }),
                   pieces.end());
    }
    normalized_tokens_.SplitPieces(&pieces);
    if (pre_tokenizer_) ApplyPreTokenizer(*pre_tokenizer_, &pieces);
    size_t first = ids->size();
    std::string word;
    for (const Piece& piece : pieces) {
      if (piece.token_id >= 0) {
        ids->push_back(piece.token_id);
      } else if (!piece.text.empty()) {
        word = text::EncodeUtf8(piece.text);
        model_->Tokenize(word, ids);
      }
    }
    TruncateAndPad(first, ids);
  }

  int64_t vocab_size() const override { return vocab_size_; }

 private:
  void ParseAddedTokens(const LoadContext& ctx, const json& root) {
    const json* list = Member(root, "added_tokens");
    if (list == nullptr) return;
    if (!list->is_array()) ctx.Fail("added_tokens", "expected an array");
    // Ids as `tokenizers` assigns them when loading (AddedVocabulary::add_tokens): a token the
    // model knows keeps the model's id; a new one goes after the model vocab and earlier added
    // tokens. For files `tokenizers` wrote, these equal the "id" fields.
    int64_t model_size = static_cast<int64_t>(model_->vocab().size());
    int64_t max_added = -1;
    for (size_t i = 0; i < list->size(); ++i) {
      const json& item = (*list)[i];
      std::string path = StrCat("added_tokens[", i, "]");
      if (!item.is_object()) ctx.Fail(path, "expected an object");
      std::optional<std::string> content = GetOptionalString(ctx, item, path, "content");
      if (!content) ctx.Fail(path + ".content", "missing");
      if (content->empty()) continue;
      bool special = GetBool(ctx, item, path, "special", false);
      AddedToken token;
      token.single_word = GetBool(ctx, item, path, "single_word", false);
      token.lstrip = GetBool(ctx, item, path, "lstrip", false);
      token.rstrip = GetBool(ctx, item, path, "rstrip", false);
      bool normalized = GetBool(ctx, item, path, "normalized", !special);
      auto known = added_ids_.find(*content);
      if (known != added_ids_.end()) {
        token.id = known->second;
      } else if (int64_t model_id = model_->Find(*content); model_id >= 0) {
        token.id = model_id;
      } else {
        token.id = max_added < 0
                       ? model_size
                       : (max_added >= model_size || model_size == 0 ? max_added + 1 : model_size);
      }
      added_ids_[*content] = token.id;
      max_added = std::max(max_added, token.id);
      token.content = U32(*content);
      if (normalized && normalizer_) normalizer_->Normalize(&token.content);
      (normalized ? normalized_tokens_ : raw_tokens_).Add(std::move(token));
    }
  }

  void ParseTruncation(const LoadContext& ctx, const json& root) {
    const json* trunc = Member(root, "truncation");
    if (trunc == nullptr) return;
    if (!trunc->is_object()) ctx.Fail("truncation", "expected an object or null");
    max_length_ = GetInt(ctx, *trunc, "truncation", "max_length", 512);
    if (max_length_ < 0) ctx.Fail("truncation.max_length", "must not be negative");
    std::string strategy = GetString(ctx, *trunc, "truncation", "strategy", "LongestFirst");
    if (strategy == "OnlySecond") {
      ctx.Fail("truncation.strategy", "OnlySecond cannot truncate a single text");
    } else if (strategy != "LongestFirst" && strategy != "OnlyFirst") {
      ctx.Fail("truncation.strategy", "unknown strategy '", strategy, "'");
    }
    truncate_left_ = ParseDirection(ctx, *trunc, "truncation");
  }

  void ParsePadding(const LoadContext& ctx, const json& root) {
    const json* pad = Member(root, "padding");
    if (pad == nullptr) return;
    if (!pad->is_object()) ctx.Fail("padding", "expected an object or null");
    padding_ = true;
    const json* strategy = Member(*pad, "strategy");
    if (strategy != nullptr && strategy->is_object() && strategy->contains("Fixed")) {
      const json& fixed = (*strategy)["Fixed"];
      if (!fixed.is_number_integer()) ctx.Fail("padding.strategy.Fixed", "expected an integer");
      pad_fixed_ = fixed.get<int64_t>();
    } else if (strategy != nullptr && !(strategy->is_string() && *strategy == "BatchLongest")) {
      ctx.Fail("padding.strategy", "expected \"BatchLongest\" or {\"Fixed\": n}, got ",
               strategy->dump());
    }
    pad_multiple_ = GetInt(ctx, *pad, "padding", "pad_to_multiple_of", 0);
    pad_id_ = GetInt(ctx, *pad, "padding", "pad_id", 0);
    pad_left_ = ParseDirection(ctx, *pad, "padding");
  }

  static bool ParseDirection(const LoadContext& ctx, const json& obj, const std::string& path) {
    std::string direction = GetString(ctx, obj, path, "direction", "Right");
    if (direction != "Left" && direction != "Right") {
      ctx.Fail(path + ".direction", "expected Left or Right, got '", direction, "'");
    }
    return direction == "Left";
  }

  void TruncateAndPad(size_t first, std::vector<int64_t>* ids) const {
    int64_t length = static_cast<int64_t>(ids->size() - first);
    if (max_length_ >= 0 && length > max_length_) {
      if (truncate_left_) {
        ids->erase(ids->begin() + static_cast<std::ptrdiff_t>(first),
                   ids->end() - static_cast<std::ptrdiff_t>(max_length_));
      } else {
        ids->resize(first + static_cast<size_t>(max_length_));
      }
      length = max_length_;
    }
    if (!padding_) return;
    int64_t target = pad_fixed_ >= 0 ? pad_fixed_ : length;  // BatchLongest of one text
    if (pad_multiple_ > 0 && target % pad_multiple_ != 0) {
      target += pad_multiple_ - target % pad_multiple_;
    }
    if (target <= length) return;
    size_t missing = static_cast<size_t>(target - length);
    if (pad_left_) {
      ids->insert(ids->begin() + static_cast<std::ptrdiff_t>(first), missing, pad_id_);
    } else {
      ids->insert(ids->end(), missing, pad_id_);
    }
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  AddedTokenMatcher raw_tokens_, normalized_tokens_;
  std::unordered_map<std::string, int64_t> added_ids_;
  int64_t vocab_size_ = 0;
  int64_t max_length_ = -1;  // -1: no truncation
  bool truncate_left_ = false;
  bool padding_ = false;
  int64_t pad_fixed_ = -1;  // -1: BatchLongest
  int64_t pad_multiple_ = 0;
  int64_t pad_id_ = 0;
  bool pad_left_ = false;
};

}  // namespace

std::unique_ptr<Tokenizer> LoadHfTokenizer(const std::string& path, const std::string& where) {
  if (!PathExists(path)) Fail(where, ": tokenizer file '", path, "' not found");
  std::string content = ReadFileToString(path);
  json root;
  try {
    root = json::parse(content);
  } catch (const json::exception& e) {
    Fail(where, ": tokenizer file '", path, "': invalid JSON: ", e.what());
  }
  try {
    return std::make_unique<HfTokenizer>(path, where, root);
  } catch (const json::exception& e) {
    // Shapes the helpers above do not check (e.g. a non-object inside a Sequence).
    Fail(where, ": tokenizer file '", path, "': unexpected JSON structure: ", e.what());
  }
}

}  // namespace tzrec::fg
