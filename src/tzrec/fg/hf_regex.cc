#include "tzrec/fg/hf_regex.h"

#include <utf8proc.h>

#include <limits>

#include "tzrec/common/error.h"
#include "tzrec/fg/text_unicode.h"

namespace tzrec::fg {

namespace {

struct ClassItem {
  enum Kind : uint8_t { kRange, kCategories, kSpace, kWord, kDigit };
  Kind kind = kRange;
  bool negated = false;  // \P{..}, \S, \W, \D
  char32_t lo = 0, hi = 0;
  uint32_t categories = 0;  // mask of 1 << utf8proc category
};

struct CharClass {
  bool negated = false;  // [^...]
  bool icase = false;
  std::vector<ClassItem> items;
};

enum Assertion : int {
  kLineStart,
  kLineEnd,
  kTextStart,
  kTextEnd,
  kTextEndNewline,
  kWordBoundary,
  kNotWordBoundary
};

struct Inst {
  enum Op : uint8_t {
    kChar,       // ch (case-insensitive when icase)
    kClass,      // classes[x]
    kAny,        // any code point but \n
    kSplit,      // try x first, then y
    kJmp,        // go to x
    kLookahead,  // body at pc + 1, ending in kMatch; continue at x; negate: (?!...)
    kAssert,     // x: an Assertion
    kMatch,
  };
  Op op = kMatch;
  bool icase = false;
  bool negate = false;
  char32_t ch = 0;
  int x = 0, y = 0;
};

// Parsed pattern, compiled into instructions afterwards (quantified sub-patterns are emitted
// once per required copy, so the tree is kept until compilation).
struct Node {
  enum Kind { kEmpty, kChar, kClass, kAny, kConcat, kAlt, kRepeat, kLook, kAssert };
  Kind kind = kEmpty;
  char32_t ch = 0;
  bool icase = false;
  int index = 0;         // class index (kClass) or Assertion (kAssert)
  int min = 0, max = 0;  // kRepeat; max < 0: unbounded
  bool greedy = true;
  bool negate = false;  // kLook
  std::vector<std::unique_ptr<Node>> kids;
};

using NodePtr = std::unique_ptr<Node>;

NodePtr MakeNode(Node::Kind kind) {
  auto node = std::make_unique<Node>();
  node->kind = kind;
  return node;
}

// Longest repetition count and program size we accept: tokenizer patterns use {1,3}; anything
// near these limits is a mistake, not a tokenizer.
constexpr int kMaxRepeat = 1000;
constexpr size_t kMaxProgram = 100000;
// Backtracking steps per match attempt before giving up with an error instead of hanging on a
// pathological pattern.
constexpr size_t kMaxSteps = size_t{1} << 26;

bool ParseCategoryName(const std::string& name, uint32_t* mask) {
  using text::CategoryBit;
  struct Entry {
    const char* name;
    uint32_t mask;
  };
  static const Entry kEntries[] = {
      {"L", text::kLetterMask},
      {"Letter", text::kLetterMask},
      {"Lu", CategoryBit(UTF8PROC_CATEGORY_LU)},
      {"Ll", CategoryBit(UTF8PROC_CATEGORY_LL)},
      {"Lt", CategoryBit(UTF8PROC_CATEGORY_LT)},
      {"Lm", CategoryBit(UTF8PROC_CATEGORY_LM)},
      {"Lo", CategoryBit(UTF8PROC_CATEGORY_LO)},
      {"LC", CategoryBit(UTF8PROC_CATEGORY_LU) | CategoryBit(UTF8PROC_CATEGORY_LL) |
                 CategoryBit(UTF8PROC_CATEGORY_LT)},
      {"L&", CategoryBit(UTF8PROC_CATEGORY_LU) | CategoryBit(UTF8PROC_CATEGORY_LL) |
                 CategoryBit(UTF8PROC_CATEGORY_LT)},
      {"M", text::kMarkMask},
      {"Mark", text::kMarkMask},
      {"Mn", CategoryBit(UTF8PROC_CATEGORY_MN)},
      {"Mc", CategoryBit(UTF8PROC_CATEGORY_MC)},
      {"Me", CategoryBit(UTF8PROC_CATEGORY_ME)},
      {"N", text::kNumberMask},
      {"Number", text::kNumberMask},
      {"Nd", CategoryBit(UTF8PROC_CATEGORY_ND)},
      {"Nl", CategoryBit(UTF8PROC_CATEGORY_NL)},
      {"No", CategoryBit(UTF8PROC_CATEGORY_NO)},
      {"P", text::kPunctuationMask},
      {"Punctuation", text::kPunctuationMask},
      {"Pc", CategoryBit(UTF8PROC_CATEGORY_PC)},
      {"Pd", CategoryBit(UTF8PROC_CATEGORY_PD)},
      {"Ps", CategoryBit(UTF8PROC_CATEGORY_PS)},
      {"Pe", CategoryBit(UTF8PROC_CATEGORY_PE)},
      {"Pi", CategoryBit(UTF8PROC_CATEGORY_PI)},
      {"Pf", CategoryBit(UTF8PROC_CATEGORY_PF)},
      {"Po", CategoryBit(UTF8PROC_CATEGORY_PO)},
      {"S", text::kSymbolMask},
      {"Symbol", text::kSymbolMask},
      {"Sm", CategoryBit(UTF8PROC_CATEGORY_SM)},
      {"Sc", CategoryBit(UTF8PROC_CATEGORY_SC)},
      {"Sk", CategoryBit(UTF8PROC_CATEGORY_SK)},
      {"So", CategoryBit(UTF8PROC_CATEGORY_SO)},
      {"Z", text::kSeparatorMask},
      {"Separator", text::kSeparatorMask},
      {"Zs", CategoryBit(UTF8PROC_CATEGORY_ZS)},
      {"Zl", CategoryBit(UTF8PROC_CATEGORY_ZL)},
      {"Zp", CategoryBit(UTF8PROC_CATEGORY_ZP)},
      {"C", text::kOtherMask},
      {"Other", text::kOtherMask},
      {"Cc", CategoryBit(UTF8PROC_CATEGORY_CC)},
      {"Cf", CategoryBit(UTF8PROC_CATEGORY_CF)},
      {"Cs", CategoryBit(UTF8PROC_CATEGORY_CS)},
      {"Co", CategoryBit(UTF8PROC_CATEGORY_CO)},
      {"Cn", CategoryBit(UTF8PROC_CATEGORY_CN)},
  };
  for (const Entry& entry : kEntries) {
    if (name == entry.name) {
      *mask = entry.mask;
      return true;
    }
  }
  return false;
}

bool IsHexDigit(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
int HexValue(char32_t c) {
  if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
  return static_cast<int>(c - 'A' + 10);
}

class Parser {
 public:
  Parser(std::u32string_view pattern, std::vector<CharClass>* classes)
      : pattern_(pattern), classes_(classes) {}

  NodePtr Parse() {
    NodePtr root = ParseAlternation();
    if (pos_ < pattern_.size()) Error("unmatched ')'");
    return root;
  }

 private:
  [[noreturn]] void Error(const std::string& what) const {
    Fail("regex '", text::EncodeUtf8(pattern_), "': ", what, " at character ", pos_);
  }
  bool AtEnd() const { return pos_ >= pattern_.size(); }
  char32_t Peek(size_t ahead = 0) const {
    return pos_ + ahead < pattern_.size() ? pattern_[pos_ + ahead] : 0;
  }
  char32_t Next() {
    if (AtEnd()) Error("unexpected end of pattern");
    return pattern_[pos_++];
  }

  // Alternatives up to ')' or the end. Inline flags like (?i) last until the group closes.
  NodePtr ParseAlternation() {
    bool saved_icase = icase_;
    auto alt = MakeNode(Node::kAlt);
    alt->kids.push_back(ParseConcatenation());
    while (!AtEnd() && Peek() == '|') {
      ++pos_;
      alt->kids.push_back(ParseConcatenation());
    }
    icase_ = saved_icase;
    if (alt->kids.size() == 1) return std::move(alt->kids[0]);
    return alt;
  }

  NodePtr ParseConcatenation() {
    auto concat = MakeNode(Node::kConcat);
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      NodePtr atom = ParseAtom();
      if (!atom) continue;  // a flag group such as (?i)
      atom = ParseQuantifiers(std::move(atom));
      concat->kids.push_back(std::move(atom));
    }
    if (concat->kids.size() == 1) return std::move(concat->kids[0]);
    if (concat->kids.empty()) return MakeNode(Node::kEmpty);
    return concat;
  }

  // Parses {n}, {n,}, {n,m} or {,m} at pos_; leaves pos_ unchanged and returns false when the
  // text is not an interval (Oniguruma then reads '{' literally).
  bool ParseInterval(int* min, int* max) {
    size_t p = pos_ + 1;
    auto read_number = [&](int* out) {
      size_t start = p;
      long value = 0;
      while (p < pattern_.size() && pattern_[p] >= '0' && pattern_[p] <= '9') {
        value = value * 10 + static_cast<long>(pattern_[p] - '0');
        if (value > kMaxRepeat) Error("repetition count above " + std::to_string(kMaxRepeat));
        ++p;
      }
      *out = static_cast<int>(value);
      return p > start;
    };
    int lo = 0, hi = 0;
    bool has_lo = read_number(&lo);
    if (p < pattern_.size() && pattern_[p] == '}') {
      if (!has_lo) return false;
      *min = *max = lo;
    } else if (p < pattern_.size() && pattern_[p] == ',') {
      ++p;
      bool has_hi = read_number(&hi);
      if (p >= pattern_.size() || pattern_[p] != '}' || (!has_lo && !has_hi)) return false;
      *min = has_lo ? lo : 0;
      *max = has_hi ? hi : -1;
      if (has_hi && hi < *min) Error("repetition range {n,m} with m < n");
    } else {
      return false;
    }
    pos_ = p + 1;
    return true;
  }

  NodePtr ParseQuantifiers(NodePtr atom) {
    while (!AtEnd()) {
      int min = 0, max = 0;
      char32_t c = Peek();
      if (c == '*') {
        min = 0, max = -1, ++pos_;
      } else if (c == '+') {
        min = 1, max = -1, ++pos_;
      } else if (c == '?') {
        min = 0, max = 1, ++pos_;
      } else if (c == '{' && ParseInterval(&min, &max)) {
      } else {
        break;
      }
      if (atom->kind == Node::kAssert || atom->kind == Node::kLook || atom->kind == Node::kEmpty) {
        Error("quantifier after an assertion or empty group");
      }
      bool greedy = true;
      if (!AtEnd() && Peek() == '?') {
        greedy = false;
        ++pos_;
      } else if (!AtEnd() && Peek() == '+') {
        Error("possessive quantifiers are not supported");
      }
      auto repeat = MakeNode(Node::kRepeat);
      repeat->min = min;
      repeat->max = max;
      repeat->greedy = greedy;
      repeat->kids.push_back(std::move(atom));
      atom = std::move(repeat);
    }
    return atom;
  }

  NodePtr ParseGroup() {
    // pos_ is just past '('.
    if (!AtEnd() && Peek() == '?') {
      ++pos_;
      char32_t c = Next();
      if (c == ':') return ParseGroupBody(icase_);
      if (c == '=' || c == '!') {
        auto look = MakeNode(Node::kLook);
        look->negate = c == '!';
        look->kids.push_back(ParseGroupBody(icase_));
        return look;
      }
      if (c == '<' && (Peek() == '=' || Peek() == '!')) Error("lookbehind is not supported");
      if (c == '<' || c == 'P' || c == '\'') Error("named groups are not supported");
      if (c == '>') Error("atomic groups are not supported");
      // Flags: (?i) (?-i) (?i:...) (?-i:...)
      --pos_;
      bool on = true;
      bool icase = icase_;
      while (true) {
        c = Next();
        if (c == '-') {
          on = false;
        } else if (c == 'i') {
          icase = on;
        } else if (c == ':') {
          return ParseGroupBody(icase);
        } else if (c == ')') {
          icase_ = icase;  // applies to the rest of the enclosing group
          return nullptr;
        } else {
          Error("unsupported group or flag '(?" + text::EncodeUtf8(std::u32string(1, c)) + "'");
        }
      }
    }
    return ParseGroupBody(icase_);
  }

  NodePtr ParseGroupBody(bool icase) {
    bool saved = icase_;
    icase_ = icase;
    NodePtr body = ParseAlternation();
    icase_ = saved;
    if (AtEnd() || Peek() != ')') Error("missing ')'");
    ++pos_;
    return body;
  }

  // One escape after '\'. Returns true with *item set for class escapes, false with *literal set
  // for a single character; anchors are handled by the caller (outside classes only).
  bool ParseEscape(ClassItem* item, char32_t* literal, bool in_class) {
    char32_t c = Next();
    switch (c) {
      case 'd':
      case 'D':
        item->kind = ClassItem::kDigit;
        item->negated = c == 'D';
        return true;
      case 'w':
      case 'W':
        item->kind = ClassItem::kWord;
        item->negated = c == 'W';
        return true;
      case 's':
      case 'S':
        item->kind = ClassItem::kSpace;
        item->negated = c == 'S';
        return true;
      case 'p':
      case 'P': {
        bool negated = c == 'P';
        std::string name;
        if (!AtEnd() && Peek() == '{') {
          ++pos_;
          if (!AtEnd() && Peek() == '^') {
            negated = !negated;
            ++pos_;
          }
          while (true) {
            char32_t n = Next();
            if (n == '}') break;
            if (n >= 0x80) Error("bad property name");
            name.push_back(static_cast<char>(n));
          }
        } else {
          char32_t n = Next();
          if (n >= 0x80) Error("bad property name");
          name.push_back(static_cast<char>(n));
        }
        uint32_t mask = 0;
        if (!ParseCategoryName(name, &mask)) {
          Error("unsupported property \\p{" + name +
                "} (general categories such as L, Lu, N, Nd, P, S, M, Z, C are supported; "
                "scripts are not)");
        }
        item->kind = ClassItem::kCategories;
        item->categories = mask;
        item->negated = negated;
        return true;
      }
      case 'n':
        *literal = '\n';
        return false;
      case 't':
        *literal = '\t';
        return false;
      case 'r':
        *literal = '\r';
        return false;
      case 'f':
        *literal = '\f';
        return false;
      case 'v':
        *literal = '\v';
        return false;
      case 'a':
        *literal = 0x07;
        return false;
      case 'e':
        *literal = 0x1B;
        return false;
      case '0': {
        char32_t value = 0;
        for (int i = 0; i < 2 && !AtEnd() && Peek() >= '0' && Peek() <= '7'; ++i) {
          value = value * 8 + (Next() - '0');
        }
        *literal = value;
        return false;
      }
      case 'x': {
        char32_t value = 0;
        if (!AtEnd() && Peek() == '{') {
          ++pos_;
          int digits = 0;
          while (!AtEnd() && IsHexDigit(Peek())) {
            value = value * 16 + HexValue(Next());
            if (++digits > 8) Error("bad \\x{...} escape");
          }
          if (digits == 0 || Next() != '}') Error("bad \\x{...} escape");
        } else {
          int digits = 0;
          while (digits < 2 && !AtEnd() && IsHexDigit(Peek())) {
            value = value * 16 + HexValue(Next());
            ++digits;
          }
          if (digits == 0) Error("bad \\x escape");
        }
        if (value > 0x10FFFF) Error("code point out of range");
        *literal = value;
        return false;
      }
      case 'u': {
        char32_t value = 0;
        for (int i = 0; i < 4; ++i) {
          char32_t h = Next();
          if (!IsHexDigit(h)) Error("bad \\u escape");
          value = value * 16 + HexValue(h);
        }
        *literal = value;
        return false;
      }
      default:
        break;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9')) {
      Error(std::string("unsupported escape \\") + static_cast<char>(c) +
            (in_class ? " in a character class" : ""));
    }
    *literal = c;  // escaped punctuation or any other non-alphanumeric character
    return false;
  }

  NodePtr ParseClass() {
    // pos_ is just past '['.
    CharClass cls;
    cls.icase = icase_;
    if (!AtEnd() && Peek() == '^') {
      cls.negated = true;
      ++pos_;
    }
    bool first = true;
    while (true) {
      if (AtEnd()) Error("missing ']'");
      char32_t c = Peek();
      if (c == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      if (c == '[') Error("nested classes and POSIX brackets are not supported");
      if (c == '&' && Peek(1) == '&') Error("class intersection && is not supported");
      ++pos_;
      ClassItem item;
      char32_t lo = c;
      if (c == '\\') {
        if (ParseEscape(&item, &lo, /*in_class=*/true)) {
          cls.items.push_back(item);
          continue;
        }
      }
      char32_t hi = lo;
      if (!AtEnd() && Peek() == '-' && Peek(1) != ']' && pos_ + 1 < pattern_.size()) {
        ++pos_;
        char32_t end = Next();
        if (end == '\\') {
          ClassItem ignored;
          if (ParseEscape(&ignored, &end, /*in_class=*/true)) Error("bad class range");
        } else if (end == '[') {
          Error("bad class range");
        }
        hi = end;
        if (hi < lo) Error("class range out of order");
      }
      item.kind = ClassItem::kRange;
      item.lo = lo;
      item.hi = hi;
      cls.items.push_back(item);
    }
    classes_->push_back(std::move(cls));
    auto node = MakeNode(Node::kClass);
    node->index = static_cast<int>(classes_->size() - 1);
    return node;
  }

  NodePtr ClassNode(const ClassItem& item) {
    CharClass cls;
    cls.icase = icase_;
    cls.items.push_back(item);
    classes_->push_back(std::move(cls));
    auto node = MakeNode(Node::kClass);
    node->index = static_cast<int>(classes_->size() - 1);
    return node;
  }

  NodePtr AssertNode(Assertion assertion) {
    auto node = MakeNode(Node::kAssert);
    node->index = assertion;
    return node;
  }

  NodePtr CharNode(char32_t c) {
    auto node = MakeNode(Node::kChar);
    node->ch = c;
    node->icase = icase_;
    return node;
  }

  NodePtr ParseAtom() {
    char32_t c = Next();
    switch (c) {
      case '(':
        return ParseGroup();
      case '[':
        return ParseClass();
      case '.':
        return MakeNode(Node::kAny);
      case '^':
        return AssertNode(kLineStart);
      case '$':
        return AssertNode(kLineEnd);
      case '*':
      case '+':
      case '?':
        Error("nothing to repeat");
      case '\\': {
        switch (Peek()) {
          case 'A':
            ++pos_;
            return AssertNode(kTextStart);
          case 'z':
            ++pos_;
            return AssertNode(kTextEnd);
          case 'Z':
            ++pos_;
            return AssertNode(kTextEndNewline);
          case 'b':
            ++pos_;
            return AssertNode(kWordBoundary);
          case 'B':
            ++pos_;
            return AssertNode(kNotWordBoundary);
          default:
            break;
        }
        ClassItem item;
        char32_t literal = 0;
        if (ParseEscape(&item, &literal, /*in_class=*/false)) return ClassNode(item);
        return CharNode(literal);
      }
      default:
        return CharNode(c);
    }
  }

  std::u32string_view pattern_;
  std::vector<CharClass>* classes_;
  size_t pos_ = 0;
  bool icase_ = false;
};

bool Nullable(const Node& node) {
  switch (node.kind) {
    case Node::kChar:
    case Node::kClass:
    case Node::kAny:
      return false;
    case Node::kConcat:
      for (const auto& kid : node.kids) {
        if (!Nullable(*kid)) return false;
      }
      return true;
    case Node::kAlt:
      for (const auto& kid : node.kids) {
        if (Nullable(*kid)) return true;
      }
      return false;
    case Node::kRepeat:
      return node.min == 0 || Nullable(*node.kids[0]);
    default:
      return true;
  }
}

}  // namespace

struct HfRegex::Program {
  std::vector<Inst> insts;
  std::vector<CharClass> classes;
  std::u32string pattern;
};

namespace {

class Compiler {
 public:
  explicit Compiler(HfRegex::Program* program) : program_(program) {}

