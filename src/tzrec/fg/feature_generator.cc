#include "tzrec/fg/feature_generator.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <functional>
#include <thread>
#include <map>
#include <unordered_map>

#include <google/protobuf/descriptor.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/fg/custom_op.h"
#include "tzrec/fg/expression.h"
#include "tzrec/fg/feature_op.h"
#include "tzrec/fg/normalizer.h"
#include "tzrec/fg/proto_fields.h"
#include "tzrec/fg/tokenizer.h"

namespace tzrec::fg {

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

void AppendNumberText(double value, std::string* out) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, result.ptr);
}

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
  void EncodeDefault(const std::string& text, std::vector<int64_t>* ids) const {
    tokenizer_->Encode(normalizer_ ? normalizer_->Normalize(text) : text, ids);
  }

 private:
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<TextNormalizer> normalizer_;
};

std::unique_ptr<FeatureOp> CreateOp(const FeatureInfo& info) {
  const std::string& where = info.config_path;
  const std::string& t = info.type;
  if (t == "id_feature") return std::make_unique<IdOp>(info.weighted);
  if (t == "raw_feature") {
    return std::make_unique<RawOp>(Normalizer(StringField(*info.config, "normalizer"), where + ".normalizer"));
  }
  if (t == "combo_feature") return std::make_unique<ComboOp>();
  if (t == "lookup_feature") return std::make_unique<LookupOp>(info, where);
  if (t == "match_feature") return std::make_unique<MatchOp>(info, where);
  if (t == "expr_feature") return std::make_unique<ExprOp>(info, where);
  if (t == "overlap_feature") return std::make_unique<OverlapOp>(info, where);
  if (t == "kv_dot_product") return std::make_unique<KvDotOp>(info, where);
  if (t == "bool_mask_feature") return std::make_unique<BoolMaskOp>();
  if (t == "combine_feature") return std::make_unique<CombineOp>(info, where);
  if (t == "tokenize_feature") return std::make_unique<TokenizeOp>(info, where);
  if (t == "custom_feature") return CreateCustomOp(info);
  Fail(where, ": feature generation for ", t, " is not supported yet");
}

// ------------------------------------------------------------------ reading input cells

// Where one input's values come from for this batch.
struct Source {
  const Column* column = nullptr;  // data column or a produced feature's text column
  bool constant = false;
  std::string constant_text;
  bool broadcast = false;  // one-row column over a larger batch
};

void FillItems(std::string_view text, std::string_view separator, bool raw, InputItems* out) {
  out->text = text;
  if (text.empty()) return;
  out->missing = false;
  if (raw) {
    out->items.push_back(text);
    return;
  }
  ForEachPiece(text, separator, [&](std::string_view piece) {
    if (!piece.empty()) out->items.push_back(piece);
  });
}

// Cell `row` of `source` as the values of a non-sequence input.
void CellItems(const Source& source, size_t row, const FeatureInput& input,
               const std::string& separator, InputItems* out) {
  out->Reset();
  if (source.constant) {
    FillItems(source.constant_text, separator, input.raw_text, out);
    return;
  }
  const Column& c = *source.column;
  if (source.broadcast) row = 0;
  if (c.IsNull(row)) return;
  switch (c.type) {
    case ColumnType::kInt64:
      out->scratch = std::to_string(c.ints[row]);
      break;
    case ColumnType::kDouble:
      out->scratch.clear();
      AppendNumberText(c.doubles[row], &out->scratch);
      break;
    case ColumnType::kString: {
      std::string_view text = c.StringAt(row);
      if (c.list_depth == 0) {
        FillItems(text, separator, input.raw_text, out);
        return;
      }
      out->text = text;
      if (text.empty()) return;
      out->missing = false;
      if (input.raw_text) {
        out->items.push_back(text);
        return;
      }
      // Lists: every level's items are values of the row.
      auto add = [&](std::string_view piece) {
        if (!piece.empty()) out->items.push_back(piece);
      };
      if (c.list_depth == 1) {
        ForEachPiece(text, c.list_separator, add);
      } else {
        ForEachPiece(text, c.nested_separator, [&](std::string_view sub) {
          ForEachPiece(sub, c.list_separator, add);
        });
      }
      return;
    }
  }
  out->text = out->scratch;
  out->missing = false;
  out->items.push_back(out->scratch);
}

// Steps of cell `row` of a sequence input, and how to split each step into values.
struct Steps {
  bool missing = true;
  std::vector<std::string_view> steps;
  std::string_view item_separator;
  std::string scratch;
};

