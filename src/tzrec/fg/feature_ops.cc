// The operator of each feature type (id, raw, combo, lookup, match, expr, overlap,
// kv_dot_product, bool_mask, combine, tokenize; custom through custom_op.h): what one row (or
// sequence step) of a feature yields from its inputs, before default_value and bucketizing.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/fg/custom_op.h"
#include "tzrec/fg/expression.h"
#include "tzrec/fg/feature_op.h"
#include "tzrec/fg/normalizer.h"
#include "tzrec/fg/proto_fields.h"
#include "tzrec/fg/tokenizer.h"
#include "tzrec/protos/feature.pb.h"

namespace tzrec::fg {
namespace {

using google::protobuf::Message;

bool ParseNumbers(const InputItems& in, std::vector<double>* out, std::string* error) {
  for (std::string_view item : in.items) {
    double value;
    if (!ParseDouble(item, &value)) {
      *error = StrCat("'", Printable(item), "' is not a number");
      return false;
    }
    out->push_back(value);
  }
  return true;
}

bool IsTrue(std::string_view text) {
  text = Trim(text);
  if (text == "1") return true;
  if (text.size() != 4) return false;
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "true";
}

// Splits "key<delim>value" at the first delimiter; no delimiter: weight 1.
void SplitKeyValue(std::string_view item, std::string_view delim, std::string_view* key,
                   std::string_view* value) {
  size_t pos = item.find(delim);
  if (pos == std::string_view::npos) {
    *key = item;
    *value = {};
  } else {
    *key = item.substr(0, pos);
    *value = item.substr(pos + delim.size());
  }
}

// ------------------------------------------------------------------ ops per feature type

class IdOp : public FeatureOp {
 public:
  explicit IdOp(bool weighted) : weighted_(weighted) {}
  OpValues::Kind kind() const override { return OpValues::Kind::kTexts; }
  bool Compute(const std::vector<InputItems>& in, OpValues* out, std::string* error) const override {
    for (std::string_view item : in[0].items) {
      if (!weighted_) {
        out->texts.emplace_back(item);
        continue;
      }
      size_t pos = item.rfind(':');
      float weight = 1.0f;
      if (pos != std::string_view::npos && !ParseFloat(item.substr(pos + 1), &weight)) {
        *error = StrCat("'", Printable(item), "' is not id:weight");
        return false;
      }
      out->texts.emplace_back(item.substr(0, pos));
      out->weights.push_back(weight);
    }
    return true;
  }

 private:
  bool weighted_;
};

class RawOp : public FeatureOp {
 public:
  explicit RawOp(Normalizer normalizer) : normalizer_(std::move(normalizer)) {}
  OpValues::Kind kind() const override { return OpValues::Kind::kNumbers; }
  bool Compute(const std::vector<InputItems>& in, OpValues* out, std::string* error) const override {
    if (!ParseNumbers(in[0], &out->numbers, error)) return false;
    if (normalizer_.active()) {
      for (double& v : out->numbers) v = normalizer_.Apply(v);
    }
    return true;
  }

