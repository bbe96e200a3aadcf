// Tests for Tokenizer (tokenizer.json and SentencePiece), HfRegex and TextNormalizer.
//
// Expected ids of the tokenizer.json fixtures under tests/fg/data/ were derived by hand and
// then checked against Hugging Face tokenizers 0.22.2 (npm @anush008/tokenizers) and
// tokenizers-cpp, the library TorchEasyRec's FG uses (npm @mlc-ai/web-tokenizers 0.1.6),
// both encoding without special tokens; the two agreed on every case.
#include "tzrec/fg/tokenizer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/fg/hf_regex.h"
#include "tzrec/fg/text_unicode.h"

namespace tzrec::fg {
namespace {

using Ids = std::vector<int64_t>;
using nlohmann::json;

std::string DataPath(const std::string& name) {
  return std::string(TZREC_SOURCE_DIR) + "/tests/fg/data/" + name;
}

Ids Encode(const Tokenizer& tokenizer, std::string_view text) {
  Ids ids;
  tokenizer.Encode(text, &ids);
  return ids;
}

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/tzrec_tokenizer_test_XXXXXX";
    char* dir = mkdtemp(pattern);
    if (dir == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = dir;
  }
  ~TempDir() { RemoveAll(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  std::string Write(const std::string& name, const std::string& content) const {
    WriteFileAtomic(File(name), content);
    return File(name);
  }

 private:
  std::string path_;
};

json ReadJson(const std::string& path) { return json::parse(ReadFileToString(path)); }

std::unique_ptr<Tokenizer> LoadJson(const TempDir& dir, const json& tokenizer) {
  return Tokenizer::Load(dir.Write("tokenizer.json", tokenizer.dump()), "bpe", "test");
}

// The message of the tzrec::Error `fn` throws ("" if none).
template <typename Fn>
std::string ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> Utf8Matches(const HfRegex& regex, const std::string& text) {
  std::u32string u = text::DecodeUtf8(text);
  std::vector<std::pair<size_t, size_t>> matches;
  regex.FindAll(u, &matches);
  std::vector<std::string> out;
  for (auto [start, end] : matches) out.push_back(text::EncodeUtf8(u.substr(start, end - start)));
  return out;
}

// ------------------------------------------------------------------------------ HfRegex

const char32_t kGpt2Pattern[] =
    U"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

TEST(HfRegexTest, Gpt2SplitMatchesTokenizersExamples) {
  // The expected splits are those of tokenizers' own ByteLevel tests.
  HfRegex gpt2(kGpt2Pattern);
  EXPECT_EQ(Utf8Matches(gpt2, "Hello my friend, how is your day going?"),
            (std::vector<std::string>{"Hello", " my", " friend", ",", " how", " is", " your",
                                      " day", " going", "?"}));
  EXPECT_EQ(Utf8Matches(gpt2, "Hello there\nHello there"),
            (std::vector<std::string>{"Hello", " there", "\n", "Hello", " there"}));
  EXPECT_EQ(Utf8Matches(gpt2, "Hello there       dear"),
            (std::vector<std::string>{"Hello", " there", "      ", " dear"}));
  EXPECT_EQ(Utf8Matches(gpt2, "I'll pay 1234€ for 中国的 café!!"),
            (std::vector<std::string>{"I", "'ll", " pay", " 1234", "€", " for", " 中国的", " café",
                                      "!!"}));
  // \s is Unicode: the ideographic space U+3000 is whitespace.
  EXPECT_EQ(Utf8Matches(gpt2,
                        "a\xE3\x80\x80"
                        "b"),
            (std::vector<std::string>{"a", "\xE3\x80\x80", "b"}));
}

TEST(HfRegexTest, Syntax) {
  EXPECT_EQ(Utf8Matches(HfRegex(U"(?i:'s|'t)"), "'S 't"), (std::vector<std::string>{"'S", "'t"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"\\p{N}{1,3}"), "1234567"),
            (std::vector<std::string>{"123", "456", "7"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"a{2}"), "aaaaa"), (std::vector<std::string>{"aa", "aa"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"<.+?>"), "<a><b>"), (std::vector<std::string>{"<a>", "<b>"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"<.+>"), "<a><b>"), (std::vector<std::string>{"<a><b>"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"a(?=b)"), "ab ac"), (std::vector<std::string>{"a"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"[一-龥]+"), "ab中文cd"), (std::vector<std::string>{"中文"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"[\\p{Lu}\\d]+"), "aBC12d"), (std::vector<std::string>{"BC12"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"\\P{L}+"), "ab1 2c"), (std::vector<std::string>{"1 2"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"\\x{4E2D}|\\u56fd|\\x41"), "中国A"),
            (std::vector<std::string>{"中", "国", "A"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"^a|b$"), "ab\nab"),
            (std::vector<std::string>{"a", "b", "a", "b"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"\\bis\\b"), "is this is"),
            (std::vector<std::string>{"is", "is"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"a.c"), "a中c a\nc"), (std::vector<std::string>{"a中c"}));
  EXPECT_EQ(Utf8Matches(HfRegex(U"{x}|a{,2}"), "{x}aaa"),
            (std::vector<std::string>{"{x}", "aa", "a"}));
  // Oniguruma's find_iter: an empty match is kept unless it starts where the last match ended.
  EXPECT_EQ(Utf8Matches(HfRegex(U"a*"), "baab"), (std::vector<std::string>{"", "aa", ""}));
  EXPECT_EQ(Utf8Matches(HfRegex::Literal(U"a.b"), "axb a.b"), (std::vector<std::string>{"a.b"}));
}

TEST(HfRegexTest, RejectsUnsupportedSyntax) {
  for (const char32_t* pattern : {U"(?<=a)b", U"(a)\\1", U"(?<name>a)", U"a++", U"\\p{Han}",
                                  U"[[:alpha:]]", U"(a*)*", U"(?m)a", U"a(", U"a)", U"[a", U"*a"}) {
    std::string message = ErrorOf([&] { HfRegex regex(pattern); });
    EXPECT_NE(message.find("regex '" + text::EncodeUtf8(pattern) + "'"), std::string::npos)
        << text::EncodeUtf8(pattern) << ": " << message;
  }
}

// ------------------------------------------------------------------------------ tokenizer.json

TEST(HfTokenizerTest, ByteLevelBpe) {
  auto tok = Tokenizer::Load(DataPath("bpe_bytelevel_tokenizer.json"), "bpe", "test");
  EXPECT_EQ(tok->vocab_size(), 30);
  EXPECT_EQ(Encode(*tok, "hello world"), (Ids{13, 18}));
  EXPECT_EQ(Encode(*tok, "hello world!"), (Ids{13, 18, 29}));
  EXPECT_EQ(Encode(*tok, "hello  world"), (Ids{13, 6, 18}));  // "hello", "Ġ", "Ġworld"
  // The special token is split out first and kept whole.
  EXPECT_EQ(Encode(*tok, "hello<|endoftext|>world"), (Ids{13, 1, 7, 15, 4, 9}));
  EXPECT_EQ(Encode(*tok, "hellox"), (Ids{13, 0}));  // 'x' is not in the vocab: <unk>
  // "中" = bytes E4 B8 AD = "ä¸Ń" merges to one token; the 3 bytes of "国" are unknown.
  EXPECT_EQ(Encode(*tok, "中国"), (Ids{23, 0, 0, 0}));
  EXPECT_EQ(Encode(*tok, "hello 2024"), (Ids{13, 6, 28, 25, 27}));
  EXPECT_EQ(Encode(*tok, "20202"), (Ids{28, 28, 25}));
  EXPECT_EQ(Encode(*tok, ""), Ids{});
  // Encode appends.
  Ids ids{7};
  tok->Encode("world", &ids);
  EXPECT_EQ(ids, (Ids{7, 7, 15, 4, 9}));
}

TEST(HfTokenizerTest, ByteLevelVariants) {
  TempDir dir;
  json base = ReadJson(DataPath("bpe_bytelevel_tokenizer.json"));
  json prefix = base;
  prefix["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(Encode(*LoadJson(dir, prefix), "hello world"), (Ids{6, 13, 18}));
  // Qwen2/Llama-3 layout: a Split with their regex, then ByteLevel without its own regex.
  // \p{N}{1,3} cuts "20202" into "202" + "02" where GPT-2's split keeps one number.
  json llama3 = base;
  llama3["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex":
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})");
  llama3["normalizer"] = json::parse(R"({"type": "NFC"})");
  auto tok = LoadJson(dir, llama3);
  EXPECT_EQ(Encode(*tok, "hello world"), (Ids{13, 18}));
  EXPECT_EQ(Encode(*tok, "20202"), (Ids{28, 25, 26, 25}));
}

TEST(HfTokenizerTest, WordPieceBertChinese) {
  auto tok = Tokenizer::Load(DataPath("wordpiece_tokenizer.json"), "bpe", "test");
  EXPECT_EQ(tok->vocab_size(), 22);
  EXPECT_EQ(Encode(*tok, "Hello, World!"), (Ids{8, 14, 9, 15}));
  EXPECT_EQ(Encode(*tok, "中国人"), (Ids{5, 6, 7}));  // each CJK character is a word
  EXPECT_EQ(Encode(*tok, "playing"), (Ids{11, 12}));  // play ##ing
  EXPECT_EQ(Encode(*tok, "unaffable"), (Ids{16, 17, 18}));
  EXPECT_EQ(Encode(*tok, "Café"), (Ids{19}));  // lowercase implies strip_accents
  EXPECT_EQ(Encode(*tok, "worlds"), (Ids{9, 10}));
  EXPECT_EQ(Encode(*tok, "xyz"), (Ids{1}));       // [UNK]
  EXPECT_EQ(Encode(*tok, "playingx"), (Ids{1}));  // one unmatched piece: the whole word is [UNK]
  EXPECT_EQ(Encode(*tok, "[CLS]中[MASK]"), (Ids{2, 5, 4}));
  EXPECT_EQ(Encode(*tok, "12"), (Ids{20, 21}));
  EXPECT_EQ(Encode(*tok, "aaaaaaaaaaa"), (Ids{1}));  // over max_input_chars_per_word (10)
  EXPECT_EQ(Encode(*tok, "日本"), (Ids{1, 1}));
  EXPECT_EQ(Encode(*tok, std::string("hello\tworld\0", 12)), (Ids{8, 9}));  // clean_text
  EXPECT_EQ(Encode(*tok, "你好，中国"), (Ids{1, 1, 13, 5, 6}));
  EXPECT_EQ(Encode(*tok, ""), Ids{});
}

TEST(HfTokenizerTest, MetaspaceBpeWithByteFallback) {
  auto tok = Tokenizer::Load(DataPath("metaspace_tokenizer.json"), "bpe", "test");
  EXPECT_EQ(tok->vocab_size(), 26);
  EXPECT_EQ(Encode(*tok, "hello world"), (Ids{18, 23}));
  EXPECT_EQ(Encode(*tok, "中国"), (Ids{25, 3, 4, 5}));  // "国" falls back to <0xE5><0x9B><0xBD>
  EXPECT_EQ(Encode(*tok, "x"), (Ids{6, 0}));
  EXPECT_EQ(Encode(*tok, "xyz"), (Ids{6, 0}));  // fuse_unk: one <unk> for "xyz"
  EXPECT_EQ(Encode(*tok, "x中y"), (Ids{6, 0, 24, 0}));
  EXPECT_EQ(Encode(*tok, "<s>hello"), (Ids{1, 18}));
  EXPECT_EQ(Encode(*tok, "hello<s>"), (Ids{18, 1}));
  EXPECT_EQ(Encode(*tok, "hello  world"), (Ids{18, 6, 23}));
  EXPECT_EQ(Encode(*tok, " hello"), (Ids{18}));
  EXPECT_EQ(Encode(*tok, ""), Ids{});

  // prepend_scheme "first": no "▁" before a piece that follows a special token.
  TempDir dir;
  json first = ReadJson(DataPath("metaspace_tokenizer.json"));
  first["pre_tokenizer"] = json::parse(
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true})");
  auto tok_first = LoadJson(dir, first);
  EXPECT_EQ(Encode(*tok_first, "<s>hello"), (Ids{1, 7, 8, 17}));
  EXPECT_EQ(Encode(*tok_first, "hello<s>"), (Ids{18, 1}));
}

// A real tokenizer.json layout (Qwen3: NFC, Split with its regex, ByteLevel, 26 special
// tokens) cut down to 3000 tokens; expected ids from `tokenizers` itself (see the fixture).
TEST(HfTokenizerTest, Qwen3SmallMatchesHuggingFace) {
  json expected = ReadJson(DataPath("qwen3_small_expected.json"));
  auto tok = Tokenizer::Load(DataPath(expected["tokenizer"]), "bpe", "test");
  EXPECT_EQ(tok->vocab_size(), expected["vocab_size"].get<int64_t>());
  ASSERT_GT(expected["cases"].size(), 20u);
  for (const json& c : expected["cases"]) {
    std::string text = c["text"];
    EXPECT_EQ(Encode(*tok, text), c["ids"].get<Ids>()) << text;
  }
}

// Every case of hf_component_cases.json: a WordLevel tokenizer whose vocab is "<unk>", the
// expected words, then the added tokens, so the ids read back as words.
TEST(HfTokenizerTest, ComponentCases) {
  json cases = ReadJson(DataPath("hf_component_cases.json"))["cases"];
  ASSERT_GT(cases.size(), 40u);
  TempDir dir;
  for (const json& c : cases) {
    std::vector<std::string> words{"<unk>"};
    auto add_word = [&](const std::string& w) {
      if (std::find(words.begin(), words.end(), w) == words.end()) words.push_back(w);
    };
    for (const json& w : c["expected"]) add_word(w);
    json added = json::array();
    if (c.contains("added_tokens")) {
      for (const json& t : c["added_tokens"]) add_word(t["content"]);
    }
    json vocab = json::object();
    for (size_t i = 0; i < words.size(); ++i) vocab[words[i]] = i;
    if (c.contains("added_tokens")) {
      for (json t : c["added_tokens"]) {
        t["id"] = vocab[t["content"].get<std::string>()];
        added.push_back(t);
      }
    }
    json tokenizer = {{"version", "1.0"},
                      {"truncation", nullptr},
                      {"padding", nullptr},
                      {"added_tokens", added},
                      {"normalizer", c["normalizer"]},
                      {"pre_tokenizer", c["pre_tokenizer"]},
                      {"post_processor", nullptr},
                      {"decoder", nullptr},
                      {"model", {{"type", "WordLevel"}, {"vocab", vocab}, {"unk_token", "<unk>"}}}};
    if (c.contains("extra")) tokenizer.update(c["extra"]);
    std::string name = c["name"];
    std::vector<std::string> got;
    try {
      for (int64_t id : Encode(*LoadJson(dir, tokenizer), c["text"].get<std::string>())) {
        got.push_back(words.at(static_cast<size_t>(id)));
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << ": " << e.what();
      continue;
    }
    EXPECT_EQ(got, c["expected"].get<std::vector<std::string>>()) << name;
  }
}

TEST(HfTokenizerTest, VocabSizeCountsAddedTokensBeyondTheModel) {
  TempDir dir;
  json tokenizer = ReadJson(DataPath("wordpiece_tokenizer.json"));
  // Ids are assigned as `tokenizers` does: after the model vocab (22 tokens).
  tokenizer["added_tokens"].push_back({{"id", 22},
                                       {"content", "<new>"},
                                       {"single_word", false},
                                       {"lstrip", false},
                                       {"rstrip", false},
                                       {"normalized", false},
                                       {"special", true}});
  auto tok = LoadJson(dir, tokenizer);
  EXPECT_EQ(tok->vocab_size(), 23);
  EXPECT_EQ(Encode(*tok, "hello<new>"), (Ids{8, 22}));
}

TEST(HfTokenizerTest, BpeOptions) {
  TempDir dir;
  // continuing_subword_prefix and end_of_word_suffix (BPE as in original subword-nmt/CLIP).
  json tokenizer = json::parse(R"({
    "version": "1.0", "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "WhitespaceSplit"},
    "model": {"type": "BPE", "unk_token": "<unk>", "continuing_subword_prefix": "##",
              "end_of_word_suffix": "</w>", "fuse_unk": false, "byte_fallback": false,
              "vocab": {"<unk>": 0, "a": 1, "##b": 2, "##c</w>": 3, "ab": 4, "abc</w>": 5, "c</w>": 6},
              "merges": ["a ##b", "ab ##c</w>"]}})");
  auto tok = LoadJson(dir, tokenizer);
  EXPECT_EQ(Encode(*tok, "abc c"), (Ids{5, 6}));
  EXPECT_EQ(Encode(*tok, "ab"), (Ids{1, 0}));  // "##b</w>" is unknown
  // ignore_merges: a word found whole in the vocab skips the merges.
  json ignore = json::parse(R"({
    "version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": null,
    "model": {"type": "BPE", "ignore_merges": true,
              "vocab": {"a": 0, "b": 1, "ab": 2, "aab": 3},
              "merges": [["a", "b"]]}})");
  auto tok_ignore = LoadJson(dir, ignore);
  EXPECT_EQ(Encode(*tok_ignore, "aab"), (Ids{3}));
  EXPECT_EQ(Encode(*tok_ignore, "abab"), (Ids{2, 2}));
  // Without unk_token, unknown characters are dropped (and "a", "b" then merge).
  ignore["model"].erase("ignore_merges");
  EXPECT_EQ(Encode(*LoadJson(dir, ignore), "axb"), (Ids{2}));
}

TEST(HfTokenizerTest, Errors) {
  TempDir dir;
  std::string missing = dir.File("nope.json");
  std::string message = ErrorOf([&] { Tokenizer::Load(missing, "bpe", "feature 'title'"); });
  EXPECT_NE(message.find("feature 'title'"), std::string::npos) << message;
  EXPECT_NE(message.find(missing), std::string::npos) << message;

  std::string corrupt = dir.Write("corrupt.json", "{\"model\": {\"type\": \"BPE\", ");
  message = ErrorOf([&] { Tokenizer::Load(corrupt, "bpe", "feature 'title'"); });
  EXPECT_NE(message.find("invalid JSON"), std::string::npos) << message;
  EXPECT_NE(message.find(corrupt), std::string::npos) << message;

  json base = ReadJson(DataPath("wordpiece_tokenizer.json"));
  struct Case {
    const char* field;
    const char* value;
    const char* expected;
  };
  const Case cases[] = {
      {"normalizer",
       R"({"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Precompiled", "precompiled_charsmap": "AAAA"}]})",
       "normalizer.normalizers[1]: unsupported normalizer type 'Precompiled'"},
      {"pre_tokenizer", R"({"type": "UnicodeScripts"})",
       "pre_tokenizer: unsupported pre_tokenizer type 'UnicodeScripts'"},
      {"pre_tokenizer",
       R"({"type": "Split", "pattern": {"Regex": "(?<=a)b"}, "behavior": "Isolated"})",
       "pre_tokenizer.pattern: regex '(?<=a)b': lookbehind is not supported"},
      {"pre_tokenizer", R"({"type": "Split", "pattern": {"String": "-"}, "behavior": "Sideways"})",
       "unknown split behavior 'Sideways'"},
      {"model", R"({"type": "Unigram", "vocab": [["a", -1.0]]})",
       "model: unsupported model type 'Unigram'"},
      {"model", R"({"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []})", "model.dropout"},
      {"model", R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]})",
       "token 'b' is not in the vocab"},
      {"model", R"({"type": "WordPiece", "vocab": [1, 2]})", "model.vocab"},
      {"normalizer", R"({"lowercase": true})", "normalizer: missing \"type\""},
  };
  for (const Case& c : cases) {
    json tokenizer = base;
    tokenizer[c.field] = json::parse(c.value);
    std::string path = dir.Write("bad.json", tokenizer.dump());
    message = ErrorOf([&] { Tokenizer::Load(path, "bpe", "feature 'title'"); });
    EXPECT_NE(message.find("feature 'title': tokenizer file '" + path + "'"), std::string::npos)
        << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.value << " -> " << message;
  }

  // An unk_token missing from the vocab fails only when a word needs it, as in `tokenizers`.
  json no_unk = base;
  no_unk["model"]["unk_token"] = "[NOPE]";
  std::string no_unk_path = dir.Write("no_unk.json", no_unk.dump());
  auto tok = Tokenizer::Load(no_unk_path, "bpe", "feature 'title'");
  EXPECT_EQ(Encode(*tok, "hello"), (Ids{8}));
  message = ErrorOf([&] { Encode(*tok, "xyz"); });
  EXPECT_NE(message.find("feature 'title': tokenizer file '" + no_unk_path +
                         "': model: unk_token '[NOPE]' is not in the vocab"),
            std::string::npos)
      << message;

  message =
      ErrorOf([&] { Tokenizer::Load(DataPath("wordpiece_tokenizer.json"), "wordpiece", "f"); });
  EXPECT_NE(message.find("unknown tokenizer_type 'wordpiece' (known: bpe, sentencepiece)"),
            std::string::npos)
      << message;
}

