#include "tzrec/tools/gen_data_raw.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>

#include "tzrec/fg/bucketizer.h"
#include "tzrec/fg/proto_fields.h"
#include "tzrec/protos/feature.pb.h"

namespace tzrec::gen_data_internal {

int64_t SampleZipf(std::mt19937_64& rng, int64_t n, double s) {
  double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  double one_minus_s = 1.0 - s;
  double top = std::pow(static_cast<double>(n) + 1.0, one_minus_s);
  double x = std::pow((top - 1.0) * u + 1.0, 1.0 / one_minus_s);
  return std::min<int64_t>(n - 1, std::max<int64_t>(0, static_cast<int64_t>(x) - 1));
}

std::string FormatFloat(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", value);
  return buf;
}

std::vector<RawInput> PlanRawInputs(const std::vector<fg::FeatureInfo>& infos,
                                           protos::FgMode mode) {
  std::vector<RawInput> plan;
  std::set<std::string> seen;
  for (const auto& info : infos) {
    for (size_t k = 0; k < info.inputs.size(); ++k) {
      const fg::FeatureInput& input = info.inputs[k];
      if (input.is_all || input.side == fg::Side::kConst) continue;
      if (input.side == fg::Side::kFeature && mode == protos::FG_DAG) continue;
      if (!seen.insert(input.column).second) continue;
      plan.push_back({input.column, &info, k, input.is_sequence});
    }
  }
  return plan;
}

std::string RawValueDrawer::Token(const fg::FeatureInfo& info, std::mt19937_64& rng,
                                  const char* prefix, int64_t domain) const {
  const fg::Bucketizer& b = *info.bucketizer;
  if (b.kind() == fg::Bucketizer::Kind::kNumBuckets) {
    return std::to_string(SampleZipf(rng, b.num_embeddings(), options_.zipf_exponent));
  }
  if (b.kind() == fg::Bucketizer::Kind::kVocab && !b.effective_vocab_list().empty()) {
    // The entries users list (not the reserved default / "<OOV>" slots).
    std::vector<std::string> list;
    for (const auto& entry : b.effective_vocab_list()) {
      if (!entry.empty() && entry != "<OOV>") list.push_back(entry);
    }
    if (list.empty()) return "";
    return list[SampleZipf(rng, static_cast<int64_t>(list.size()), options_.zipf_exponent)];
  }
  if (b.kind() == fg::Bucketizer::Kind::kVocab && !b.effective_vocab_dict().empty()) {
    const auto& dict = b.effective_vocab_dict();
    return dict[SampleZipf(rng, static_cast<int64_t>(dict.size()), options_.zipf_exponent)].first;
  }
  return prefix + std::to_string(SampleZipf(rng, domain, options_.zipf_exponent));
}

bool NeedsNonnegativeInputs(const fg::FeatureInfo& info) {
  std::string text;
  for (const char* field : {"normalizer", "expression"}) {
    if (info.type == "raw_feature" && std::string(field) == "expression") continue;  // an input name
    if (fg::FieldOf(*info.config, field)) text += fg::StringField(*info.config, field) + " ";
  }
  return text.find("log") != std::string::npos || text.find("sqrt") != std::string::npos ||
         text.find("pow") != std::string::npos;
}

std::string RawValueDrawer::Number(const fg::FeatureInfo& info,
                                   std::normal_distribution<double>& normal,
                                   std::mt19937_64& rng) const {
  const bool nonnegative = NeedsNonnegativeInputs(info);
  const auto& bounds = info.bucketizer->boundaries();
  double value;
  if (!bounds.empty()) {
    double lo = bounds.front(), hi = bounds.back();
    double pad = bounds.size() > 1 ? (hi - lo) / static_cast<double>(bounds.size() - 1) : 1.0;
    value = std::uniform_real_distribution<double>(lo - pad, hi + pad)(rng);
  } else {
    value = normal(rng);
  }
  return FormatFloat(nonnegative ? std::fabs(value) : value);
}

std::string RawValueDrawer::RawValue(const RawInput& raw, std::mt19937_64& rng) const {
  const fg::FeatureInfo& info = *raw.info;
  const std::string& sep = info.separator;
  const std::string& t = info.type;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const int64_t domain = std::max<int64_t>(2, std::min<int64_t>(info.num_embeddings * 2, 100000));
  auto several = [&](int n, const std::function<std::string()>& one) {
    std::string text;
    for (int i = 0; i < n; ++i) text += (i ? sep : std::string()) + one();
    return text;
  };
  if (t == "id_feature" || t == "combo_feature") {
    int n = uniform(rng) < options_.multi_value_fraction ? 2 : 1;
    return several(n, [&] {
      std::string token = Token(info, rng, t == "id_feature" ? "v" : "c", t == "id_feature" ? domain : 30);
      if (info.weighted) token += ":" + FormatFloat(0.5 + uniform(rng));
      return token;
    });
  }
  if (t == "raw_feature" || t == "expr_feature") {
    int n = t == "raw_feature" ? std::max(1, info.value_dim) : 1;
    return several(n, [&] { return Number(info, normal, rng); });
  }
  if (t == "lookup_feature") {
    const int dim = std::max(1, info.value_dim);
    const bool discrete = info.bucketizer->kind() != fg::Bucketizer::Kind::kNone &&
                          info.bucketizer->kind() != fg::Bucketizer::Kind::kBoundaries;
    if (raw.input_index == 1) return several(1 + (uniform(rng) < 0.3), [&] { return "k" + std::to_string(rng() % 20); });
    return several(1 + rng() % 6, [&] {
      std::string value;
      if (discrete) {
        value = Token(info, rng, "v", domain);
      } else {
        for (int d = 0; d < dim; ++d) value += (d ? "," : "") + Number(info, normal, rng);
      }
      return "k" + std::to_string(rng() % 20) + ":" + value;
    });
  }
  if (t == "match_feature") {
    if (raw.input_index == 1) return "p" + std::to_string(rng() % 5);
    if (raw.input_index == 2) return "s" + std::to_string(rng() % 8);
    const bool discrete = info.bucketizer->kind() != fg::Bucketizer::Kind::kNone &&
                          info.bucketizer->kind() != fg::Bucketizer::Kind::kBoundaries;
    std::string text;
    for (int p = 0; p < 5; ++p) {
      if (uniform(rng) < 0.4) continue;
      if (!text.empty()) text += "|";
      text += "p" + std::to_string(p) + "^";
      for (int s = 0, first = 1; s < 8; ++s) {
        if (uniform(rng) < 0.5) continue;
        text += (first ? "" : ",") + ("s" + std::to_string(s)) + ":" +
                (discrete ? Token(info, rng, "v", domain) : Number(info, normal, rng));
        first = 0;
      }
    }
    return text;
  }
  if (t == "overlap_feature") {
    return several(1 + rng() % 4, [&] { return "w" + std::to_string(SampleZipf(rng, 30, 1.1)); });
  }
  if (t == "kv_dot_product") {
    return several(1 + rng() % 4, [&] {
      return "k" + std::to_string(rng() % 12) + ":" + FormatFloat(uniform(rng));
    });
  }
  if (t == "bool_mask_feature") {
    // Values and mask both hold 3 entries so they line up.
    if (raw.input_index == 1) return several(3, [&] { return std::string(uniform(rng) < 0.6 ? "true" : "false"); });
    return several(3, [&] { return Token(info, rng, "v", domain); });
  }
  if (t == "combine_feature") {
    const auto& config = static_cast<const protos::CombineFeature&>(*info.config);
    if (config.value_map_size() > 0) {
      std::vector<std::string> keys;
      for (const auto& kv : config.value_map()) keys.push_back(kv.first);
      std::sort(keys.begin(), keys.end());
      return several(1 + rng() % 2, [&] { return keys[rng() % keys.size()]; });
    }
    if (info.bucketizer->kind() == fg::Bucketizer::Kind::kNumBuckets) {
      return std::to_string(rng() % info.bucketizer->num_embeddings());
    }
    return Number(info, normal, rng);
  }
  if (t == "custom_feature") {
    // Text for the string operators (EditDistance, RegexReplace), numbers otherwise (SeqExpr
    // formulas, distances).
    const std::string op = static_cast<const protos::CustomFeature&>(*info.config).operator_name();
    if (op == "EditDistance" || op == "RegexReplace") {
      return "w" + std::to_string(SampleZipf(rng, 30, 1.1)) + "w" + std::to_string(rng() % 5);
    }
    return FormatFloat(100.0 * uniform(rng));
  }
  if (t == "tokenize_feature") {
    static const char* kWords[] = {"red", "blue", "shoe", "dress", "phone", "case", "summer",
                                   "winter", "sale", "new", "women", "men", "kids", "sport"};
    std::string text;
    const int n = 2 + static_cast<int>(rng() % 5);
    for (int i = 0; i < n; ++i) text += (i ? " " : "") + std::string(kWords[rng() % 14]);
    return text;
  }
  return Token(info, rng, "v", domain);
}

}  // namespace tzrec::gen_data_internal