 private:
  Normalizer normalizer_;
};

// Cartesian product of all inputs' values joined by "_" (first input varies slowest).
class ComboOp : public FeatureOp {
 public:
  OpValues::Kind kind() const override { return OpValues::Kind::kTexts; }
  bool Compute(const std::vector<InputItems>& in, OpValues* out, std::string*) const override {
    for (const InputItems& input : in) {
      if (input.items.empty()) return true;
    }
    std::vector<std::string> current(in[0].items.begin(), in[0].items.end());
    for (size_t i = 1; i < in.size(); ++i) {
      std::vector<std::string> next;
      next.reserve(current.size() * in[i].items.size());
      for (const std::string& prefix : current) {
        for (std::string_view item : in[i].items) {
          std::string joined;
          joined.reserve(prefix.size() + 1 + item.size());
          joined.append(prefix).append("_").append(item);
          next.push_back(std::move(joined));
        }
      }
      current.swap(next);
    }
    out->texts = std::move(current);
    return true;
  }
};

enum class Combiner { kNone, kSum, kMean, kMin, kMax, kCount };

Combiner ParseCombiner(const std::string& text, const std::string& where) {
  std::string lower = text;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.empty()) return Combiner::kNone;
  if (lower == "sum") return Combiner::kSum;
  if (lower == "mean" || lower == "avg") return Combiner::kMean;
  if (lower == "min") return Combiner::kMin;
  if (lower == "max") return Combiner::kMax;
  if (lower == "count") return Combiner::kCount;
  Fail(where, ".combiner: '", text, "' is not one of sum, mean, min, max, count");
}

void Combine(Combiner combiner, std::vector<double>* values) {
  if (combiner == Combiner::kNone || values->empty()) return;
  double result = 0;
  switch (combiner) {
    case Combiner::kSum:
    case Combiner::kMean:
      for (double v : *values) result += v;
      if (combiner == Combiner::kMean) result /= static_cast<double>(values->size());
      break;
    case Combiner::kMin: result = *std::min_element(values->begin(), values->end()); break;
    case Combiner::kMax: result = *std::max_element(values->begin(), values->end()); break;
    case Combiner::kCount: result = static_cast<double>(values->size()); break;
    case Combiner::kNone: break;
  }
  values->assign(1, result);
}

class LookupOp : public FeatureOp {
 public:
  LookupOp(const FeatureInfo& info, const std::string& where)
      : normalizer_(StringField(*info.config, "normalizer"), where + ".normalizer") {
    const Message& msg = *info.config;
    need_key_ = BoolField(msg, "need_key");
    value_dim_ = info.value_dim;
    value_separator_ = StringField(msg, "value_separator");
    // An id bucketizer needs the looked-up values as text (TorchEasyRec forces
    // need_discrete then, and no combiner).
    Bucketizer::Kind b = info.bucketizer->kind();
    discrete_ = BoolField(msg, "need_discrete") || need_key_ ||
                (b != Bucketizer::Kind::kNone && b != Bucketizer::Kind::kBoundaries);
    // value_dim > 1: each looked-up value is a vector (split by value_separator), not combined.
    combiner_ = discrete_ || value_dim_ > 1 ? Combiner::kNone : ParseCombiner(StringField(msg, "combiner"), where);
  }
  OpValues::Kind kind() const override {
    return discrete_ ? OpValues::Kind::kTexts : OpValues::Kind::kNumbers;
  }
  bool Compute(const std::vector<InputItems>& in, OpValues* out, std::string* error) const override {
    const InputItems& map = in[0];
    const InputItems& keys = in[1];
    if (map.items.empty() || keys.items.empty()) return true;
    for (std::string_view key : keys.items) {
      for (std::string_view entry : map.items) {
        std::string_view k, v;
        if (entry.find(':') == std::string_view::npos) {
          *error = StrCat("map entry '", Printable(entry), "' is not key:value");
          return false;
        }
        SplitKeyValue(entry, ":", &k, &v);
        if (k != key) continue;
        if (discrete_) {
          out->texts.push_back(need_key_ ? StrCat(key, "_", v) : std::string(v));
        } else if (value_dim_ > 1) {
          bool ok = true;
          ForEachPiece(v, value_separator_, [&](std::string_view piece) {
            double number;
            if (ok && !ParseDouble(piece, &number)) {
              *error = StrCat("map value '", Printable(v), "' is not a list of numbers");
              ok = false;
            }
            out->numbers.push_back(number);
          });
          if (!ok) return false;
        } else {
          double number;
          if (!ParseDouble(v, &number)) {
            *error = StrCat("map value '", Printable(v), "' of key '", Printable(k), "' is not a number");
            return false;
          }
          out->numbers.push_back(number);
        }
        break;
      }
    }
    if (!discrete_) {
      Combine(combiner_, &out->numbers);
      if (normalizer_.active()) {
        for (double& x : out->numbers) x = normalizer_.Apply(x);
      }
    }
    return true;
  }