TEST(HfTokenizerTest, InvalidUtf8BecomesReplacementCharacter) {
  auto tok = Tokenizer::Load(DataPath("bpe_bytelevel_tokenizer.json"), "bpe", "test");
  // 0xFF is read as U+FFFD (bytes EF BF BD, all unknown here): the text around it is intact.
  EXPECT_EQ(Encode(*tok, "hello\xFF"), (Ids{13, 0, 0, 0}));
}

// ------------------------------------------------------------------------------ SentencePiece

// Output of a shell command (stdout), or nullopt when it exits non-zero.
std::optional<std::string> RunCommand(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  if (pclose(pipe) != 0) return std::nullopt;
  return out;
}

// Models are trained and checked with Debian's sentencepiece command-line tools (spm_train,
// spm_encode, spm_decode): separate processes, so they are a reference independent of how
// we load the library (tokenizer.cc explains the dlopen).
class SentencePieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!RunCommand("command -v spm_train spm_encode spm_decode")) return;
    dir_ = new TempDir();
    std::string corpus;
    const char* words[] = {"hello",  "world", "token", "feature", "embedding", "ranking",
                           "recall", "user",  "item",  "click",   "中国",      "北京",
                           "推荐",   "系统",  "模型",  "特征"};
    uint32_t state = 12345;
    for (int line = 0; line < 2000; ++line) {
      for (int w = 0; w < 8; ++w) {
        state = state * 1103515245u + 12345u;
        if (w > 0) corpus += ' ';
        corpus += words[(state >> 16) % (sizeof(words) / sizeof(words[0]))];
      }
      corpus += '\n';
    }
    std::string corpus_path = dir_->Write("corpus.txt", corpus);
    for (const char* type : {"bpe", "unigram"}) {
      std::string prefix = dir_->File(std::string("spm_") + type);
      if (!RunCommand("spm_train --input=" + corpus_path + " --model_prefix=" + prefix +
                      " --vocab_size=50 --model_type=" + type +
                      " --character_coverage=1.0 --minloglevel=2 >/dev/null 2>&1")) {
        return;
      }
    }
    trained_ = true;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!trained_) GTEST_SKIP() << "sentencepiece tools (Debian package sentencepiece) missing";
  }
  static std::string ModelPath(const char* type) {
    return dir_->File(std::string("spm_") + type + ".model");
  }
  // Loads a model, or skips when this binary links libsentencepiece next to libprotobuf.
  static std::unique_ptr<Tokenizer> LoadOrSkip(const std::string& path, std::string* skip) {
    try {
      return Tokenizer::Load(path, "sentencepiece", "test");
    } catch (const Error& e) {
      std::string message = e.what();
      if (message.find("next to another protobuf runtime") == std::string::npos) throw;
      *skip = message;
      return nullptr;
    }
  }

  static TempDir* dir_;
  static bool trained_;
};