void CellSteps(const Source& source, size_t row, const std::string& sequence_delim,
               const std::string& separator, Steps* out) {
  out->missing = true;
  out->steps.clear();
  out->item_separator = separator;
  std::string_view text;
  int depth = 0;
  std::string_view list_sep, nested_sep;
  if (source.constant) {
    text = source.constant_text;
  } else {
    const Column& c = *source.column;
    if (source.broadcast) row = 0;
    if (c.IsNull(row)) return;
    if (c.type == ColumnType::kInt64) {
      out->scratch = std::to_string(c.ints[row]);
      text = out->scratch;
    } else if (c.type == ColumnType::kDouble) {
      out->scratch.clear();
      AppendNumberText(c.doubles[row], &out->scratch);
      text = out->scratch;
    } else {
      text = c.StringAt(row);
      depth = c.list_depth;
      list_sep = c.list_separator;
      nested_sep = c.nested_separator;
    }
  }
  if (text.empty()) return;
  out->missing = false;
  if (depth == 0) {
    ForEachPiece(text, sequence_delim, [&](std::string_view step) { out->steps.push_back(step); });
  } else if (depth == 1) {
    // LIST<x>: each element is one step (still split by the feature separator).
    ForEachPiece(text, list_sep, [&](std::string_view step) { out->steps.push_back(step); });
  } else {
    ForEachPiece(text, nested_sep, [&](std::string_view step) { out->steps.push_back(step); });
    out->item_separator = list_sep;
  }
}

// ------------------------------------------------------------------ per-feature output

// Turns op values (+ default) into ids or floats and appends them to the feature's output.
class OutputWriter {
 public:
  // `op` is null under FG_BUCKETIZE (values arrive as text).
  OutputWriter(const FeatureInfo& info, const FeatureOp* op)
      : info_(info), kind_(op ? op->kind() : OpValues::Kind::kTexts) {
    dense_dim_ = std::max(info.value_dim, 1);
    if (!info.has_default_value) return;
    // The default is text before bucketizing, split like an input value.
    ForEachPiece(info.default_value, info.separator, [&](std::string_view piece) {
      if (!piece.empty()) default_texts_.emplace_back(piece);
    });
    if (kind_ == OpValues::Kind::kNumbers || !info.is_sparse) {
      for (const std::string& text : default_texts_) {
        double value;
        if (!ParseDouble(text, &value)) {
          Fail(info.config_path, ".default_value: '", Printable(info.default_value),
               "' is not a list of numbers");
        }
        default_numbers_.push_back(value);
      }
    }
    if (kind_ == OpValues::Kind::kIds) {
      static_cast<const TokenizeOp*>(op)->EncodeDefault(info.default_value, &default_ids_);
    }
  }

  // Appends one value list (row or step); returns the number of values written.
  int32_t Write(OpValues* values, const RecordBatch& batch, size_t row, SparseValues* sparse,
                DenseValues* dense, std::string* produced) const {
    bool use_default = values->empty();
    if (!info_.is_sparse) {
      std::vector<double>& numbers = values->numbers;
      if (use_default) {
        numbers = default_numbers_;
      } else if (values->kind == OpValues::Kind::kTexts) {
        for (const std::string& text : values->texts) {
          double v;
          if (!ParseDouble(text, &v)) Fail(Where(batch, row), "'", Printable(text), "' is not a number");
          numbers.push_back(v);
        }
      }
      if (numbers.empty()) numbers.assign(dense_dim_, 0.0);
      if (static_cast<int>(numbers.size()) != dense_dim_) {
        Fail(Where(batch, row), numbers.size(), " values but value_dim is ", dense_dim_);
      }
      for (double v : numbers) {
        dense->values.push_back(static_cast<float>(v));
        if (produced) AppendProduced(v, produced);
      }
      return 1;
    }
    int32_t written = 0;
    std::string error;
    auto add_id = [&](int64_t id, float weight) {
      sparse->values.push_back(id);
      if (info_.weighted) sparse->weights.push_back(weight);
      if (produced) AppendProduced(static_cast<double>(id), produced);
      ++written;
    };
    const size_t limit = info_.type == "combo_feature" && info_.value_dim > 0
                             ? static_cast<size_t>(info_.value_dim)
                             : static_cast<size_t>(-1);
    if (use_default) {
      if (kind_ == OpValues::Kind::kIds) {
        for (int64_t id : default_ids_) add_id(id, 1.0f);
        return written;
      }
      if (kind_ == OpValues::Kind::kNumbers && info_.bucketizer->active()) {
        // A numeric op's default is a number (it hashes as one: 0 -> bucket 0).
        for (double number : default_numbers_) {
          int64_t id;
          if (!info_.bucketizer->FromNumber(number, &id, &error)) Fail(Where(batch, row), "default value: ", error);
          add_id(id, 1.0f);
        }
        return written;
      }
      for (const std::string& text : default_texts_) {
        if (static_cast<size_t>(written) >= limit) break;
        int64_t id;
        if (!Bucketize(text, &id, &error)) Fail(Where(batch, row), "default value: ", error);
        add_id(id, 1.0f);
      }
      return written;
    }
    switch (values->kind) {
      case OpValues::Kind::kIds:
        for (int64_t id : values->ids) {
          if (id < 0 || (info_.num_embeddings > 0 && id >= info_.num_embeddings)) {
            Fail(Where(batch, row), "token id ", id, " out of range [0, ", info_.num_embeddings, ")");
          }
          add_id(id, 1.0f);
        }
        break;
      case OpValues::Kind::kTexts:
        for (size_t i = 0; i < values->texts.size() && i < limit; ++i) {
          int64_t id;
          if (!Bucketize(values->texts[i], &id, &error)) Fail(Where(batch, row), error);
          add_id(id, values->weights.empty() ? 1.0f : values->weights[i]);
        }
        break;
      case OpValues::Kind::kNumbers:
        for (size_t i = 0; i < values->numbers.size() && i < limit; ++i) {
          int64_t id;
          if (!info_.bucketizer->FromNumber(values->numbers[i], &id, &error)) Fail(Where(batch, row), error);
          add_id(id, 1.0f);
        }
        break;
    }
    return written;
  }