 private:
  Normalizer normalizer_;
  bool need_key_ = false;
  bool discrete_ = false;
  int value_dim_ = 1;
  std::string value_separator_;
  Combiner combiner_ = Combiner::kSum;
};

// nested map text "pk^sk:v,sk:v|pk^sk:v"; pkey / skey may be ALL.
class MatchOp : public FeatureOp {
 public:
  MatchOp(const FeatureInfo& info, const std::string& where)
      : normalizer_(StringField(*info.config, "normalizer"), where + ".normalizer") {
    const Message& msg = *info.config;
    show_pkey_ = BoolField(msg, "show_pkey");
    show_skey_ = BoolField(msg, "show_skey");
    Bucketizer::Kind b = info.bucketizer->kind();
    discrete_ = BoolField(msg, "need_discrete") || show_pkey_ || show_skey_ ||
                (b != Bucketizer::Kind::kNone && b != Bucketizer::Kind::kBoundaries);
    sum_ = !info.is_sparse;
    pkey_all_ = info.inputs[1].is_all;
    skey_all_ = info.inputs[2].is_all;
  }
  OpValues::Kind kind() const override {
    return discrete_ ? OpValues::Kind::kTexts : OpValues::Kind::kNumbers;
  }
  bool Compute(const std::vector<InputItems>& in, OpValues* out, std::string* error) const override {
    if (in[0].missing) return true;
    const InputItems& pkeys = in[1];
    const InputItems& skeys = in[2];
    if ((!pkey_all_ && pkeys.items.empty()) || (!skey_all_ && skeys.items.empty())) return true;
    bool ok = true;
    ForEachPiece(in[0].text, "|", [&](std::string_view group) {
      if (!ok || group.empty()) return;
      size_t caret = group.find('^');
      if (caret == std::string_view::npos) {
        *error = StrCat("nested map entry '", Printable(group), "' lacks '^' (expected pk^sk:v,sk:v|...)");
        ok = false;
        return;
      }
      std::string_view pk = group.substr(0, caret);
      if (!pkey_all_ && std::find(pkeys.items.begin(), pkeys.items.end(), pk) == pkeys.items.end()) return;
      ForEachPiece(group.substr(caret + 1), ",", [&](std::string_view pair) {
        if (!ok || pair.empty()) return;
        std::string_view sk, v;
        SplitKeyValue(pair, ":", &sk, &v);
        if (!skey_all_ && std::find(skeys.items.begin(), skeys.items.end(), sk) == skeys.items.end()) return;
        if (discrete_) {
          std::string text;
          if (show_pkey_) text.append(pk).append("_");
          if (show_skey_) text.append(sk).append("_");
          text.append(v);
          out->texts.push_back(std::move(text));
        } else {
          double number;
          if (!ParseDouble(v, &number)) {
            *error = StrCat("nested map value '", Printable(v), "' is not a number");
            ok = false;
            return;
          }
          out->numbers.push_back(normalizer_.active() ? normalizer_.Apply(number) : number);
        }
      });
    });
    if (ok && sum_ && out->numbers.size() > 1) Combine(Combiner::kSum, &out->numbers);
    return ok;
  }

 private:
  Normalizer normalizer_;
  bool show_pkey_ = false, show_skey_ = false, discrete_ = false, sum_ = false;
  bool pkey_all_ = false, skey_all_ = false;
};

class ExprOp : public FeatureOp {
 public:
  ExprOp(const FeatureInfo& info, const std::string& where) {
    std::vector<std::string> names;
    for (const FeatureInput& input : info.inputs) names.push_back(input.name);
    expression_ = Expression::Compile(StringField(*info.config, "expression"), names,
                                      StrCat(where, " '", info.name, "'"));
  }
  OpValues::Kind kind() const override { return OpValues::Kind::kNumbers; }
  bool Compute(const std::vector<InputItems>& in, OpValues* out, std::string* error) const override {
    thread_local std::vector<std::vector<double>> values;
    values.resize(in.size());
    std::vector<ExpressionInput> bound(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].items.empty()) return true;  // any missing variable: the default applies
      values[i].clear();
      if (!ParseNumbers(in[i], &values[i], error)) return false;
      bound[i] = ExpressionInput{values[i].data(), values[i].size()};
    }
    try {
      expression_->Evaluate(bound, &out->numbers);
    } catch (const Error& e) {
      *error = e.what();
      return false;
    }
    return true;
  }

 private:
  std::unique_ptr<Expression> expression_;
};