TempDir* SentencePieceTest::dir_ = nullptr;
bool SentencePieceTest::trained_ = false;

TEST_F(SentencePieceTest, MatchesSpmEncodeAndRoundTrips) {
  const std::vector<std::string> texts = {"hello world", "推荐系统 模型特征", "user click item",
                                          "recall",      "中国 北京",         "unseen Ｘ words ok"};
  std::string texts_path = dir_->Write("texts.txt", Join(texts, "\n") + "\n");
  for (const char* type : {"bpe", "unigram"}) {
    std::string skip;
    auto tok = LoadOrSkip(ModelPath(type), &skip);
    if (tok == nullptr) GTEST_SKIP() << skip;
    EXPECT_EQ(tok->vocab_size(), 50) << type;
    std::optional<std::string> expected =
        RunCommand("spm_encode --model=" + ModelPath(type) + " --output_format=id < " + texts_path);
    ASSERT_TRUE(expected.has_value());
    std::vector<std::string> expected_lines = Split(*expected, "\n");
    std::string id_lines;
    for (size_t i = 0; i < texts.size(); ++i) {
      Ids ids = Encode(*tok, texts[i]);
      std::vector<std::string> parts;
      for (int64_t id : ids) {
        EXPECT_GE(id, 0);
        EXPECT_LT(id, tok->vocab_size());
        parts.push_back(std::to_string(id));
      }
      EXPECT_EQ(Join(parts, " "), expected_lines.at(i)) << type << ": " << texts[i];
      id_lines += Join(parts, " ") + "\n";
    }
    // Ids decode back to the text (the last text has an unknown full-width 'Ｘ', decoded as
    // " ⁇ ", so it is left out).
    std::string ids_path = dir_->Write("ids.txt", id_lines);
    std::optional<std::string> decoded =
        RunCommand("spm_decode --model=" + ModelPath(type) + " --input_format=id < " + ids_path);
    ASSERT_TRUE(decoded.has_value());
    std::vector<std::string> decoded_lines = Split(*decoded, "\n");
    for (size_t i = 0; i + 1 < texts.size(); ++i) EXPECT_EQ(decoded_lines.at(i), texts[i]) << type;
    EXPECT_EQ(Encode(*tok, ""), Ids{});
    EXPECT_FALSE(Encode(*tok, "bad \xFF\xFE utf8 \xE4\xB8").empty());
  }
}