  std::string Where(const RecordBatch& batch, size_t row) const {
    return StrCat(batch.RowLocation(row), ": feature '", info_.name, "' (", info_.config_path, "): ");
  }
  int dense_dim() const { return dense_dim_; }

 private:
  bool Bucketize(const std::string& text, int64_t* id, std::string* error) const {
    if (!info_.bucketizer->active()) {
      // FG_DAG stubs without a bucketizer pass text on; ids must already be integers.
      if (!ParseInt64(text, id)) {
        *error = StrCat("'", Printable(text), "' needs a bucketizer (hash_bucket_size, ...)");
        return false;
      }
      return true;
    }
    return info_.bucketizer->FromText(text, id, error);
  }
  static void AppendProduced(double value, std::string* produced) {
    if (!produced->empty() && produced->back() != ';') produced->push_back('\x1d');
    if (value == std::floor(value) && std::abs(value) < 9e15) {
      produced->append(std::to_string(static_cast<int64_t>(value)));
    } else {
      AppendNumberText(value, produced);
    }
  }

  const FeatureInfo& info_;
  OpValues::Kind kind_;
  int dense_dim_ = 1;
  std::vector<std::string> default_texts_;
  std::vector<double> default_numbers_;
  std::vector<int64_t> default_ids_;
};

}  // namespace

// ------------------------------------------------------------------ FeatureGenerator

FeatureGenerator::~FeatureGenerator() = default;

FeatureGenerator::FeatureGenerator(std::vector<FeatureInfo> features, protos::FgMode fg_mode,
                                   std::string encoded_multival_sep, int threads)
    : fg_mode_(fg_mode), encoded_sep_(std::move(encoded_multival_sep)), threads_(std::max(1, threads)) {
  TZREC_CHECK(fg_mode != protos::FG_NONE, "FG_NONE data needs no feature generation");
  // Dependency order for FG_DAG: a feature comes after the features its `feature:` inputs name.
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < features.size(); ++i) by_name[features[i].name] = i;
  std::vector<int> state(features.size(), 0);  // 0 new, 1 visiting, 2 done
  std::vector<size_t> order;
  std::function<void(size_t, std::vector<std::string>&)> visit = [&](size_t i, std::vector<std::string>& path) {
    if (state[i] == 2) return;
    path.push_back(features[i].name);
    if (state[i] == 1) Fail(features[i].config_path, ": feature dependency cycle: ", Join(path, " -> "));
    state[i] = 1;
    if (fg_mode == protos::FG_DAG) {
      for (const FeatureInput& input : features[i].inputs) {
        if (input.side != Side::kFeature) continue;
        auto it = by_name.find(input.name);
        if (it == by_name.end()) {
          Fail(features[i].config_path, ": input 'feature:", input.name, "' names no feature");
        }
        visit(it->second, path);
      }
    }
    state[i] = 2;
    path.pop_back();
    order.push_back(i);
  };
  for (size_t i = 0; i < features.size(); ++i) {
    std::vector<std::string> path;
    visit(i, path);
  }
  for (size_t i : order) features_.push_back(std::move(features[i]));
  by_name.clear();
  for (size_t i = 0; i < features_.size(); ++i) by_name[features_[i].name] = i;
  consumed_.assign(features_.size(), false);
  producers_.resize(features_.size());
  for (size_t i = 0; i < features_.size(); ++i) {
    const FeatureInfo& info = features_[i];
    if (fg_mode_ != protos::FG_BUCKETIZE) ops_.push_back(CreateOp(info));
    else ops_.push_back(nullptr);
    for (const FeatureInput& input : info.inputs) {
      int producer = -1;
      if (fg_mode_ == protos::FG_DAG && input.side == Side::kFeature) {
        producer = static_cast<int>(by_name.at(input.name));
        consumed_[producer] = true;
      }
      producers_[i].push_back(producer);
    }
    for (const std::string& column : InputColumns(info, fg_mode_)) {
      if (std::find(input_columns_.begin(), input_columns_.end(), column) == input_columns_.end()) {
        input_columns_.push_back(column);
      }
    }
  }
}