class OverlapOp : public FeatureOp {
 public:
  OverlapOp(const FeatureInfo& info, const std::string& where)
      : normalizer_(StringField(*info.config, "normalizer"), where + ".normalizer") {
    method_ = StringField(*info.config, "method");
    static const char* kMethods[] = {"query_common_ratio", "title_common_ratio", "is_contain",
                                     "is_equal", "index_of", "proximity_min_cover",
                                     "proximity_min_dist", "proximity_max_dist",
                                     "proximity_avg_dist"};
    if (std::find(std::begin(kMethods), std::end(kMethods), method_) == std::end(kMethods)) {
      Fail(where, ".method: '", method_, "' is not one of query_common_ratio, title_common_ratio, ",
           "is_contain, is_equal, index_of, proximity_min_cover, proximity_min_dist, ",
           "proximity_max_dist, proximity_avg_dist");
    }
  }
  OpValues::Kind kind() const override { return OpValues::Kind::kNumbers; }
  bool Compute(const std::vector<InputItems>& in, OpValues* out, std::string*) const override {
    double value = Evaluate(in[0].items, in[1].items);
    out->numbers.push_back(normalizer_.active() ? normalizer_.Apply(value) : value);
    return true;
  }

 private:
  double Evaluate(const std::vector<std::string_view>& q, const std::vector<std::string_view>& t) const {
    const double n_title = static_cast<double>(t.size());
    if (q.empty() || t.empty()) {
      if (method_ == "index_of") return -1;
      if (method_ == "proximity_min_dist" || method_ == "proximity_max_dist" ||
          method_ == "proximity_avg_dist") {
        return n_title + 1;
      }
      return 0;
    }
    auto in = [](const std::vector<std::string_view>& v, std::string_view x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    if (method_ == "query_common_ratio" || method_ == "title_common_ratio") {
      const auto& a = method_ == "query_common_ratio" ? q : t;
      const auto& b = method_ == "query_common_ratio" ? t : q;
      size_t common = 0;
      for (std::string_view x : a) common += in(b, x) ? 1 : 0;
      return static_cast<double>(common) / static_cast<double>(a.size());
    }
    if (method_ == "is_equal") return q == t ? 1 : 0;
    if (method_ == "is_contain" || method_ == "index_of") {
      auto it = std::search(t.begin(), t.end(), q.begin(), q.end());
      if (method_ == "is_contain") return it != t.end() ? 1 : 0;
      return it == t.end() ? -1 : static_cast<double>(it - t.begin());
    }
    // Positions of each distinct query term in the title.
    std::vector<std::string_view> terms;
    for (std::string_view x : q) {
      if (!in(terms, x)) terms.push_back(x);
    }
    std::vector<std::vector<int>> positions(terms.size());
    for (size_t i = 0; i < t.size(); ++i) {
      for (size_t k = 0; k < terms.size(); ++k) {
        if (t[i] == terms[k]) positions[k].push_back(static_cast<int>(i));
      }
    }
    if (method_ == "proximity_min_cover") {
      for (const auto& p : positions) {
        if (p.empty()) return 0;
      }
      // Smallest title window holding every query term.
      int best = static_cast<int>(t.size());
      std::vector<int> count(terms.size(), 0);
      size_t covered = 0, left = 0;
      for (size_t right = 0; right < t.size(); ++right) {
        for (size_t k = 0; k < terms.size(); ++k) {
          if (t[right] == terms[k] && count[k]++ == 0) ++covered;
        }
        while (covered == terms.size()) {
          best = std::min(best, static_cast<int>(right - left + 1));
          for (size_t k = 0; k < terms.size(); ++k) {
            if (t[left] == terms[k] && --count[k] == 0) --covered;
          }
          ++left;
        }
      }
      return best;
    }
    // proximity_*_dist: for each pair of distinct query terms present in the title, the
    // smallest distance between their occurrences; min / max / mean over the pairs.
    std::vector<double> distances;
    for (size_t a = 0; a < terms.size(); ++a) {
      for (size_t b = a + 1; b < terms.size(); ++b) {
        if (positions[a].empty() || positions[b].empty()) continue;
        int best = static_cast<int>(t.size()) + 1;
        for (int pa : positions[a]) {
          for (int pb : positions[b]) best = std::min(best, std::abs(pa - pb));
        }
        distances.push_back(best);
      }
    }
    if (distances.empty()) return n_title + 1;
    if (method_ == "proximity_min_dist") return *std::min_element(distances.begin(), distances.end());
    if (method_ == "proximity_max_dist") return *std::max_element(distances.begin(), distances.end());
    double sum = 0;
    for (double d : distances) sum += d;
    return sum / static_cast<double>(distances.size());
  }

  Normalizer normalizer_;
  std::string method_;
};

class KvDotOp : public FeatureOp {
 public:
  KvDotOp(const FeatureInfo& info, const std::string& where)
      : normalizer_(StringField(*info.config, "normalizer"), where + ".normalizer") {
    delimiter_ = HasField(*info.config, "kv_delimiter") ? StringField(*info.config, "kv_delimiter") : ":";
    if (delimiter_.size() != 1) Fail(where, ".kv_delimiter: '", delimiter_, "' must be one character");
    has_default_ = info.has_default_value;
  }
  OpValues::Kind kind() const override { return OpValues::Kind::kNumbers; }
  bool Compute(const std::vector<InputItems>& in, OpValues* out, std::string* error) const override {
    if ((in[0].items.empty() || in[1].items.empty()) && has_default_) return true;
    std::unordered_map<std::string_view, double> query;
    for (std::string_view item : in[0].items) {
      double w;
      if (!Weight(item, &query, &w, error)) return false;
    }
    double dot = 0;
    std::unordered_map<std::string_view, double> doc;
    for (std::string_view item : in[1].items) {
      double w;
      if (!Weight(item, &doc, &w, error)) return false;
    }
    for (const auto& kv : doc) {
      auto it = query.find(kv.first);
      if (it != query.end()) dot += it->second * kv.second;
    }
    out->numbers.push_back(normalizer_.active() ? normalizer_.Apply(dot) : dot);
    return true;
  }