TEST_F(SentencePieceTest, Errors) {
  std::string missing = dir_->File("missing.model");
  std::string message = ErrorOf([&] { Tokenizer::Load(missing, "sentencepiece", "feature 'q'"); });
  EXPECT_NE(message.find("feature 'q': sentencepiece model '" + missing + "' not found"),
            std::string::npos)
      << message;
  std::string skip;
  if (LoadOrSkip(ModelPath("bpe"), &skip) == nullptr) GTEST_SKIP() << skip;
  std::string garbage = dir_->Write("garbage.model", "this is not a model");
  message = ErrorOf([&] { Tokenizer::Load(garbage, "sentencepiece", "feature 'q'"); });
  EXPECT_NE(message.find("feature 'q': sentencepiece model '" + garbage + "' cannot be loaded"),
            std::string::npos)
      << message;
}

TEST_F(SentencePieceTest, ConcurrentEncodeMatchesSerial) {
  std::string skip;
  auto tok = LoadOrSkip(ModelPath("unigram"), &skip);
  if (tok == nullptr) GTEST_SKIP() << skip;
  const std::vector<std::string> texts = {"hello world", "推荐系统 模型特征", "user click item"};
  std::vector<Ids> serial;
  for (const std::string& t : texts) serial.push_back(Encode(*tok, t));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 500; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          if (Encode(*tok, texts[i]) != serial[i]) ++mismatches;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ------------------------------------------------------------------------------ TextNormalizer

std::string Normalize(uint32_t options, std::string_view text, int64_t max_length = 0,
                      const std::string& stop_chars = "") {
  return TextNormalizer::Create(options, max_length, stop_chars, "test")->Normalize(text);
}

TEST(TextNormalizerTest, EachOption) {
  EXPECT_EQ(Normalize(0, "Ａb 東"), "Ａb 東");
  EXPECT_EQ(Normalize(kTextSbc2Dbc, "１２３"), "123");
  EXPECT_EQ(Normalize(kTextSbc2Dbc, "ＡＢＣ　ｄ！，"), "ABC d!,");
  EXPECT_EQ(Normalize(kTextCht2Chs, "東"), "东");
  EXPECT_EQ(Normalize(kTextCht2Chs, "繁體中文與電腦abc"), "繁体中文与电脑abc");
  EXPECT_EQ(Normalize(kTextLower2Upper, "abc éß 中"), "ABC Éß 中");
  EXPECT_EQ(Normalize(kTextUpper2Lower, "ÉCOLE ΣΑ Abc"), "école σα abc");
  EXPECT_EQ(Normalize(kTextLower2Upper | kTextUpper2Lower, "aB"), "ab");
  EXPECT_EQ(Normalize(kTextFilter, "你好，世界！Hello, world! (100%) ＃1《书》…"),
            "你好世界Hello world 100 1书");
  EXPECT_EQ(Normalize(kTextSplitChars, "中国a"), "中 国 a");
  EXPECT_EQ(Normalize(kTextSplitChars, "我爱NLP模型 ok"), "我 爱 NLP 模 型 ok");
  EXPECT_EQ(Normalize(kTextSplitChars, "中 国"), "中 国");
  EXPECT_EQ(Normalize(kTextRemoveSpace, "a b\t c　d"), "abcd");
}

TEST(TextNormalizerTest, OrderAndCombinations) {
  // TorchEasyRec's default norm_options: LOWER2UPPER, SBC2DBC, CHT2CHS, FILTER.
  uint32_t defaults = kTextLower2Upper | kTextSbc2Dbc | kTextCht2Chs | kTextFilter;
  EXPECT_EQ(Normalize(defaults, "東京ｈｅｌｌｏ，世界！"), "东京HELLO世界");
  // Spaces are removed before CJK splitting, so the inserted separators stay.
  EXPECT_EQ(Normalize(kTextRemoveSpace | kTextSplitChars, "中 国 a b"), "中 国 ab");
}

TEST(TextNormalizerTest, MaxLengthPassesLongInputsThrough) {
  EXPECT_EQ(Normalize(kTextLower2Upper, "abc", 5), "ABC");
  EXPECT_EQ(Normalize(kTextLower2Upper, "abcde", 5), "ABCDE");
  EXPECT_EQ(Normalize(kTextLower2Upper, "abcdef", 5), "abcdef");
  EXPECT_EQ(Normalize(kTextCht2Chs, "東", 5), "东");
  EXPECT_EQ(Normalize(kTextCht2Chs, "東東", 5), "東東");  // 6 bytes
}

TEST(TextNormalizerTest, StopCharFile) {
  TempDir dir;
  std::string path = dir.Write("stop.txt", "\xEF\xBB\xBF好\r\n!\n，  \n\n");
  EXPECT_EQ(Normalize(kTextFilter, "你好!a，b c", 0, path), "你ab c");
  std::string space = dir.Write("space.txt", " \n");
  EXPECT_EQ(Normalize(kTextFilter, "a b,c", 0, space), "ab,c");
}

TEST(TextNormalizerTest, InvalidUtf8PassesThrough) {
  EXPECT_EQ(Normalize(kTextLower2Upper,
                      "a\xFF"
                      "b\xE4\xB8"),
            "A\xFF"
            "B\xE4\xB8");
  EXPECT_EQ(Normalize(kTextCht2Chs | kTextSplitChars, "東\xFF東"), "东 \xFF 东");
  EXPECT_EQ(Normalize(kTextCht2Chs, std::string("東\0東", 7)), std::string("东\0东", 7));
}

TEST(TextNormalizerTest, Errors) {
  std::string message =
      ErrorOf([] { TextNormalizer::Create(kTextFilter, 0, "/no/such/stop_chars", "feature 't'"); });
  EXPECT_NE(message.find("feature 't': stop_char_file '/no/such/stop_chars' not found"),
            std::string::npos)
      << message;
  message = ErrorOf([] { TextNormalizer::Create(64, 0, "", "feature 't'"); });
  EXPECT_NE(message.find("feature 't': unknown text_normalizer option bits 64"), std::string::npos)
      << message;
}

// ------------------------------------------------------------------------------ threads

TEST(TokenizerThreadsTest, ConcurrentEncodeAndNormalizeMatchSerial) {
  auto bpe = Tokenizer::Load(DataPath("bpe_bytelevel_tokenizer.json"), "bpe", "test");
  auto wordpiece = Tokenizer::Load(DataPath("wordpiece_tokenizer.json"), "bpe", "test");
  auto normalizer = TextNormalizer::Create(
      kTextLower2Upper | kTextSbc2Dbc | kTextCht2Chs | kTextFilter | kTextSplitChars, 0, "",
      "test");
  const std::vector<std::string> texts = {"hello world!", "中国 2024 hello<|endoftext|>",
                                          "繁體中文的電腦，ｈｅｌｌｏ！",
                                          "Hello, World! playing 中国人"};
  std::vector<Ids> bpe_ids, wordpiece_ids;
  std::vector<std::string> normalized;
  for (const std::string& t : texts) {
    bpe_ids.push_back(Encode(*bpe, t));
    wordpiece_ids.push_back(Encode(*wordpiece, t));
    normalized.push_back(normalizer->Normalize(t));
  }
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 300; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          if (Encode(*bpe, texts[i]) != bpe_ids[i]) ++mismatches;
          if (Encode(*wordpiece, texts[i]) != wordpiece_ids[i]) ++mismatches;
          if (normalizer->Normalize(texts[i]) != normalized[i]) ++mismatches;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Opt-in throughput check: --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'.
TEST(TokenizerThroughputTest, DISABLED_Throughput) {
  const std::string text =
      "TorchEasyRec 推荐系统的特征: hello world, item 12345 clicked!!";  // ~50 chars
  auto time_it = [&](const char* name, auto&& fn) {
    int n = 0;
    auto start = std::chrono::steady_clock::now();
    double seconds = 0;
    size_t tokens = 0;
    while (seconds < 1.0) {
      for (int i = 0; i < 1000; ++i, ++n) tokens += fn();
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    std::printf("%-24s %10.0f texts/s %12.0f tokens/s\n", name, n / seconds, tokens / seconds);
  };
  for (const char* file :
       {"bpe_bytelevel_tokenizer.json", "wordpiece_tokenizer.json", "metaspace_tokenizer.json"}) {
    auto tok = Tokenizer::Load(DataPath(file), "bpe", "test");
    Ids ids;
    time_it(file, [&] {
      ids.clear();
      tok->Encode(text, &ids);
      return ids.size();
    });
  }
  auto normalizer = TextNormalizer::Create(
      kTextLower2Upper | kTextSbc2Dbc | kTextCht2Chs | kTextFilter, 0, "", "test");
  time_it("text_normalizer(default)",
          [&] { return normalizer->Normalize(text).size() > 0 ? 1 : 0; });
}

}  // namespace
}  // namespace tzrec::fg
