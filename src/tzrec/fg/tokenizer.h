// Text to token ids for tokenize_feature (no LibTorch).
//
// Two tokenizer kinds, as TorchEasyRec's `tokenizer_type`: "bpe" reads a Hugging Face
// `tokenizer.json` (the format tokenizers-cpp loads; any model/normalizer/pre-tokenizer that
// file can hold, not only BPE — hf_tokenizer.h lists what is supported), "sentencepiece" a
// SentencePiece `.model` file (Debian's libsentencepiece, opened with dlopen: tokenizer.cc says
// why). TextNormalizer implements `text_normalizer.norm_options` (lower/upper case, full-width
// to half-width, traditional to simplified Chinese, symbol filtering, splitting CJK characters,
// removing spaces); text_normalizer.cc documents the order of the steps and the default stop
// characters.
//
// Thread safety: both are immutable after Load/Create; Encode/Normalize may be called
// concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tzrec::fg {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // `type` is "bpe" (tokenizer.json) or "sentencepiece". Missing/corrupt files and
  // unsupported tokenizer.json components throw tzrec::Error starting with `where` and
  // naming the file (and the component).
  static std::unique_ptr<Tokenizer> Load(const std::string& path, const std::string& type,
                                         const std::string& where);
  // Appends the ids of `text` to `ids` (no special tokens added). Invalid UTF-8 never fails:
  // tokenizer.json reads each bad byte as U+FFFD, SentencePiece handles it itself.
  virtual void Encode(std::string_view text, std::vector<int64_t>* ids) const = 0;
  // Number of ids (embedding rows): the largest id of the vocab and added tokens plus one.
  virtual int64_t vocab_size() const = 0;
};

// Bits of TorchEasyRec's TextNormalizeOption (the values its FG uses).
enum TextNormOption : uint32_t {
  kTextLower2Upper = 2,
  kTextUpper2Lower = 4,
  kTextSbc2Dbc = 8,
  kTextCht2Chs = 16,
  kTextFilter = 32,
  kTextSplitChars = 512,
  kTextRemoveSpace = 1024,
};

class TextNormalizer {
 public:
  virtual ~TextNormalizer() = default;
  // `options` is a bitmask of TextNormOption (other bits throw). `max_length` > 0: inputs
  // longer than that many bytes pass through unchanged (TorchEasyRec's rule). `stop_char_file`
  // (empty: a built-in list) lists the characters kTextFilter removes, one per line. Invalid
  // UTF-8 bytes pass through unchanged.
  static std::unique_ptr<TextNormalizer> Create(uint32_t options, int64_t max_length,
                                                const std::string& stop_char_file,
                                                const std::string& where);
  virtual std::string Normalize(std::string_view text) const = 0;
};

}  // namespace tzrec::fg