 private:
  bool Weight(std::string_view item, std::unordered_map<std::string_view, double>* into,
              double* weight, std::string* error) const {
    std::string_view key, value;
    SplitKeyValue(item, delimiter_, &key, &value);
    *weight = 1.0;
    if (!value.empty() && !ParseDouble(value, weight)) {
      *error = StrCat("'", Printable(item), "' is not key", delimiter_, "weight");
      return false;
    }
    (*into)[key] += *weight;
    return true;
  }

  Normalizer normalizer_;
  std::string delimiter_;
  bool has_default_ = false;
};

class BoolMaskOp : public FeatureOp {
 public:
  OpValues::Kind kind() const override { return OpValues::Kind::kTexts; }
  bool Compute(const std::vector<InputItems>& in, OpValues* out, std::string* error) const override {
    // No values, or no mask (nothing is selected): the default applies.
    if (in[0].missing || in[1].missing) return true;
    if (in[0].items.size() != in[1].items.size()) {
      *error = StrCat(in[0].items.size(), " values but ", in[1].items.size(), " mask entries");
      return false;
    }
    for (size_t i = 0; i < in[0].items.size(); ++i) {
      if (IsTrue(in[1].items[i])) out->texts.emplace_back(in[0].items[i]);
    }
    return true;
  }
};

class CombineOp : public FeatureOp {
 public:
  CombineOp(const FeatureInfo& info, const std::string& where)
      : normalizer_(StringField(*info.config, "normalizer"), where + ".normalizer") {
    const auto& config = static_cast<const protos::CombineFeature&>(*info.config);
    for (const auto& kv : config.value_map()) value_map_[kv.first] = kv.second;
    combiner_ = ParseCombiner(config.combiner(), where);
  }
  OpValues::Kind kind() const override { return OpValues::Kind::kNumbers; }
  bool Compute(const std::vector<InputItems>& in, OpValues* out, std::string* error) const override {
    for (std::string_view item : in[0].items) {
      if (!value_map_.empty()) {
        auto it = value_map_.find(std::string(item));
        if (it != value_map_.end()) out->numbers.push_back(it->second);
        continue;
      }
      double value;
      if (!ParseDouble(item, &value)) {
        *error = StrCat("'", Printable(item), "' is not a number and value_map is empty");
        return false;
      }
      out->numbers.push_back(value);
    }
    Combine(combiner_ == Combiner::kNone ? Combiner::kSum : combiner_, &out->numbers);
    if (normalizer_.active()) {
      for (double& x : out->numbers) x = normalizer_.Apply(x);
    }
    return true;
  }