  void Compile(const Node& root) {
    Emit(root);
    Add(Inst::kMatch);
  }

 private:
  std::vector<Inst>& insts() { return program_->insts; }
  int Pc() const { return static_cast<int>(program_->insts.size()); }

  int Add(Inst::Op op) {
    if (program_->insts.size() >= kMaxProgram) {
      Fail("regex '", text::EncodeUtf8(program_->pattern),
           "': pattern too large after expanding repetitions");
    }
    Inst inst;
    inst.op = op;
    program_->insts.push_back(inst);
    return Pc() - 1;
  }

  void Emit(const Node& node) {
    switch (node.kind) {
      case Node::kEmpty:
        return;
      case Node::kChar: {
        int pc = Add(Inst::kChar);
        insts()[pc].ch = node.ch;
        insts()[pc].icase = node.icase;
        return;
      }
      case Node::kClass: {
        int pc = Add(Inst::kClass);
        insts()[pc].x = node.index;
        return;
      }
      case Node::kAny:
        Add(Inst::kAny);
        return;
      case Node::kAssert: {
        int pc = Add(Inst::kAssert);
        insts()[pc].x = node.index;
        return;
      }
      case Node::kConcat:
        for (const auto& kid : node.kids) Emit(*kid);
        return;
      case Node::kAlt: {
        std::vector<int> jumps;
        for (size_t i = 0; i + 1 < node.kids.size(); ++i) {
          int split = Add(Inst::kSplit);
          insts()[split].x = split + 1;
          Emit(*node.kids[i]);
          jumps.push_back(Add(Inst::kJmp));
          insts()[split].y = Pc();
        }
        Emit(*node.kids.back());
        for (int jump : jumps) insts()[jump].x = Pc();
        return;
      }
      case Node::kLook: {
        int look = Add(Inst::kLookahead);
        insts()[look].negate = node.negate;
        Emit(*node.kids[0]);
        Add(Inst::kMatch);
        insts()[look].x = Pc();
        return;
      }
      case Node::kRepeat: {
        const Node& body = *node.kids[0];
        for (int i = 0; i < node.min; ++i) Emit(body);
        if (node.max < 0) {
          // A body that can match empty would loop forever here; tokenizer patterns never need it.
          if (Nullable(body)) {
            Fail("regex '", text::EncodeUtf8(program_->pattern),
                 "': unbounded repetition of a sub-pattern that can match empty is not supported");
          }
          int split = Add(Inst::kSplit);
          Emit(body);
          int jump = Add(Inst::kJmp);
          insts()[jump].x = split;
          SetBranches(split, split + 1, Pc(), node.greedy);
        } else {
          std::vector<int> splits;
          for (int i = node.min; i < node.max; ++i) {
            splits.push_back(Add(Inst::kSplit));
            Emit(body);
          }
          for (int split : splits) SetBranches(split, split + 1, Pc(), node.greedy);
        }
        return;
      }
    }
  }

