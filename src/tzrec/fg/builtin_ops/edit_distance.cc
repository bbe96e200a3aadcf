// EditDistance: Levenshtein distance (insert, delete, substitute, each cost 1) between the
// values of two inputs, e.g. a query and an item title. operator_params:
//   encoding  "latin" (default, as TorchEasyRec's pyfg): compare bytes;
//             "utf-8": compare Unicode code points (invalid bytes count one each).
// A missing input yields nothing (the feature's default_value applies).
#include <algorithm>
#include <cctype>
#include <cstdint>

#include "tzrec/fg/builtin_ops/builtin_op.h"

namespace tzrec::fg::builtin_ops {
namespace {

// Code points of UTF-8 text; a byte that starts no valid sequence becomes 0x110000 + byte.
void DecodeUtf8(std::string_view text, std::vector<uint32_t>* out) {
  out->clear();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool valid = len > 0 && i + len <= n;
    for (size_t k = 1; valid && k < len; ++k) valid = (s[i + k] & 0xC0) == 0x80;
    if (!valid) {
      out->push_back(0x110000u + c);
      ++i;
      continue;
    }
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    out->push_back(cp);
    i += len;
  }
}

template <typename T>
size_t Levenshtein(const T* a, size_t n, const T* b, size_t m) {
  if (n < m) {
    std::swap(a, b);
    std::swap(n, m);
  }
  std::vector<size_t> row(m + 1);
  for (size_t j = 0; j <= m; ++j) row[j] = j;
  for (size_t i = 1; i <= n; ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= m; ++j) {
      const size_t above = row[j];
      row[j] = std::min({above + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[m];
}

class EditDistance : public Op {
 public:
  explicit EditDistance(bool utf8) : utf8_(utf8) {}
  int32_t output_kind() const override { return TZREC_FG_OUTPUT_NUMBERS; }
  void Compute(const tzrec_fg_input* inputs, size_t, const tzrec_fg_output& out) const override {
    if (inputs[0].missing || inputs[1].missing) return;
    const std::string_view a = View(inputs[0].text), b = View(inputs[1].text);
    size_t distance;
    if (utf8_) {
      std::vector<uint32_t> ca, cb;
      DecodeUtf8(a, &ca);
      DecodeUtf8(b, &cb);
      distance = Levenshtein(ca.data(), ca.size(), cb.data(), cb.size());
    } else {
      distance = Levenshtein(a.data(), a.size(), b.data(), b.size());
    }
    out.append_number(out.context, static_cast<double>(distance));
  }

 private:
  bool utf8_;
};

}  // namespace

std::unique_ptr<Op> CreateEditDistance(const nlohmann::json& params,
                                       const std::vector<std::string>& input_names) {
  CheckInputCount("EditDistance", input_names, 2, "two texts");
  std::string encoding = StringParam(params, "encoding", "latin");
  std::string lower = encoding;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "utf-8" || lower == "utf8") return std::make_unique<EditDistance>(true);
  if (lower == "latin" || lower == "latin1" || lower == "latin-1") return std::make_unique<EditDistance>(false);
  throw OpError("param 'encoding': '" + encoding + "' is not one of latin, utf-8");
}

}  // namespace tzrec::fg::builtin_ops