 private:
  Normalizer normalizer_;
  std::unordered_map<std::string, double> value_map_;
  Combiner combiner_ = Combiner::kSum;
};

class TokenizeOp : public FeatureOp {
 public:
  TokenizeOp(const FeatureInfo& info, const std::string& where) {
    const auto& config = static_cast<const protos::TokenizeFeature&>(*info.config);
    std::string path = config.vocab_file();
    if (config.has_asset_dir() && !path.empty() && path[0] != '/') path = config.asset_dir() + "/" + path;
    tokenizer_ = Tokenizer::Load(path, config.tokenizer_type(), where);
    if (config.has_text_normalizer()) {
      const auto& norm = config.text_normalizer();
      uint32_t options = 0;
      if (norm.norm_options_size() == 0) {
        options = kTextLower2Upper | kTextSbc2Dbc | kTextCht2Chs | kTextFilter;
      }
      for (int option : norm.norm_options()) {
        switch (option) {
          case protos::TEXT_LOWER2UPPER: options |= kTextLower2Upper; break;
          case protos::TEXT_UPPER2LOWER: options |= kTextUpper2Lower; break;
          case protos::TEXT_SBC2DBC: options |= kTextSbc2Dbc; break;
          case protos::TEXT_CHT2CHS: options |= kTextCht2Chs; break;
          case protos::TEXT_FILTER: options |= kTextFilter; break;
          case protos::TEXT_SPLITCHRS: options |= kTextSplitChars; break;
          case protos::TEXT_REMOVE_SPACE: options |= kTextRemoveSpace; break;
        }
      }
      normalizer_ = TextNormalizer::Create(options, norm.max_length(), norm.stop_char_file(),
                                           where + ".text_normalizer");
    }
  }
  OpValues::Kind kind() const override { return OpValues::Kind::kIds; }
  bool Compute(const std::vector<InputItems>& in, OpValues* out, std::string*) const override {
    if (in[0].missing) return true;
    if (normalizer_) {
      tokenizer_->Encode(normalizer_->Normalize(in[0].text), &out->ids);
    } else {
      tokenizer_->Encode(in[0].text, &out->ids);
    }
    return true;
  }
  // The default value is text to tokenize too.
  void EncodeDefault(const std::string& text, std::vector<int64_t>* ids) const override {
    tokenizer_->Encode(normalizer_ ? normalizer_->Normalize(text) : text, ids);
  }

 private:
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<TextNormalizer> normalizer_;
};

}  // namespace

namespace {

using OpPtr = std::unique_ptr<FeatureOp>;

OpPtr MakeIdOp(const FeatureInfo& info) { return std::make_unique<IdOp>(info.weighted); }
OpPtr MakeRawOp(const FeatureInfo& info) {
  return std::make_unique<RawOp>(
      Normalizer(StringField(*info.config, "normalizer"), info.config_path + ".normalizer"));
}
OpPtr MakeComboOp(const FeatureInfo&) { return std::make_unique<ComboOp>(); }
OpPtr MakeLookupOp(const FeatureInfo& info) { return std::make_unique<LookupOp>(info, info.config_path); }
OpPtr MakeMatchOp(const FeatureInfo& info) { return std::make_unique<MatchOp>(info, info.config_path); }
OpPtr MakeExprOp(const FeatureInfo& info) { return std::make_unique<ExprOp>(info, info.config_path); }
OpPtr MakeOverlapOp(const FeatureInfo& info) { return std::make_unique<OverlapOp>(info, info.config_path); }
OpPtr MakeKvDotOp(const FeatureInfo& info) { return std::make_unique<KvDotOp>(info, info.config_path); }
OpPtr MakeBoolMaskOp(const FeatureInfo&) { return std::make_unique<BoolMaskOp>(); }
OpPtr MakeCombineOp(const FeatureInfo& info) { return std::make_unique<CombineOp>(info, info.config_path); }
OpPtr MakeTokenizeOp(const FeatureInfo& info) { return std::make_unique<TokenizeOp>(info, info.config_path); }
// A grouped sequence_feature is expanded into its sub-features before any op is made.
OpPtr NoOp(const FeatureInfo& info) {
  Fail(info.config_path, ": a grouped sequence_feature has no operator of its own");
}

}  // namespace

