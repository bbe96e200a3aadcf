#include "tzrec/tools/gen_data.h"

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <cstdio>
#include <memory>
#include <functional>
#include <random>
#include <set>
#include <sstream>

#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/input/dataset.h"
#include "tzrec/data/parquet/parquet_writer.h"
#include "tzrec/features/feature.h"
#include "tzrec/fg/feature_generator.h"
#include "tzrec/metrics/auc.h"

namespace tzrec {
namespace {

constexpr int kHiddenDim = 4;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t HashString(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// Deterministic standard normal from a key (Box-Muller on two hashed uniforms).
double HashedNormal(uint64_t key) {
  uint64_t a = SplitMix64(key), b = SplitMix64(key ^ 0x5851f42d4c957f2dULL);
  double u1 = (static_cast<double>(a >> 11) + 0.5) / 9007199254740992.0;
  double u2 = static_cast<double>(b >> 11) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// Per-feature part of the hidden model.
struct HiddenFeature {
  const Feature* feature;
  uint64_t key;
  double first_order_scale = 0.0;
  double vector_scale = 0.0;

  double Weight(int64_t id) const {
    return first_order_scale * HashedNormal(key ^ SplitMix64(static_cast<uint64_t>(id)));
  }
  double VectorEntry(int64_t id, int k) const {
    return vector_scale *
           HashedNormal(key ^ SplitMix64(static_cast<uint64_t>(id) * 131 + 7 + k));
  }
};

// Zipf-like rank in [0, n): inverse CDF of a continuous power law with exponent s > 1.
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

std::string Quote(const std::string& field, char delimiter) {
  if (field.find(delimiter) == std::string::npos && field.find('"') == std::string::npos &&
      field.find('\n') == std::string::npos) {
    return field;
  }
  std::string quoted = "\"";
  for (char c : field) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

class Generator {
 public:
  Generator(const protos::EasyRecConfig& config, const GenDataOptions& options)
      : config_(config), options_(options) {
    const auto& data = config.data_config();
    if (data.dataset_type() != protos::CsvDataset &&
        data.dataset_type() != protos::ParquetDataset) {
      Fail("gen_data: data_config.dataset_type ", protos::DatasetType_Name(data.dataset_type()),
           " not supported yet (gen_data writes CsvDataset and ParquetDataset files)");
    }
    parquet_ = data.dataset_type() == protos::ParquetDataset;
    features_ = CreateFeatures(config.feature_configs(), data);
    if (data.fg_mode() == protos::FG_BUCKETIZE) {
      Fail("gen_data: data_config.fg_mode FG_BUCKETIZE not supported yet (gen_data writes "
           "FG_NONE data, or raw inputs for FG_NORMAL / FG_DAG)");
    }
    if (data.fg_mode() != protos::FG_NONE) {
      infos_ = fg::DescribeFeatures(config.feature_configs(), data.fg_mode());
      generator_ = std::make_unique<fg::FeatureGenerator>(infos_, data.fg_mode(),
                                                          data.fg_encoded_multival_sep());
      raw_inputs_ = PlanRawInputs(infos_, data.fg_mode());
    }
    delimiter_ = ParseCsvDelimiter(data.delimiter());
    multival_sep_ = data.fg_encoded_multival_sep();
    labels_.assign(data.label_fields().begin(), data.label_fields().end());
    if (labels_.empty()) Fail("gen_data: data_config.label_fields is empty");
    weights_.assign(data.sample_weight_fields().begin(), data.sample_weight_fields().end());

    // Column order: declared input fields if any, else features, labels, weights.
    CsvOptions csv;
    if (!parquet_) ResolveCsvSchema(data, &csv);
    columns_ = csv.column_names;
    if (columns_.empty()) {
      if (!parquet_ && !data.with_header()) {
        Fail("gen_data: the config names no columns; set data_config.with_header: true or ",
             "data_config.input_fields");
      }
      if (generator_) {
        for (const auto& input : raw_inputs_) columns_.push_back(input.column);
      } else {
        for (const auto& f : features_) columns_.push_back(f->name());
      }
      for (const auto& l : labels_) columns_.push_back(l);
      for (const auto& w : weights_) columns_.push_back(w);
    }
    write_header_ = data.with_header();

    int sparse_count = 0, dense_dims = 0;
    for (const auto& f : features_) {
      if (f->is_sparse()) ++sparse_count;
      else dense_dims += f->value_dim();
    }
    int pairs = sparse_count * (sparse_count - 1) / 2;
    // Variance budget of the hidden logit: 1.0 first order, 1.0 interactions, 0.6 dense.
    for (const auto& f : features_) {
      HiddenFeature h;
      h.feature = f.get();
      h.key = HashString(f->name()) ^ SplitMix64(options.seed);
      if (f->is_sparse()) {
        h.first_order_scale = 1.0 / std::sqrt(std::max(1, sparse_count));
        h.vector_scale = pairs > 0 ? std::pow(1.0 / (pairs * kHiddenDim), 0.25) : 0.0;
      } else {
        h.first_order_scale = std::sqrt(0.6 / std::max(1, dense_dims));
      }
      hidden_.push_back(h);
    }
  }

  // Writes `rows` rows split over `files` files; returns probabilities and labels of the
  // first label field.
  void Write(const std::string& dir, int64_t rows, int files, uint64_t stream_seed,
             std::vector<float>* probs, std::vector<float>* first_labels) {
    MakeDirs(dir);
    std::mt19937_64 rng(SplitMix64(options_.seed ^ stream_seed));
    int64_t per_file = (rows + files - 1) / files;
    int64_t written = 0;
    for (int file = 0; file < files; ++file) {
      int64_t n = std::min(per_file, rows - written);
      if (n <= 0) break;
      char name[32];
      if (generator_) {
        std::snprintf(name, sizeof(name), parquet_ ? "part-%05d.parquet" : "part-%05d.csv", file);
        WriteRaw(JoinPath(dir, name), n, rng, probs, first_labels);
        written += n;
        continue;
      }
      if (parquet_) {
        std::snprintf(name, sizeof(name), "part-%05d.parquet", file);
        WriteParquet(JoinPath(dir, name), n, rng, probs, first_labels);
        written += n;
        continue;
      }
      std::snprintf(name, sizeof(name), "part-%05d.csv", file);
      std::string content;
      if (write_header_) content += Join(columns_, std::string(1, delimiter_)) + "\n";
      for (int64_t r = 0; r < n; ++r) content += Row(rng, probs, first_labels);
      WriteFileAtomic(JoinPath(dir, name), content);
      written += n;
    }
  }

  const char* extension() const { return parquet_ ? "parquet" : "csv"; }

 private:
  // Typed Parquet columns: sparse features INT64, or LIST<INT64> when a row may hold several
  // ids; dense features DOUBLE (LIST<DOUBLE> when value_dim > 1); labels INT64; sample
  // weights DOUBLE. Values are the same draws as the CSV text, so the planted signal holds.
  void WriteParquet(const std::string& path, int64_t rows, std::mt19937_64& rng,
                    std::vector<float>* probs, std::vector<float>* first_labels) {
    std::vector<ParquetFieldSpec> specs;
    std::vector<ParquetColumn> columns;
    std::vector<int> kinds;  // 0 int64, 1 list<int64>, 2 double, 3 list<double>
    for (const auto& name : columns_) {
      const Feature* feature = nullptr;
      for (const auto& f : features_) {
        if (f->name() == name) feature = f.get();
      }
      int kind = 2;
      if (feature) {
        kind = feature->is_sparse() ? (options_.multi_value_fraction > 0 ? 1 : 0)
                                    : (feature->value_dim() > 1 ? 3 : 2);
      } else if (std::find(labels_.begin(), labels_.end(), name) != labels_.end()) {
        kind = 0;
      }
      const ParquetType type = kind <= 1 ? ParquetType::kInt64 : ParquetType::kDouble;
      specs.push_back(kind % 2 ? ParquetFieldSpec::List(name, type)
                               : ParquetFieldSpec::Plain(name, type));
      ParquetColumn column;
      column.name = name;
      column.values.name = name;
      column.values.type = ColumnTypeFor(type);
      if (kind % 2) column.lists.resize(1);
      columns.push_back(std::move(column));
      kinds.push_back(kind);
    }
    ParquetWriteOptions write_options;
    write_options.codec = ParquetCodec::kSnappy;
    write_options.row_group_rows = 64 * 1024;
    ParquetFileWriter writer(path, specs, write_options);
    auto flush = [&]() {
      writer.Write(columns);
      for (size_t c = 0; c < columns.size(); ++c) {
        ParquetColumn fresh;
        fresh.name = columns[c].name;
        fresh.values.name = columns[c].name;
        fresh.values.type = columns[c].values.type;
        if (kinds[c] % 2) fresh.lists.resize(1);
        columns[c] = std::move(fresh);
      }
    };
    for (int64_t r = 0; r < rows; ++r) {
      std::map<std::string, std::string> cells = Cells(rng, probs, first_labels);
      for (size_t c = 0; c < columns.size(); ++c) {
        ParquetColumn& column = columns[c];
        const std::string& text = cells[column.name];
        std::vector<std::string_view> pieces;
        if (!text.empty() && kinds[c] % 2) {
          for (auto piece : SplitView(text, multival_sep_)) pieces.push_back(piece);
        } else if (!text.empty()) {
          pieces.push_back(text);
        }
        auto append = [&](std::string_view piece) {
          if (column.values.type == ColumnType::kInt64) {
            int64_t value = 0;
            ParseInt64(piece, &value);
            column.values.ints.push_back(value);
          } else {
            double value = 0;
            ParseDouble(piece, &value);
            column.values.doubles.push_back(value);
          }
          column.values.valid.push_back(1);
        };
        if (kinds[c] % 2) {
          // A feature without ids is a null list (the FG_NONE default applies).
          column.lists[0].Append(!pieces.empty(), static_cast<uint32_t>(pieces.size()));
          for (auto piece : pieces) append(piece);
        } else if (pieces.empty()) {
          if (column.values.type == ColumnType::kInt64) column.values.ints.push_back(0);
          else column.values.doubles.push_back(0);
          column.values.valid.push_back(0);
        } else {
          append(pieces[0]);
        }
      }
      if ((r + 1) % 8192 == 0) flush();
    }
    flush();
    writer.Close();
  }

  std::string Row(std::mt19937_64& rng, std::vector<float>* probs,
                  std::vector<float>* first_labels) {
    std::map<std::string, std::string> cells = Cells(rng, probs, first_labels);
    std::string line;
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (c) line += delimiter_;
      auto it = cells.find(columns_[c]);
      if (it != cells.end()) line += Quote(it->second, delimiter_);
    }
    return line + "\n";
  }

  // One row's values as text by column name (features, labels, weights).
  std::map<std::string, std::string> Cells(std::mt19937_64& rng, std::vector<float>* probs,
                                           std::vector<float>* first_labels) {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::map<std::string, std::string> cells;
    double logit = 0.0;
    std::vector<std::array<double, kHiddenDim>> vectors;
    for (const auto& h : hidden_) {
      const Feature& f = *h.feature;
      if (f.is_sparse()) {
        std::vector<int64_t> ids;
        if (uniform(rng) >= options_.null_fraction) {
          ids.push_back(SampleZipf(rng, f.num_embeddings(), options_.zipf_exponent));
          if (uniform(rng) < options_.multi_value_fraction) {
            ids.push_back(SampleZipf(rng, f.num_embeddings(), options_.zipf_exponent));
          }
        }
        std::array<double, kHiddenDim> pooled{};
        std::string text;
        for (size_t i = 0; i < ids.size(); ++i) {
          if (i) text += multival_sep_;
          text += std::to_string(ids[i]);
          logit += h.Weight(ids[i]) / (f.pooling() == "mean" ? ids.size() : 1);
          for (int k = 0; k < kHiddenDim; ++k) pooled[k] += h.VectorEntry(ids[i], k);
        }
        if (f.pooling() == "mean" && !ids.empty()) {
          for (auto& v : pooled) v /= static_cast<double>(ids.size());
        }
        vectors.push_back(pooled);
        cells[f.name()] = text;
      } else {
        std::string text;
        for (int d = 0; d < f.value_dim(); ++d) {
          double x = normal(rng);
          if (d) text += multival_sep_;
          text += FormatFloat(x);
          // Linear plus a mild non-linearity the deep part can pick up.
          double w = HashedNormal(h.key + 17 * d);
          logit += h.first_order_scale * (w * x + 0.5 * w * (x * x - 1.0));
        }
        cells[f.name()] = text;
      }
    }
    for (size_t a = 0; a < vectors.size(); ++a) {
      for (size_t b = a + 1; b < vectors.size(); ++b) {
        double dot = 0.0;
        for (int k = 0; k < kHiddenDim; ++k) dot += vectors[a][k] * vectors[b][k];
        logit += dot;
      }
    }
    for (size_t l = 0; l < labels_.size(); ++l) {
      // Each extra label shifts the bias so multi-task labels differ in base rate.
      double p = 1.0 / (1.0 + std::exp(-(logit - 1.0 - 0.5 * l)));
      int label = uniform(rng) < p ? 1 : 0;
      cells[labels_[l]] = std::to_string(label);
      if (l == 0) {
        probs->push_back(static_cast<float>(p));
        first_labels->push_back(static_cast<float>(label));
      }
    }
    for (const auto& w : weights_) cells[w] = FormatFloat(0.5 + uniform(rng));
    return cells;
  }

  // ---------------------------------------------------------------- raw inputs (FG modes)

  // How one raw column's values are drawn, from the first feature input that reads it.
  struct RawInput {
    std::string column;
    const fg::FeatureInfo* info = nullptr;
    size_t input_index = 0;  // which of the feature's inputs
    bool sequence = false;
  };

  static std::vector<RawInput> PlanRawInputs(const std::vector<fg::FeatureInfo>& infos,
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

  // A categorical token the feature's bucketizer accepts.
  std::string Token(const fg::FeatureInfo& info, std::mt19937_64& rng, const char* prefix,
                    int64_t domain) {
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

  std::string Number(const fg::FeatureInfo& info, std::normal_distribution<double>& normal,
                     std::mt19937_64& rng) {
    const auto& bounds = info.bucketizer->boundaries();
    if (!bounds.empty()) {
      double lo = bounds.front(), hi = bounds.back();
      double pad = bounds.size() > 1 ? (hi - lo) / static_cast<double>(bounds.size() - 1) : 1.0;
      return FormatFloat(std::uniform_real_distribution<double>(lo - pad, hi + pad)(rng));
    }
    return FormatFloat(normal(rng));
  }

  // One value (one row, or one sequence step) of a raw input.
  std::string RawValue(const RawInput& raw, std::mt19937_64& rng) {
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

  // Raw cells of one row; grouped sequences share a step count per row.
  std::map<std::string, std::string> RawRow(std::mt19937_64& rng) {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::map<std::string, std::string> cells;
    std::map<std::string, int> steps;  // by sequence name
    for (const RawInput& raw : raw_inputs_) {
      if (!raw.sequence) {
        cells[raw.column] = uniform(rng) < options_.null_fraction ? std::string() : RawValue(raw, rng);
        continue;
      }
      const fg::FeatureInfo& info = *raw.info;
      auto it = steps.find(info.sequence_name);
      if (it == steps.end()) {
        int most = static_cast<int>(std::min<int64_t>(info.sequence_length, 8));
        it = steps.emplace(info.sequence_name, static_cast<int>(rng() % (most + 1))).first;
      }
      std::string text;
      for (int s = 0; s < it->second; ++s) text += (s ? info.sequence_delim : std::string()) + RawValue(raw, rng);
      cells[raw.column] = text;
    }
    return cells;
  }

  // Hidden-model logit of row `row` of FG output `parsed` (same model as for FG_NONE data,
  // over the encoded ids and values, so the signal survives feature generation).
  double LogitOf(const ParsedBatch& parsed, const std::map<std::string, size_t>& offsets,
                 int64_t row) {
    double logit = 0.0;
    std::vector<std::array<double, kHiddenDim>> vectors;
    for (const auto& h : hidden_) {
      const Feature& f = *h.feature;
      if (f.is_sparse()) {
        const SparseValues& sv = parsed.sparse.at(f.name());
        size_t begin = offsets.at(f.name() + "#" + std::to_string(row));
        size_t end = offsets.at(f.name() + "#" + std::to_string(row + 1));
        std::array<double, kHiddenDim> pooled{};
        const double n = static_cast<double>(end - begin);
        for (size_t i = begin; i < end; ++i) {
          // Weighted features pool w * vector, as the model does.
          const double weight = sv.weights.empty() ? 1.0 : sv.weights[i];
          const double scale = (f.pooling() == "mean" || f.is_sequence() ? 1.0 / n : 1.0) * weight;
          logit += h.Weight(sv.values[i]) * scale;
          for (int k = 0; k < kHiddenDim; ++k) pooled[k] += h.VectorEntry(sv.values[i], k) * scale;
        }
        vectors.push_back(pooled);
      } else {
        const DenseValues& dv = parsed.dense.at(f.name());
        size_t begin = offsets.at(f.name() + "#" + std::to_string(row));
        size_t end = offsets.at(f.name() + "#" + std::to_string(row + 1));
        for (size_t i = begin; i < end; ++i) {
          double x = dv.values[i];
          double w = HashedNormal(h.key + 17 * ((i - begin) % dv.dim));
          logit += h.first_order_scale * w * std::tanh(x) / std::max<double>(1.0, (end - begin) / dv.dim);
        }
      }
    }
    for (size_t a = 0; a < vectors.size(); ++a) {
      for (size_t b = a + 1; b < vectors.size(); ++b) {
        double dot = 0.0;
        for (int k = 0; k < kHiddenDim; ++k) dot += vectors[a][k] * vectors[b][k];
        logit += dot;
      }
    }
    return logit;
  }

  // Value offsets of every row of every feature in `parsed` ("name#row" -> first value).
  std::map<std::string, size_t> RowOffsets(const ParsedBatch& parsed, int64_t rows) {
    std::map<std::string, size_t> offsets;
    for (const auto& kv : parsed.sparse) {
      const SparseValues& sv = kv.second;
      size_t value = 0, step = 0;
      for (int64_t r = 0; r <= rows; ++r) {
        offsets[kv.first + "#" + std::to_string(r)] = value;
        if (r == rows) break;
        if (sv.key_lengths.empty()) {
          value += sv.lengths[r];
        } else {
          for (int32_t s = 0; s < sv.lengths[r]; ++s) value += sv.key_lengths[step++];
        }
      }
    }
    for (const auto& kv : parsed.dense) {
      const DenseValues& dv = kv.second;
      size_t value = 0;
      for (int64_t r = 0; r <= rows; ++r) {
        offsets[kv.first + "#" + std::to_string(r)] = value;
        if (r == rows) break;
        value += static_cast<size_t>(dv.dim) * (dv.lengths.empty() ? 1 : dv.lengths[r]);
      }
    }
    return offsets;
  }

  // Raw rows for FG_NORMAL / FG_DAG configs: inputs drawn per feature type, run through the
  // same feature generation training uses, labels from the hidden model over its output.
  void WriteRaw(const std::string& path, int64_t rows, std::mt19937_64& rng,
                std::vector<float>* probs, std::vector<float>* first_labels) {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::string content;
    if (!parquet_ && write_header_) content += Join(columns_, std::string(1, delimiter_)) + "\n";
    std::vector<ParquetFieldSpec> specs;
    std::vector<ParquetColumn> columns;
    std::unique_ptr<ParquetFileWriter> writer;
    if (parquet_) {
      for (const auto& name : columns_) {
        bool is_label = std::find(labels_.begin(), labels_.end(), name) != labels_.end();
        bool is_weight = std::find(weights_.begin(), weights_.end(), name) != weights_.end();
        ParquetType type = is_label ? ParquetType::kInt64 : is_weight ? ParquetType::kDouble : ParquetType::kString;
        specs.push_back(ParquetFieldSpec::Plain(name, type));
        ParquetColumn column;
        column.name = column.values.name = name;
        column.values.type = ColumnTypeFor(type);
        columns.push_back(std::move(column));
      }
      ParquetWriteOptions write_options;
      write_options.codec = ParquetCodec::kSnappy;
      writer = std::make_unique<ParquetFileWriter>(path, specs, write_options);
    }
    const int64_t chunk = 4096;
    for (int64_t start = 0; start < rows; start += chunk) {
      const int64_t n = std::min(chunk, rows - start);
      std::vector<std::map<std::string, std::string>> cells(n);
      RecordBatch batch;
      batch.source = path;
      for (const RawInput& raw : raw_inputs_) {
        Column column;
        column.name = raw.column;
        batch.columns.push_back(std::move(column));
      }
      for (int64_t r = 0; r < n; ++r) {
        cells[r] = RawRow(rng);
        batch.line_numbers.push_back(start + r + 1);
        for (auto& column : batch.columns) {
          const std::string& text = cells[r][column.name];
          column.AppendString(text, !text.empty());
        }
      }
      ParsedBatch parsed;
      generator_->Generate(batch, &parsed);
      auto offsets = RowOffsets(parsed, n);
      for (int64_t r = 0; r < n; ++r) {
        double logit = LogitOf(parsed, offsets, r);
        for (size_t l = 0; l < labels_.size(); ++l) {
          double p = 1.0 / (1.0 + std::exp(-(logit - 1.0 - 0.5 * l)));
          int label = uniform(rng) < p ? 1 : 0;
          cells[r][labels_[l]] = std::to_string(label);
          if (l == 0) {
            probs->push_back(static_cast<float>(p));
            first_labels->push_back(static_cast<float>(label));
          }
        }
        for (const auto& w : weights_) cells[r][w] = FormatFloat(0.5 + uniform(rng));
        if (!parquet_) {
          for (size_t c = 0; c < columns_.size(); ++c) {
            if (c) content += delimiter_;
            content += Quote(cells[r][columns_[c]], delimiter_);
          }
          content += "\n";
          continue;
        }
        for (auto& column : columns) {
          const std::string& text = cells[r][column.name];
          Column& values = column.values;
          if (values.type == ColumnType::kString) {
            values.AppendString(text, !text.empty());
          } else if (values.type == ColumnType::kInt64) {
            int64_t v = 0;
            ParseInt64(text, &v);
            values.ints.push_back(v);
            values.valid.push_back(1);
          } else {
            double v = 0;
            ParseDouble(text, &v);
            values.doubles.push_back(v);
            values.valid.push_back(1);
          }
        }
      }
      if (parquet_) {
        writer->Write(columns);
        for (auto& column : columns) {
          ParquetColumn fresh;
          fresh.name = fresh.values.name = column.name;
          fresh.values.type = column.values.type;
          column = std::move(fresh);
        }
      }
    }
    if (parquet_) {
      writer->Close();
    } else {
      WriteFileAtomic(path, content);
    }
  }

  std::vector<fg::FeatureInfo> infos_;
  std::unique_ptr<fg::FeatureGenerator> generator_;
  std::vector<RawInput> raw_inputs_;

  const protos::EasyRecConfig& config_;
  GenDataOptions options_;
  std::vector<std::unique_ptr<Feature>> features_;
  std::vector<HiddenFeature> hidden_;
  std::vector<std::string> columns_, labels_, weights_;
  char delimiter_ = ',';
  std::string multival_sep_;
  bool write_header_ = true;
  bool parquet_ = false;
};

}  // namespace

GenDataResult GenerateMockData(const protos::EasyRecConfig& config,
                               const GenDataOptions& options) {
  if (options.output_dir.empty()) Fail("gen_data: --output_dir is required");
  if (options.train_rows <= 0 || options.eval_rows <= 0) Fail("gen_data: rows must be > 0");
  Generator generator(config, options);
  GenDataResult result;
  std::vector<float> train_probs, train_labels, eval_probs, eval_labels;
  int train_files = std::max(1, options.num_files);
  int eval_files = std::max(1, train_files / 4);
  std::string train_dir = JoinPath(options.output_dir, "train");
  std::string eval_dir = JoinPath(options.output_dir, "eval");
  generator.Write(train_dir, options.train_rows, train_files, 1, &train_probs, &train_labels);
  generator.Write(eval_dir, options.eval_rows, eval_files, 2, &eval_probs, &eval_labels);
  result.train_pattern = JoinPath(train_dir, std::string("*.") + generator.extension());
  result.eval_pattern = JoinPath(eval_dir, std::string("*.") + generator.extension());
  result.oracle_auc = ExactAuc(eval_probs, eval_labels);
  double positives = 0;
  for (float l : train_labels) positives += l;
  result.positive_rate = positives / static_cast<double>(train_labels.size());
  std::ostringstream json;
  json << "{\"eval_pattern\": \"" << result.eval_pattern << "\", \"oracle_auc\": "
       << result.oracle_auc << ", \"positive_rate\": " << result.positive_rate
       << ", \"train_pattern\": \"" << result.train_pattern << "\"}";
  WriteFileAtomic(JoinPath(options.output_dir, "oracle.json"), json.str() + "\n");
  return result;
}

int GenDataMain(const std::vector<std::string>& args) {
  Flags flags("gen_data",
              "Writes mock train/eval data for a pipeline config (CSV, or Parquet for "
              "ParquetDataset), with labels drawn from a hidden model, and reports the oracle AUC.",
              {{"pipeline_config_path", "pipeline config to generate data for"},
               {"output_dir", "directory for train/, eval/ and oracle.json"},
               {"train_rows", "number of train rows", false, "100000"},
               {"eval_rows", "number of eval rows", false, "20000"},
               {"num_files", "number of train files (eval gets a quarter, at least 1)", false, "2"},
               {"seed", "random seed", false, "2024"},
               {"multi_value_fraction", "share of sparse values with two ids", false, "0.1"},
               {"null_fraction", "share of sparse values left empty", false, "0.02"},
               {"edit_config_json", "JSON object of config path -> value overrides (as for "
                                    "train_eval), e.g. to write Parquet for an ODPS config"}});
  if (!flags.Parse(args)) return 0;
  if (flags.Get("pipeline_config_path").empty()) Fail("gen_data: --pipeline_config_path is required");
  auto config = LoadPipelineConfig(flags.Get("pipeline_config_path"));
  if (!flags.Get("edit_config_json").empty()) EditConfigJson(&config, flags.Get("edit_config_json"));
  GenDataOptions options;
  options.output_dir = flags.Get("output_dir");
  options.train_rows = flags.GetInt("train_rows");
  options.eval_rows = flags.GetInt("eval_rows");
  options.num_files = static_cast<int>(flags.GetInt("num_files"));
  options.seed = static_cast<uint64_t>(flags.GetInt("seed"));
  if (!ParseDouble(flags.Get("multi_value_fraction"), &options.multi_value_fraction) ||
      !ParseDouble(flags.Get("null_fraction"), &options.null_fraction)) {
    Fail("gen_data: --multi_value_fraction and --null_fraction must be numbers");
  }
  auto result = GenerateMockData(config, options);
  LOG_INFO << "gen_data: wrote " << options.train_rows << " train rows to "
           << result.train_pattern << " and " << options.eval_rows << " eval rows to "
           << result.eval_pattern;
  LOG_INFO << "gen_data: positive rate " << result.positive_rate << ", oracle AUC "
           << result.oracle_auc;
  std::printf("oracle_auc=%.6f\n", result.oracle_auc);
  return 0;
}

}  // namespace tzrec