  void SetBranches(int split, int body, int exit, bool greedy) {
    insts()[split].x = greedy ? body : exit;
    insts()[split].y = greedy ? exit : body;
  }

  HfRegex::Program* program_;
};

bool ItemMatches(const ClassItem& item, char32_t c) {
  bool hit = false;
  switch (item.kind) {
    case ClassItem::kRange:
      hit = c >= item.lo && c <= item.hi;
      break;
    case ClassItem::kCategories:
      hit = text::InCategories(c, item.categories);
      break;
    case ClassItem::kSpace:
      hit = text::IsWhiteSpace(c);
      break;
    case ClassItem::kWord:
      hit = text::IsWordChar(c);
      break;
    case ClassItem::kDigit:
      hit = c < 0x80 ? (c >= '0' && c <= '9') : text::Category(c) == UTF8PROC_CATEGORY_ND;
      break;
  }
  return hit != item.negated;
}

bool ClassMatches(const CharClass& cls, char32_t c) {
  bool hit = false;
  for (const ClassItem& item : cls.items) {
    if (ItemMatches(item, c)) {
      hit = true;
      break;
    }
  }
  if (!hit && cls.icase) {
    char32_t lower = text::ToLower(c), upper = text::ToUpper(c);
    for (const ClassItem& item : cls.items) {
      if ((lower != c && ItemMatches(item, lower)) || (upper != c && ItemMatches(item, upper))) {
        hit = true;
        break;
      }
    }
  }
  return hit != cls.negated;
}

bool IsWordAt(std::u32string_view text, size_t pos) {
  return pos < text.size() && text::IsWordChar(text[pos]);
}

bool AssertionHolds(int assertion, std::u32string_view text, size_t pos) {
  size_t n = text.size();
  switch (assertion) {
    case kLineStart:
      return pos == 0 || text[pos - 1] == '\n';
    case kLineEnd:
      return pos == n || text[pos] == '\n';
    case kTextStart:
      return pos == 0;
    case kTextEnd:
      return pos == n;
    case kTextEndNewline:
      return pos == n || (pos + 1 == n && text[pos] == '\n');
    case kWordBoundary:
    case kNotWordBoundary: {
      bool boundary = (pos > 0 && IsWordAt(text, pos - 1)) != IsWordAt(text, pos);
      return boundary == (assertion == kWordBoundary);
    }
    default:
      return false;
  }
}

// Backtracking run from `pc` at `start`; threads are (pc, position) pairs on an explicit stack
// (one per thread, shared by nested lookahead runs above their base index).
bool RunProgram(const HfRegex::Program& program, std::u32string_view text, size_t start, int pc0,
                size_t* end) {
  thread_local std::vector<std::pair<int, size_t>> stack;
  const size_t base = stack.size();
  stack.emplace_back(pc0, start);
  size_t steps = 0;
  const Inst* insts = program.insts.data();
  while (stack.size() > base) {
    auto [pc, pos] = stack.back();
    stack.pop_back();
    while (true) {
      if (++steps > kMaxSteps) {
        stack.resize(base);
        Fail("regex '", text::EncodeUtf8(program.pattern), "': too much backtracking on a text of ",
             text.size(), " characters");
      }
      const Inst& inst = insts[pc];
      bool ok = true;
      switch (inst.op) {
        case Inst::kChar:
          ok = pos < text.size() &&
               (text[pos] == inst.ch ||
                (inst.icase && text::ToLower(text[pos]) == text::ToLower(inst.ch)));
          if (ok) ++pos, ++pc;
          break;
        case Inst::kClass:
          ok = pos < text.size() && ClassMatches(program.classes[inst.x], text[pos]);
          if (ok) ++pos, ++pc;
          break;
        case Inst::kAny:
          ok = pos < text.size() && text[pos] != '\n';
          if (ok) ++pos, ++pc;
          break;
        case Inst::kSplit:
          stack.emplace_back(inst.y, pos);
          pc = inst.x;
          break;
        case Inst::kJmp:
          pc = inst.x;
          break;
        case Inst::kLookahead: {
          size_t look_end = 0;
          ok = RunProgram(program, text, pos, pc + 1, &look_end) != inst.negate;
          if (ok) pc = inst.x;
          break;
        }
        case Inst::kAssert:
          ok = AssertionHolds(inst.x, text, pos);
          if (ok) ++pc;
          break;
        case Inst::kMatch:
          *end = pos;
          stack.resize(base);
          return true;
      }
      if (!ok) break;
    }
  }
  return false;
}

}  // namespace

HfRegex::HfRegex(std::u32string_view pattern) {
  auto program = std::make_shared<Program>();
  program->pattern = std::u32string(pattern);
  Parser parser(pattern, &program->classes);
  NodePtr root = parser.Parse();
  Compiler(program.get()).Compile(*root);
  program_ = std::move(program);
}

HfRegex HfRegex::Literal(std::u32string_view text) {
  auto program = std::make_shared<Program>();
  program->pattern = std::u32string(text);
  for (char32_t c : text) {
    Inst inst;
    inst.op = Inst::kChar;
    inst.ch = c;
    program->insts.push_back(inst);
  }
  program->insts.emplace_back();  // kMatch
  HfRegex regex;
  regex.program_ = std::move(program);
  return regex;
}

bool HfRegex::MatchAt(std::u32string_view text, size_t start, size_t* end) const {
  return RunProgram(*program_, text, start, 0, end);
}

void HfRegex::FindAll(std::u32string_view text,
                      std::vector<std::pair<size_t, size_t>>* matches) const {
  matches->clear();
  size_t search_from = 0;
  size_t last_match_end = std::numeric_limits<size_t>::max();
  while (search_from <= text.size()) {
    size_t start = search_from, end = 0;
    bool found = false;
    for (; start <= text.size(); ++start) {
      if (RunProgram(*program_, text, start, 0, &end)) {
        found = true;
        break;
      }
    }
    if (!found) return;
    if (end == start && end == last_match_end) {
      search_from = start + 1;
      continue;
    }
    matches->emplace_back(start, end);
    search_from = end;
    last_match_end = end;
  }
}

}  // namespace tzrec::fg