Registry<FeatureOpFactory>& FeatureTypeRegistry() {
  static Registry<FeatureOpFactory> registry(
      "feature type", {ConfigSlot{"tzrec.protos.FeatureConfig", "feature"},
                       ConfigSlot{"tzrec.protos.SeqFeatureConfig", "feature"}});
  return registry;
}

std::unique_ptr<FeatureOp> CreateFeatureOp(const FeatureInfo& info) {
  if (!FeatureTypeRegistry().Has(info.type)) {
    Fail(info.config_path, ": feature generation for ", info.type, " is not supported yet");
  }
  return FeatureTypeRegistry().Get(info.type)(info);
}

namespace {

// Fields feature generation and the embedding layer honour on every feature type (plain, as
// sequence_<type>, and inside a grouped sequence_feature); fields a type does not have cannot be
// set on it anyway. Unlisted ones (init_fn, use_mask, fill_missing, ...) are rejected by the
// config check.
#define TZREC_FG_FEATURE_FIELDS                                                                  \
  "feature_name", "expression", "embedding_dim", "embedding_name", "pooling", "default_value",   \
      "separator", "fg_encoded_default_value", "fg_value_type", "trainable", "stub_type",        \
      "hash_bucket_size", "num_buckets", "vocab_list", "vocab_dict", "vocab_file", "asset_dir",  \
      "default_bucketize_value", "boundaries", "value_dim", "normalizer", "weighted",            \
      "sequence_length", "sequence_delim", "sequence_fields", "map", "key", "combiner",          \
      "need_discrete", "need_key", "value_separator", "nested_map", "pkey", "skey", "show_pkey", \
      "show_skey", "variables", "query", "title", "method", "document", "kv_delimiter",          \
      "value_map", "tokenizer_type", "text_normalizer.*", "operator_name", "operator_lib_file",  \
      "operator_params.*", "is_op_thread_safe", "embedding_constraints.*", "autodis.*", "mlp",  \
      "zch.*", "dynamicemb.*", "data_type"

#define TZREC_REGISTER_FEATURE_TYPE(NAME, FACTORY)                                           \
  TZREC_REGISTER(FeatureTypeRegistry(), NAME, FACTORY, TZREC_FG_FEATURE_FIELDS);             \
  TZREC_REGISTER(FeatureTypeRegistry(), "sequence_" NAME, FACTORY, TZREC_FG_FEATURE_FIELDS)

TZREC_REGISTER_FEATURE_TYPE("id_feature", MakeIdOp);
TZREC_REGISTER_FEATURE_TYPE("raw_feature", MakeRawOp);
TZREC_REGISTER_FEATURE_TYPE("combo_feature", MakeComboOp);
TZREC_REGISTER_FEATURE_TYPE("lookup_feature", MakeLookupOp);
TZREC_REGISTER_FEATURE_TYPE("match_feature", MakeMatchOp);
TZREC_REGISTER_FEATURE_TYPE("expr_feature", MakeExprOp);
TZREC_REGISTER_FEATURE_TYPE("overlap_feature", MakeOverlapOp);
TZREC_REGISTER_FEATURE_TYPE("kv_dot_product", MakeKvDotOp);
TZREC_REGISTER_FEATURE_TYPE("bool_mask_feature", MakeBoolMaskOp);
TZREC_REGISTER_FEATURE_TYPE("combine_feature", MakeCombineOp);
TZREC_REGISTER_FEATURE_TYPE("tokenize_feature", MakeTokenizeOp);
TZREC_REGISTER_FEATURE_TYPE("custom_feature", CreateCustomOp);
TZREC_REGISTER(FeatureTypeRegistry(), "sequence_feature", NoOp, "sequence_name", "sequence_length",
               "sequence_delim", "sequence_pk", "features");

}  // namespace

}  // namespace tzrec::fg
