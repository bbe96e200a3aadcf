// RegexReplace: each value of one input with the matches of `regex_pattern` (std::regex,
// ECMAScript grammar; a list of patterns applies in order) replaced by `replacement`
// (default "": delete the matches; $1, $& etc. refer to groups). Values that become empty
// are dropped; a missing input yields nothing (the feature's default_value applies).
#include <regex>

#include "tzrec/fg/builtin_ops/builtin_op.h"

namespace tzrec::fg::builtin_ops {
namespace {

class RegexReplace : public Op {
 public:
  RegexReplace(std::vector<std::regex> patterns, std::string replacement)
      : patterns_(std::move(patterns)), replacement_(std::move(replacement)) {}
  int32_t output_kind() const override { return TZREC_FG_OUTPUT_TEXTS; }
  void Compute(const tzrec_fg_input* inputs, size_t, const tzrec_fg_output& out) const override {
    const tzrec_fg_input& in = inputs[0];
    std::string value;
    for (size_t i = 0; i < in.num_items; ++i) {
      value.assign(in.items[i].data, in.items[i].size);
      for (const std::regex& pattern : patterns_) value = std::regex_replace(value, pattern, replacement_);
      if (!value.empty()) out.append_text(out.context, value.data(), value.size());
    }
  }

 private:
  std::vector<std::regex> patterns_;
  std::string replacement_;
};

}  // namespace

std::unique_ptr<Op> CreateRegexReplace(const nlohmann::json& params,
                                       const std::vector<std::string>& input_names) {
  CheckInputCount("RegexReplace", input_names, 1, "the text");
  std::vector<std::string> texts;
  auto it = params.find("regex_pattern");
  if (it != params.end() && it->is_string()) {
    texts.push_back(it->get<std::string>());
  } else if (it != params.end() && it->is_array()) {
    for (const auto& p : *it) {
      if (!p.is_string()) throw OpError("param 'regex_pattern' must be a string or a list of strings");
      texts.push_back(p.get<std::string>());
    }
  } else if (it != params.end()) {
    throw OpError("param 'regex_pattern' must be a string or a list of strings");
  }
  if (texts.empty()) throw OpError("param 'regex_pattern' must be set");
  std::vector<std::regex> patterns;
  for (const std::string& text : texts) {
    try {
      patterns.emplace_back(text, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw OpError("param 'regex_pattern': '" + text + "' is not a valid regular expression: " + e.what());
    }
  }
  return std::make_unique<RegexReplace>(std::move(patterns), StringParam(params, "replacement", ""));
}

}  // namespace tzrec::fg::builtin_ops
