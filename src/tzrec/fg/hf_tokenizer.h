// Hugging Face `tokenizer.json` tokenizers (internal to src/tzrec/fg/; use Tokenizer::Load).
//
// Encodes as the `tokenizers` library does with add_special_tokens=false (what TorchEasyRec's
// FG gets from tokenizers-cpp): added tokens are split out first (non-normalized ones on the
// raw text, normalized ones after the normalizer), then the normalizer, the pre-tokenizer and
// the model run on the rest, and `truncation`/`padding` from the file apply to the ids. The
// post-processor only adds special tokens and the decoder only maps ids back to text, so
// neither takes part.
//
// Supported components:
//   models:         BPE (merges as "a b" or ["a", "b"], unk_token, fuse_unk,
//                   continuing_subword_prefix, end_of_word_suffix, byte_fallback,
//                   ignore_merges), WordPiece, WordLevel
//   normalizers:    BertNormalizer, Lowercase, NFC, NFD, NFKC, NFKD, Strip, StripAccents,
//                   Replace, Prepend, Nmt, ByteLevel, Sequence
//   pre-tokenizers: ByteLevel, Whitespace, WhitespaceSplit, BertPreTokenizer, Metaspace, Split,
//                   Punctuation, Digits, CharDelimiterSplit, FixedLength, Sequence
// Regex patterns (ByteLevel's GPT-2 split, Split, Replace) run on HfRegex (hf_regex.h).
// Anything else (Unigram, Precompiled, UnicodeScripts, BPE dropout, ...) fails at load time
// naming the file and the component: it is never silently skipped.
//
// Invalid UTF-8 in the input (which the Rust library cannot even receive) is read with each bad
// byte as U+FFFD.
#pragma once

#include <memory>
#include <string>

#include "tzrec/fg/tokenizer.h"

namespace tzrec::fg {

std::unique_ptr<Tokenizer> LoadHfTokenizer(const std::string& path, const std::string& where);

}  // namespace tzrec::fg