void FeatureGenerator::Generate(const RecordBatch& batch, ParsedBatch* out) const {
  const size_t rows = batch.num_rows();
  // Below a few hundred rows per thread, starting threads costs more than it saves.
  const size_t threads = std::min<size_t>(threads_, rows / 256);
  if (threads <= 1) {
    GenerateRows(batch, 0, rows, out);
    return;
  }
  std::vector<ParsedBatch> parts(threads);
  std::vector<std::exception_ptr> errors(threads);
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        GenerateRows(batch, rows * t / threads, rows * (t + 1) / threads, &parts[t]);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  for (auto& worker : workers) worker.join();
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);  // the first part's error: the earliest row
  }
  for (auto& part : parts) {
    for (auto& kv : part.sparse) out->sparse[kv.first].Append(kv.second);
    for (auto& kv : part.dense) {
      DenseValues& dense = out->dense[kv.first];
      dense.dim = kv.second.dim;
      dense.Append(kv.second);
    }
  }
}

void FeatureGenerator::GenerateRows(const RecordBatch& batch, size_t row_begin, size_t row_end,
                                    ParsedBatch* out) const {
  const size_t rows = batch.num_rows();
  // Text form of produced outputs that later features read (FG_DAG).
  std::vector<Column> produced(features_.size());
  std::vector<InputItems> items;
  std::vector<Steps> steps;
  OpValues values;
  std::string produced_cell;
  for (size_t f = 0; f < features_.size(); ++f) {
    const FeatureInfo& info = features_[f];
    const FeatureOp* op = ops_[f].get();
    // Resolve sources.
    std::vector<FeatureInput> inputs = info.inputs;
    if (fg_mode_ == protos::FG_BUCKETIZE) {
      // The column holds the value before bucketizing, split like FG-encoded data.
      FeatureInput self;
      self.name = self.column = info.name;
      self.is_sequence = info.is_sequence;
      inputs = {self};
    }
    std::vector<Source> sources(inputs.size());
    for (size_t k = 0; k < inputs.size(); ++k) {
      const FeatureInput& input = inputs[k];
      Source& source = sources[k];
      if (input.is_all) {
        source.constant = true;
        continue;
      }
      if (input.side == Side::kConst && fg_mode_ != protos::FG_BUCKETIZE) {
        source.constant = true;
        source.constant_text = input.name;
        continue;
      }
      int producer = fg_mode_ == protos::FG_BUCKETIZE ? -1 : producers_[f][k];
      source.column = producer >= 0 ? &produced[producer] : batch.Find(input.column);
      if (!source.column) {
        Fail(batch.source, ": column '", input.column, "' for feature '", info.name, "' (",
             info.config_path, ") is missing");
      }
      if (producer < 0 && source.column->size() != rows) {
        if (source.column->size() == 1) {
          source.broadcast = true;
        } else {
          Fail(batch.source, ": column '", input.column, "' has ", source.column->size(),
               " rows, expected ", rows);
        }
      }
    }
    const std::string& separator =
        fg_mode_ == protos::FG_BUCKETIZE ? encoded_sep_ : info.separator;
    OutputWriter writer(info, op);
    SparseValues* sparse = nullptr;
    DenseValues* dense = nullptr;
    SparseValues stub_sparse;
    DenseValues stub_dense;
    if (info.is_sparse) {
      sparse = info.stub ? &stub_sparse : &out->sparse[info.name];
    } else {
      dense = info.stub ? &stub_dense : &out->dense[info.name];
      dense->dim = writer.dense_dim();
    }
    Column* produced_column = consumed_[f] ? &produced[f] : nullptr;
    if (produced_column) {
      produced_column->name = info.name;
      produced_column->list_depth = info.is_sequence ? 2 : 1;
      produced_column->list_separator = "\x1d";
      produced_column->nested_separator = ";";
    }
    items.resize(inputs.size());
    steps.resize(inputs.size());
    auto compute = [&](size_t row) {
      values.Clear();
      std::string error;
      if (op) {
        values.kind = op->kind();
        if (!op->Compute(items, &values, &error)) Fail(writer.Where(batch, row), error);
      } else {
        // FG_BUCKETIZE: the cell's values as they are.
        values.kind = OpValues::Kind::kTexts;
        for (std::string_view item : items[0].items) values.texts.emplace_back(item);
      }
    };
    // Produced columns (FG_DAG) are indexed by batch row: pad the rows before this range.
    if (produced_column) {
      for (size_t row = 0; row < row_begin; ++row) produced_column->AppendString("", false);
    }
    for (size_t row = row_begin; row < row_end; ++row) {
      produced_cell.clear();
      std::string* cell = produced_column ? &produced_cell : nullptr;
      if (!info.is_sequence) {
        for (size_t k = 0; k < inputs.size(); ++k) {
          if (inputs[k].is_all) continue;
          CellItems(sources[k], row, inputs[k], separator, &items[k]);
        }
        compute(row);
        int32_t n = writer.Write(&values, batch, row, sparse, dense, cell);
        if (sparse) sparse->lengths.push_back(n);
      } else {
        // Sequence: split sequence inputs into steps; other inputs apply to every step.
        size_t num_steps = 0;
        bool any_sequence = false;
        // custom_feature (pyfg's SeqExpr: cur_time - clk_time_seq): a one-step input
        // broadcasts over the other inputs' steps.
        const bool broadcast_one_step = info.type == "custom_feature" && fg_mode_ != protos::FG_BUCKETIZE;
        for (size_t k = 0; k < inputs.size(); ++k) {
          if (inputs[k].is_all) continue;
          if (inputs[k].is_sequence || fg_mode_ == protos::FG_BUCKETIZE) {
            CellSteps(sources[k], row, info.sequence_delim, separator, &steps[k]);
            const size_t n = steps[k].steps.size();
            const bool broadcasts = broadcast_one_step && (n == 1 || num_steps == 1);
            if (any_sequence && !steps[k].missing && num_steps != 0 && n != num_steps && !broadcasts) {
              Fail(writer.Where(batch, row), "sequence inputs have different lengths (",
                   num_steps, " vs ", steps[k].steps.size(), ")");
            }
            if (!steps[k].missing) num_steps = std::max(num_steps, steps[k].steps.size());
            any_sequence = true;
          } else {
            CellItems(sources[k], row, inputs[k], separator, &items[k]);
          }
        }
        if (info.sequence_length > 0) num_steps = std::min<size_t>(num_steps, info.sequence_length);
        int32_t written_steps = 0;
        for (size_t s = 0; s < num_steps; ++s) {
          for (size_t k = 0; k < inputs.size(); ++k) {
            if (inputs[k].is_all || !(inputs[k].is_sequence || fg_mode_ == protos::FG_BUCKETIZE)) continue;
            items[k].Reset();
            const size_t step = broadcast_one_step && steps[k].steps.size() == 1 ? 0 : s;
            if (step < steps[k].steps.size()) {
              FillItems(steps[k].steps[step], steps[k].item_separator, inputs[k].raw_text, &items[k]);
            }
          }
          compute(row);
          if (cell && s > 0) cell->push_back(';');
          int32_t n = writer.Write(&values, batch, row, sparse, dense, cell);
          if (sparse) sparse->key_lengths.push_back(n);
          ++written_steps;
        }
        if (num_steps == 0 && info.has_default_value) {
          // An empty sequence becomes one default step.
          values.Clear();
          values.kind = op ? op->kind() : OpValues::Kind::kTexts;
          int32_t n = writer.Write(&values, batch, row, sparse, dense, cell);
          if (sparse) sparse->key_lengths.push_back(n);
          written_steps = 1;
        }
        if (sparse) sparse->lengths.push_back(written_steps);
        if (dense) dense->lengths.push_back(written_steps);
      }
      if (produced_column) produced_column->AppendString(produced_cell, true);
    }
  }
}

}  // namespace tzrec::fg
