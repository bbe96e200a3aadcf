// Regular expressions for tokenizer.json patterns (internal to src/tzrec/fg/).
//
// Hugging Face tokenizers run Oniguruma: GPT-2's ByteLevel split
// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`, the Llama-3 /
// Qwen2 `Split` patterns with `(?i:...)` and `\p{N}{1,3}`, and `Replace`/`Split` regexes in
// general. std::regex cannot run them: it has no \p{...} classes, no Unicode \s, and works on
// bytes, so a multi-byte character is not one `.` or one class member. This is a small
// backtracking matcher over code points with Perl/Oniguruma semantics (alternatives tried in
// order, greedy or lazy quantifiers, atomic lookahead) and Unicode classes from utf8proc.
//
// Supported: literals and escapes (\t \n \r \f \v \a \e \0 \xHH \x{H..} \uHHHH, escaped
// punctuation), `.` (any but \n), classes [...] with ranges and negation, \d \D \w \W \s \S,
// \p{X} / \P{X} / \p{^X} / \pX for general categories (L, Lu, ..., N, Nd, ..., P, S, M, Z, C and
// their long names, LC/L&), groups (...) and (?:...) (no captures are reported), (?i:...),
// (?-i:...) and (?i) for the rest of a group, lookahead (?=...) (?!...), quantifiers * + ? {n}
// {n,} {n,m} {,m} with lazy `?`, anchors ^ $ (line), \A \z \Z, \b \B. Anything else —
// backreferences, lookbehind, named or atomic groups, possessive quantifiers, scripts such as
// \p{Han}, nested classes — is rejected when the pattern is compiled, never silently misread.
//
// Thread safety: a compiled HfRegex is immutable; FindAll may be called concurrently.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tzrec::fg {

class HfRegex {
 public:
  // Throws tzrec::Error("regex '<pattern>': <what is wrong>") for syntax it does not support.
  explicit HfRegex(std::u32string_view pattern);
  // A pattern matching `text` literally (Hugging Face escapes string patterns into regexes).
  static HfRegex Literal(std::u32string_view text);

  // Non-overlapping matches [start, end) in code-point offsets, left to right, as Rust's
  // onig::Regex::find_iter yields them: an empty match right where the previous match ended
  // is skipped and the search moves on by one character.
  void FindAll(std::u32string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;
  // Whether the pattern matches a prefix of text[start..]; the end of that match in *end.
  bool MatchAt(std::u32string_view text, size_t start, size_t* end) const;

  struct Program;  // compiled instructions and classes (hf_regex.cc)

 private:
  HfRegex() = default;

  std::shared_ptr<const Program> program_;
};

}  // namespace tzrec::fg
