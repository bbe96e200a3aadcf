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

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/config/supported_fields.h"
#include "tzrec/input/dataset.h"
#include "tzrec/data/parquet/parquet_writer.h"
#include "tzrec/features/feature.h"
#include "tzrec/fg/feature_generator.h"
#include "tzrec/metrics/auc.h"
#include "tzrec/tools/gen_data_raw.h"
#include "tzrec/tools/gen_data_retrieval.h"
#include "tzrec/tools/gen_data_sequence.h"
#include "tzrec/tools/gen_data_tasks.h"

namespace tzrec {
namespace {

using gen_data_internal::CollectGroupingKeys;
using gen_data_internal::HashString;
using gen_data_internal::MaxSequenceSteps;
using gen_data_internal::SplitMix64;
using gen_data_internal::FormatFloat;
using gen_data_internal::PlanRawInputs;
using gen_data_internal::RawInput;
using gen_data_internal::RawValueDrawer;
using gen_data_internal::SampleZipf;
using gen_data_internal::SequenceRow;
using gen_data_internal::SequenceSignal;
using gen_data_internal::PlanTasks;
using gen_data_internal::Task;
using gen_data_internal::TaskTowers;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

constexpr int kHiddenDim = 4;

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

  // `salt` selects one of the hidden models: 0 is the shared one, others task-specific.
  double Weight(int64_t id, uint64_t salt) const {
    return first_order_scale * HashedNormal((key ^ salt) ^ SplitMix64(static_cast<uint64_t>(id)));
  }
  double VectorEntry(int64_t id, int k, uint64_t salt) const {
    return vector_scale *
           HashedNormal((key ^ salt) ^ SplitMix64(static_cast<uint64_t>(id) * 131 + 7 + k));
  }
};

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

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Mixing of the shared and the task-specific hidden logits (equal variances, so the mix keeps
// the variance; task logits correlate at kSharedShare).
constexpr double kSharedShare = 0.6;
// Continuous labels of l2_loss towers: kRegressionScale * sigmoid(logit) + N(0, noise^2).
constexpr double kRegressionScale = 5.0;
constexpr double kRegressionNoise = 0.2;

// Number of distinct grouping-key values for `rows` rows: about 16 rows per key, at most
// `buckets` (the feature's id range).
int64_t GroupPoolSize(int64_t rows, int64_t buckets) {
  int64_t pool = std::max<int64_t>(2, rows / 16);
  return buckets > 0 ? std::min(pool, buckets) : pool;
}

// Id of grouping-key pool entry `j` in [0, buckets): the entries are the first ids when the
// pool covers the range, scattered ids otherwise.
int64_t GroupId(uint64_t key, int64_t j, int64_t pool, int64_t buckets) {
  if (buckets <= 0 || pool >= buckets) return j;
  return static_cast<int64_t>(SplitMix64(key ^ static_cast<uint64_t>(j)) %
                              static_cast<uint64_t>(buckets));
}

// Per-task draws of a split: oracle probabilities (num_class of them per row when
// num_class > 2; the oracle mean for regression) and labels.
struct TaskDraws {
  std::vector<float> probs;
  std::vector<float> labels;
  // Classification with a sequence signal: probs without its term.
  std::vector<float> probs_without_sequence;
};

// A row's hidden-model inputs per hidden feature: (id, pooling scale) pairs of sparse
// features, (dimension, value, divisor) terms of dense ones.
struct DenseTerm {
  int dim = 0;
  double x = 0.0;
  double divisor = 1.0;
};
struct RowInputs {
  std::vector<std::vector<std::pair<int64_t, double>>> ids;
  std::vector<std::vector<DenseTerm>> dense;
  double sequence_term = 0.0;  // the target/history term (gen_data_sequence.h)
};

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
    data_mode_ = data.fg_mode();
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
      // A field may be both a label and a feature input (pepnet_taobao's `occupation`): one
      // column, holding the label, which the feature then reads.
      auto add = [&](const std::string& name) {
        if (std::find(columns_.begin(), columns_.end(), name) == columns_.end()) columns_.push_back(name);
      };
      if (generator_) {
        for (const auto& input : raw_inputs_) add(input.column);
      } else {
        for (const auto& f : features_) add(f->name());
      }
      for (const auto& l : labels_) add(l);
      for (const auto& w : weights_) add(w);
    }
    write_header_ = data.with_header();

    int sparse_count = 0, dense_dims = 0;
    for (const auto& f : features_) {
      if (f->is_sparse()) ++sparse_count;
      else dense_dims += f->value_dim();
    }
    int pairs = sparse_count * (sparse_count - 1) / 2;
    // Variance budget of the hidden logit: first_order_variance (1.0 by default) for the
    // per-id weights, interaction_variance (1.0) for the pairwise interactions, 0.6 dense.
    for (const auto& f : features_) {
      HiddenFeature h;
      h.feature = f.get();
      h.key = HashString(f->name()) ^ SplitMix64(options.seed);
      if (f->is_sparse()) {
        h.first_order_scale = std::sqrt(options.first_order_variance / std::max(1, sparse_count));
        h.vector_scale = pairs > 0 && options.interaction_variance > 0
                             ? std::pow(options.interaction_variance / (pairs * kHiddenDim), 0.25)
                             : 0.0;
      } else {
        h.first_order_scale = std::sqrt(0.6 / std::max(1, dense_dims));
      }
      hidden_.push_back(h);
    }

    tasks_ = PlanTasks(config.model_config(), labels_, &order_);
    has_towers_ = !TaskTowers(config.model_config()).empty();
    std::set<std::string> keys;
    CollectGroupingKeys(config.model_config(), &keys);
    for (const auto& key : keys) PlanGroupingKey(key);
    PlanSequences(config, options);
    retrieval_ = RetrievalPlan::Create(config, features_, infos_, columns_, [this](std::mt19937_64& rng) {
      if (generator_) {
        double sequence_term = 0;
        return RawRow(rng, &sequence_term);
      }
      std::vector<TaskDraws> unused(tasks_.size());
      return Cells(rng, &unused);
    }, options.seed);
  }

  // The retrieval signal (configs with a negative sampler), or null.
  const RetrievalPlan* retrieval() const { return retrieval_.get(); }

  const std::vector<Task>& tasks() const { return tasks_; }
  bool has_towers() const { return has_towers_; }
  const SequenceSignal& sequence_signal() const { return sequence_; }
  // Share of (row, signal sequence) of the last Write() whose history has a step relevant to
  // the target (same key attribute).
  double sequence_match_rate() const {
    const double drawn = static_cast<double>(sequence_rows_) * sequence_.signal_sequences();
    return drawn > 0 ? static_cast<double>(sequence_matches_) / drawn : 0.0;
  }

  // Writes `rows` rows split over `files` files; appends each task's oracle probabilities
  // and labels to `draws` (one entry per label field).
  void Write(const std::string& dir, int64_t rows, int files, uint64_t stream_seed,
             std::vector<TaskDraws>* draws) {
    MakeDirs(dir);
    draws->resize(tasks_.size());
    pool_rows_ = rows;
    sequence_rows_ = sequence_matches_ = 0;
    std::mt19937_64 rng(SplitMix64(options_.seed ^ stream_seed));
    int64_t per_file = (rows + files - 1) / files;
    int64_t written = 0;
    for (int file = 0; file < files; ++file) {
      int64_t n = std::min(per_file, rows - written);
      if (n <= 0) break;
      char name[32];
      if (generator_) {
        std::snprintf(name, sizeof(name), parquet_ ? "part-%05d.parquet" : "part-%05d.csv", file);
        WriteRaw(JoinPath(dir, name), n, rng, draws);
        written += n;
        continue;
      }
      if (parquet_) {
        std::snprintf(name, sizeof(name), "part-%05d.parquet", file);
        WriteParquet(JoinPath(dir, name), n, rng, draws);
        written += n;
        continue;
      }
      std::snprintf(name, sizeof(name), "part-%05d.csv", file);
      std::string content;
      if (write_header_) content += Join(columns_, std::string(1, delimiter_)) + "\n";
      for (int64_t r = 0; r < n; ++r) content += Row(rng, draws);
      WriteFileAtomic(JoinPath(dir, name), content);
      written += n;
    }
  }

  const char* extension() const { return parquet_ ? "parquet" : "csv"; }

 private:
  // Typed Parquet columns: sparse features INT64, or LIST<INT64> when a row may hold several
  // ids; dense features DOUBLE (LIST<DOUBLE> when value_dim > 1); labels INT64 (DOUBLE for
  // l2_loss towers); sample weights DOUBLE; grouping-key columns no feature reads INT64.
  // Values are the same draws as the CSV text, so the planted signal holds. Sequences whose
  // steps gen_data draws (those a sequence group reads) are lists of steps: LIST<INT64> or
  // LIST<DOUBLE>, LIST<LIST<DOUBLE>> when value_dim > 1.
  void WriteParquet(const std::string& path, int64_t rows, std::mt19937_64& rng,
                    std::vector<TaskDraws>* draws) {
    std::vector<ParquetFieldSpec> specs;
    std::vector<ParquetColumn> columns;
    std::vector<int> kinds;  // 0 int64, 1 list<int64>, 2 double, 3 list<double>
    std::vector<int> step_depths;  // stepped sequences: 1 a list of steps, 2 a list of lists
    std::vector<std::string> step_delims;
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
        kind = IsRegressionLabel(name) ? 2 : 0;
      } else if (group_columns_.count(name)) {
        kind = 0;
      }
      const int depth = feature && stepped_.count(name)
                            ? (!feature->is_sparse() && feature->value_dim() > 1 ? 2 : 1)
                            : 0;
      if (depth) kind = feature->is_sparse() ? 1 : 3;
      const ParquetType type = kind <= 1 ? ParquetType::kInt64 : ParquetType::kDouble;
      specs.push_back(depth      ? ParquetFieldSpec::List(name, type, depth)
                      : kind % 2 ? ParquetFieldSpec::List(name, type)
                                 : ParquetFieldSpec::Plain(name, type));
      ParquetColumn column;
      column.name = name;
      column.values.name = name;
      column.values.type = ColumnTypeFor(type);
      if (kind % 2) column.lists.resize(std::max(depth, 1));
      columns.push_back(std::move(column));
      kinds.push_back(kind);
      step_depths.push_back(depth);
      step_delims.push_back(depth ? feature->sequence_delim() : std::string());
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
        if (kinds[c] % 2) fresh.lists.resize(std::max(step_depths[c], 1));
        columns[c] = std::move(fresh);
      }
    };
    for (int64_t r = 0; r < rows; ++r) {
      std::map<std::string, std::string> cells = Cells(rng, draws);
      for (size_t c = 0; c < columns.size(); ++c) {
        ParquetColumn& column = columns[c];
        const std::string& text = cells[column.name];
        if (step_depths[c]) {
          AppendSteps(text, step_delims[c], step_depths[c], &column);
          continue;
        }
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

  // One row of a stepped sequence column from its text (steps joined by `delim`, the values of
  // a step by the multi-value separator); no steps: a null list.
  void AppendSteps(const std::string& text, const std::string& delim, int depth,
                   ParquetColumn* column) const {
    std::vector<std::string_view> steps;
    if (!text.empty()) {
      for (auto step : SplitView(text, delim)) steps.push_back(step);
    }
    column->lists[0].Append(!steps.empty(), static_cast<uint32_t>(steps.size()));
    auto append = [&](std::string_view piece) {
      if (column->values.type == ColumnType::kInt64) {
        int64_t value = 0;
        ParseInt64(piece, &value);
        column->values.ints.push_back(value);
      } else {
        double value = 0;
        ParseDouble(piece, &value);
        column->values.doubles.push_back(value);
      }
      column->values.valid.push_back(1);
    };
    for (auto step : steps) {
      if (depth == 1) {
        append(step);
        continue;
      }
      std::vector<std::string_view> values;
      for (auto piece : SplitView(step, multival_sep_)) values.push_back(piece);
      column->lists[1].Append(true, static_cast<uint32_t>(values.size()));
      for (auto piece : values) append(piece);
    }
  }

  std::string Row(std::mt19937_64& rng, std::vector<TaskDraws>* draws) {
    std::map<std::string, std::string> cells = Cells(rng, draws);
    std::string line;
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (c) line += delimiter_;
      auto it = cells.find(columns_[c]);
      if (it != cells.end()) line += Quote(it->second, delimiter_);
    }
    return line + "\n";
  }

  // One row's values as text by column name (features, labels, weights).
  std::map<std::string, std::string> Cells(std::mt19937_64& rng, std::vector<TaskDraws>* draws) {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::map<std::string, std::string> cells;
    RowInputs inputs;
    inputs.ids.resize(hidden_.size());
    inputs.dense.resize(hidden_.size());
    SequenceRow sequence;
    if (sequence_.draws_anything()) {
      sequence = sequence_.Draw(rng);
      CountSequenceRow(sequence);
      inputs.sequence_term = sequence.term;
    }
    for (size_t i = 0; i < hidden_.size(); ++i) {
      const HiddenFeature& h = hidden_[i];
      const Feature& f = *h.feature;
      auto stepped = stepped_.find(f.name());
      if (stepped != stepped_.end()) {
        cells[f.name()] = SteppedCell(f, sequence.steps.at(stepped->second), sequence, rng,
                                      &inputs.ids[i], &inputs.dense[i]);
        continue;
      }
      if (f.is_sparse()) {
        std::vector<int64_t> ids;
        auto target = sequence.targets.find(f.name());
        if (group_features_.count(f.name())) {
          // A grouping key: one id per row from a small pool, so groups have several rows.
          const int64_t pool = GroupPoolSize(pool_rows_, f.num_embeddings());
          const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(pool));
          ids.push_back(GroupId(h.key, j, pool, f.num_embeddings()));
        } else if (target != sequence.targets.end()) {
          // The target item's attribute of a sequence-signal pair: one id, never null.
          int64_t id = 0;
          ParseInt64(target->second, &id);
          ids.push_back(id);
        } else if (uniform(rng) >= options_.null_fraction) {
          ids.push_back(SampleZipf(rng, f.num_embeddings(), options_.zipf_exponent));
          if (uniform(rng) < options_.multi_value_fraction) {
            ids.push_back(SampleZipf(rng, f.num_embeddings(), options_.zipf_exponent));
          }
        }
        std::string text;
        const double scale = f.pooling() == "mean" ? 1.0 / static_cast<double>(ids.size()) : 1.0;
        for (size_t k = 0; k < ids.size(); ++k) {
          if (k) text += multival_sep_;
          text += std::to_string(ids[k]);
          inputs.ids[i].push_back({ids[k], scale});
        }
        cells[f.name()] = text;
      } else {
        std::string text;
        for (int d = 0; d < f.value_dim(); ++d) {
          double x = normal(rng);
          if (d) text += multival_sep_;
          text += FormatFloat(x);
          inputs.dense[i].push_back({d, x, 1.0});
        }
        cells[f.name()] = text;
      }
    }
    for (const auto& column : group_columns_) {
      cells[column] = std::to_string(rng() % static_cast<uint64_t>(GroupPoolSize(pool_rows_, 0)));
    }
    // Retrieval models ignore the label: the hidden model's inputs may stay the drawn ones.
    if (retrieval_) retrieval_->Apply(rng, &cells);
    DrawLabels(inputs, rng, &cells, draws);
    for (const auto& w : weights_) cells[w] = FormatFloat(0.5 + uniform(rng));
    return cells;
  }

  // FG_NONE text of a sequence feature whose steps the sequence plan draws (`steps` of them):
  // paired history ids from the plan, otherwise one Zipf id (sparse) or value_dim Gaussian
  // values (dense) per step; hidden-model inputs averaged over the steps, as for FG output.
  std::string SteppedCell(const Feature& f, int steps, const SequenceRow& sequence,
                          std::mt19937_64& rng, std::vector<std::pair<int64_t, double>>* ids,
                          std::vector<DenseTerm>* dense) const {
    std::normal_distribution<double> normal(0.0, 1.0);
    std::string text;
    if (f.is_sparse()) {
      auto history = sequence.histories.find(f.name());
      for (int t = 0; t < steps; ++t) {
        int64_t id = 0;
        if (history != sequence.histories.end()) {
          ParseInt64(history->second[t], &id);
        } else {
          id = SampleZipf(rng, f.num_embeddings(), options_.zipf_exponent);
        }
        if (t) text += f.sequence_delim();
        text += std::to_string(id);
        ids->push_back({id, 1.0 / steps});
      }
      return text;
    }
    for (int t = 0; t < steps; ++t) {
      if (t) text += f.sequence_delim();
      for (int d = 0; d < f.value_dim(); ++d) {
        const double x = normal(rng);
        if (d) text += multival_sep_;
        text += FormatFloat(x);
        dense->push_back({d, x, static_cast<double>(steps)});
      }
    }
    return text;
  }

  void CountSequenceRow(const SequenceRow& sequence) {
    ++sequence_rows_;
    sequence_matches_ += sequence.matches;
  }

  bool IsRegressionLabel(const std::string& name) const {
    for (const auto& task : tasks_) {
      if (task.label == name) return task.regression;
    }
    return false;
  }

  // The hidden factorisation machine with key salt `salt` (0: the shared model) on a row's
  // inputs: first-order weights, dense terms, pairwise dot products of pooled vectors.
  double HiddenLogit(const RowInputs& inputs, uint64_t salt) const {
    double logit = 0.0;
    std::vector<std::array<double, kHiddenDim>> vectors;
    for (size_t i = 0; i < hidden_.size(); ++i) {
      const HiddenFeature& h = hidden_[i];
      if (h.feature->is_sparse()) {
        std::array<double, kHiddenDim> pooled{};
        for (const auto& [id, scale] : inputs.ids[i]) {
          logit += h.Weight(id, salt) * scale;
          for (int k = 0; k < kHiddenDim; ++k) pooled[k] += h.VectorEntry(id, k, salt) * scale;
        }
        vectors.push_back(pooled);
        continue;
      }
      for (const DenseTerm& term : inputs.dense[i]) {
        const double w = HashedNormal((h.key ^ salt) + 17 * term.dim);
        const double x = term.x;
        if (generator_) {
          // FG output (possibly bucketized or unbounded): a squashed linear term.
          logit += h.first_order_scale * w * std::tanh(x) / term.divisor;
        } else {
          // Linear plus a mild non-linearity the deep part can pick up (averaged over the
          // steps of a sequence; divisor 1 otherwise).
          logit += h.first_order_scale * (w * x + 0.5 * w * (x * x - 1.0)) / term.divisor;
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

  // Draws every label of one row into `cells` and its oracle into `draws`. Class c >= 1 of a
  // tower task has logit sqrt(kSharedShare) * shared + sqrt(1 - kSharedShare) * specific_c +
  // bias (class 0: 0); an independent label's class 1 has the shared logit + bias. A task with
  // parents is drawn only where all its parents are positive (label != 0), so its oracle
  // probability is the product of the gates' own probabilities and its own.
  void DrawLabels(const RowInputs& inputs, std::mt19937_64& rng,
                  std::map<std::string, std::string>* cells, std::vector<TaskDraws>* draws) const {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    // The sequence term joins the shared logit, so every task sees it. The oracle without it
    // (same draws) tells what a model blind to the history's relevant steps could reach.
    const bool with_sequence = sequence_.has_signal();
    const double blind = HiddenLogit(inputs, 0);
    const double shared = with_sequence ? blind + inputs.sequence_term : blind;
    const double mix_shared = std::sqrt(kSharedShare), mix_own = std::sqrt(1.0 - kSharedShare);
    std::vector<double> own(tasks_.size(), 1.0);  // P(label != 0 | x, parents positive)
    std::vector<double> own_blind(tasks_.size(), 1.0);
    std::vector<int> drawn(tasks_.size(), 0);
    for (int t : order_) {
      const Task& task = tasks_[t];
      TaskDraws& out = (*draws)[t];
      std::map<int, double> specific;  // task-specific hidden logits by class
      auto class_logit = [&](int c, double shared_logit) {
        if (task.independent && c == 1) return shared_logit + task.bias;
        auto it = specific.find(c);
        if (it == specific.end()) {
          const uint64_t salt =
              c == 1 ? task.salt : SplitMix64(task.salt + static_cast<uint64_t>(c));
          it = specific.emplace(c, HiddenLogit(inputs, salt)).first;
        }
        return mix_shared * shared_logit + mix_own * it->second + task.bias;
      };
      auto softmax = [&](double shared_logit) {
        std::vector<double> p(task.num_class, 0.0);
        double top = 0.0;
        for (int c = 1; c < task.num_class; ++c) {
          p[c] = class_logit(c, shared_logit);
          top = std::max(top, p[c]);
        }
        double total = 0.0;
        for (int c = 0; c < task.num_class; ++c) total += (p[c] = std::exp(p[c] - top));
        for (auto& v : p) v /= total;
        return p;
      };
      double gate = 1.0, gate_blind = 1.0;
      for (int g : task.gates) gate *= own[g];
      for (int g : task.gates) gate_blind *= own_blind[g];
      bool open = true;
      for (int p : task.parents) open = open && drawn[p] != 0;
      std::string text;
      if (task.regression) {
        const double mean = kRegressionScale * Sigmoid(class_logit(1, shared));
        const double noise = std::normal_distribution<double>(0.0, kRegressionNoise)(rng);
        const double y = open ? mean + noise : 0.0;
        text = FormatFloat(y);
        out.probs.push_back(static_cast<float>(gate * mean));
        out.labels.push_back(static_cast<float>(y));
      } else if (task.num_class <= 2) {
        const double q = Sigmoid(class_logit(1, shared));
        const int label = uniform(rng) < q && open ? 1 : 0;
        own[t] = q;
        drawn[t] = label;
        text = std::to_string(label);
        out.probs.push_back(static_cast<float>(gate * q));
        out.labels.push_back(static_cast<float>(label));
        if (with_sequence) {
          own_blind[t] = Sigmoid(class_logit(1, blind));
          out.probs_without_sequence.push_back(static_cast<float>(gate_blind * own_blind[t]));
        }
      } else {
        const std::vector<double> p = softmax(shared);
        const double u = uniform(rng);
        int cls = task.num_class - 1;
        double cumulative = 0.0;
        for (int c = 0; c < task.num_class; ++c) {
          cumulative += p[c];
          if (u < cumulative) {
            cls = c;
            break;
          }
        }
        const int label = open ? cls : 0;
        own[t] = 1.0 - p[0];
        drawn[t] = label;
        text = std::to_string(label);
        for (int c = 0; c < task.num_class; ++c) {
          out.probs.push_back(static_cast<float>(c == 0 ? 1.0 - gate * (1.0 - p[0]) : gate * p[c]));
        }
        out.labels.push_back(static_cast<float>(label));
        if (with_sequence) {
          const std::vector<double> b = softmax(blind);
          own_blind[t] = 1.0 - b[0];
          for (int c = 0; c < task.num_class; ++c) {
            out.probs_without_sequence.push_back(
                static_cast<float>(c == 0 ? 1.0 - gate_blind * (1.0 - b[0]) : gate_blind * b[c]));
          }
        }
      }
      (*cells)[task.label] = text;
    }
  }

  // ------------------------------------------------------------------------ grouping keys

  // Makes the feature (or column) `key` of a grouped metric or session loss take its values
  // from a small pool: FG_NONE the encoded id, FG modes the raw column(s) the feature reads.
  void PlanGroupingKey(const std::string& key) {
    const bool is_label = std::find(labels_.begin(), labels_.end(), key) != labels_.end();
    const bool is_weight = std::find(weights_.begin(), weights_.end(), key) != weights_.end();
    if (is_label || is_weight) return;
    if (!generator_) {
      for (const auto& f : features_) {
        if (f->name() != key) continue;
        if (f->is_sparse() && !f->is_sequence()) {
          group_features_.insert(key);
        } else {
          LOG_WARNING << "gen_data: grouping key '" << key << "' is not a plain sparse feature; "
                      << "its values are not pooled";
        }
        return;
      }
    } else {
      const fg::FeatureInfo* info = nullptr;
      for (const auto& candidate : infos_) {
        if (candidate.name == key && !candidate.is_sequence) info = &candidate;
      }
      if (!info) {
        // A raw column of that name: pooled as its first reader's values.
        for (const RawInput& raw : raw_inputs_) {
          if (raw.column == key && !raw.sequence) info = raw.info;
        }
      }
      if (info) {
        if (info->type != "id_feature") {
          LOG_WARNING << "gen_data: grouping key '" << key << "' is a " << info->type
                      << ", not an id_feature; its values are not pooled";
          return;
        }
        int columns = 0;
        for (const auto& input : info->inputs) {
          if (input.is_all || input.is_sequence || input.side == fg::Side::kConst) continue;
          if (input.side == fg::Side::kFeature && data_mode_ == protos::FG_DAG) continue;
          group_raw_[input.column] = info;
          ++columns;
        }
        if (columns == 0) {
          LOG_WARNING << "gen_data: grouping key '" << key << "' reads no raw column; its "
                      << "values are not pooled";
        }
        return;
      }
    }
    if (std::find(columns_.begin(), columns_.end(), key) != columns_.end()) {
      group_columns_.insert(key);  // a declared column no feature reads: integer keys
      return;
    }
    LOG_WARNING << "gen_data: grouping key '" << key << "' names no feature or column";
  }

  // ------------------------------------------------------------------------ sequences

  // The target/history signal of the model's sequence groups (after the grouping keys, whose
  // columns keep their pools) and, for FG_NONE, the sequence features whose steps it draws.
  void PlanSequences(const protos::EasyRecConfig& config, const GenDataOptions& options) {
    std::set<std::string> reserved(labels_.begin(), labels_.end());
    reserved.insert(weights_.begin(), weights_.end());
    reserved.insert(group_features_.begin(), group_features_.end());
    reserved.insert(group_columns_.begin(), group_columns_.end());
    for (const auto& kv : group_raw_) reserved.insert(kv.first);
    std::vector<fg::FeatureInfo> encoded;
    if (!generator_) encoded = fg::DescribeFeatures(config.feature_configs(), data_mode_);
    const std::vector<fg::FeatureInfo>& infos = generator_ ? infos_ : encoded;
    sequence_ =
        SequenceSignal(config.model_config(), infos, data_mode_, raw_inputs_, reserved, options);
    if (generator_) return;
    for (const auto& info : infos) {
      if (info.is_sequence && sequence_.DrawsSteps(info.sequence_name)) {
        stepped_[info.name] = info.sequence_name;
      }
    }
  }

  // A raw value of grouping-key feature `info`: pool entry j (uniform) as a token its
  // bucketizer maps to one id.
  std::string GroupToken(const fg::FeatureInfo& info, std::mt19937_64& rng) const {
    const fg::Bucketizer& b = *info.bucketizer;
    const uint64_t key = HashString(info.name) ^ SplitMix64(options_.seed);
    auto pick = [&](int64_t buckets) {
      const int64_t pool = GroupPoolSize(pool_rows_, buckets);
      const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(pool));
      return std::pair<int64_t, int64_t>(j, pool);
    };
    std::string token;
    if (b.kind() == fg::Bucketizer::Kind::kNumBuckets) {
      auto [j, pool] = pick(b.num_embeddings());
      token = std::to_string(GroupId(key, j, pool, b.num_embeddings()));
    } else if (b.kind() == fg::Bucketizer::Kind::kVocab && !b.effective_vocab_list().empty()) {
      std::vector<std::string> list;
      for (const auto& entry : b.effective_vocab_list()) {
        if (!entry.empty() && entry != "<OOV>") list.push_back(entry);
      }
      if (list.empty()) return "";
      token = list[pick(static_cast<int64_t>(list.size())).first];
    } else if (b.kind() == fg::Bucketizer::Kind::kVocab && !b.effective_vocab_dict().empty()) {
      const auto& dict = b.effective_vocab_dict();
      token = dict[pick(static_cast<int64_t>(dict.size())).first].first;
    } else {
      // Hashed (or unbucketized) strings: a pool of distinct strings.
      auto [j, pool] = pick(info.num_embeddings);
      token = "g" + std::to_string(SplitMix64(key ^ static_cast<uint64_t>(j)) % 1000000007ULL);
    }
    if (info.weighted) token += ":1";
    return token;
  }

  // Raw cells of one row; grouped sequences share a step count per row. `sequence_term`: the
  // row's target/history term.
  std::map<std::string, std::string> RawRow(std::mt19937_64& rng, double* sequence_term) {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::map<std::string, std::string> cells;
    SequenceRow sequence;
    if (sequence_.draws_anything()) {
      sequence = sequence_.Draw(rng);
      CountSequenceRow(sequence);
    }
    *sequence_term = sequence.term;
    std::map<std::string, int> steps = sequence.steps;  // by sequence name
    for (const RawInput& raw : raw_inputs_) {
      if (!raw.sequence) {
        auto group = group_raw_.find(raw.column);
        if (group != group_raw_.end()) {
          cells[raw.column] = GroupToken(*group->second, rng);
          continue;
        }
        auto target = sequence.targets.find(raw.column);
        if (target != sequence.targets.end()) {
          cells[raw.column] = target->second;  // a sequence-signal target: never null
          continue;
        }
        cells[raw.column] = uniform(rng) < options_.null_fraction ? std::string() : raw_drawer_.RawValue(raw, rng);
        continue;
      }
      const fg::FeatureInfo& info = *raw.info;
      auto it = steps.find(info.sequence_name);
      if (it == steps.end()) {
        // sequence_length 0 keeps every step; max_sequence_steps (8) is plenty for mock rows.
        const int64_t most = MaxSequenceSteps(info, options_.max_sequence_steps);
        it = steps.emplace(info.sequence_name, static_cast<int>(rng() % (most + 1))).first;
      }
      std::string text;
      auto history = sequence.histories.find(raw.column);
      for (int s = 0; s < it->second; ++s) {
        if (s) text += info.sequence_delim;
        text += history != sequence.histories.end() ? history->second[s]
                                                    : raw_drawer_.RawValue(raw, rng);
      }
      cells[raw.column] = text;
    }
    for (const auto& column : group_columns_) {
      cells[column] = std::to_string(rng() % static_cast<uint64_t>(GroupPoolSize(pool_rows_, 0)));
    }
    if (retrieval_) retrieval_->Apply(rng, &cells);
    return cells;
  }

  // Hidden-model inputs of row `row` of FG output `parsed` (the same model as for FG_NONE
  // data, over the encoded ids and values, so the signal survives feature generation).
  RowInputs InputsOf(const ParsedBatch& parsed, const std::map<std::string, size_t>& offsets,
                     int64_t row) const {
    RowInputs inputs;
    inputs.ids.resize(hidden_.size());
    inputs.dense.resize(hidden_.size());
    for (size_t h = 0; h < hidden_.size(); ++h) {
      const Feature& f = *hidden_[h].feature;
      size_t begin = offsets.at(f.name() + "#" + std::to_string(row));
      size_t end = offsets.at(f.name() + "#" + std::to_string(row + 1));
      if (f.is_sparse()) {
        const SparseValues& sv = parsed.sparse.at(f.name());
        const double n = static_cast<double>(end - begin);
        for (size_t i = begin; i < end; ++i) {
          // Weighted features pool w * vector, as the model does.
          const double weight = sv.weights.empty() ? 1.0 : sv.weights[i];
          const double scale = (f.pooling() == "mean" || f.is_sequence() ? 1.0 / n : 1.0) * weight;
          inputs.ids[h].push_back({sv.values[i], scale});
        }
      } else {
        const DenseValues& dv = parsed.dense.at(f.name());
        const double divisor = std::max<double>(1.0, (end - begin) / dv.dim);
        for (size_t i = begin; i < end; ++i) {
          // A value no draw should give (an expression outside its domain): the labels and
          // the oracle would all be NaN.
          if (!std::isfinite(dv.values[i])) {
            Fail("gen_data: ", f.config_path(), " gave ", dv.values[i], " for a drawn row; ",
                 "its expression or normalizer is not finite on gen_data's raw values");
          }
          const int dim = static_cast<int>((i - begin) % dv.dim);
          inputs.dense[h].push_back({dim, dv.values[i], divisor});
        }
      }
    }
    return inputs;
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
                std::vector<TaskDraws>* draws) {
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
        ParquetType type = ParquetType::kString;
        if (is_label) type = IsRegressionLabel(name) ? ParquetType::kDouble : ParquetType::kInt64;
        if (is_weight) type = ParquetType::kDouble;
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
      std::vector<double> sequence_terms(n, 0.0);
      for (int64_t r = 0; r < n; ++r) {
        cells[r] = RawRow(rng, &sequence_terms[r]);
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
        RowInputs inputs = InputsOf(parsed, offsets, r);
        inputs.sequence_term = sequence_terms[r];
        DrawLabels(inputs, rng, &cells[r], draws);
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
  RawValueDrawer raw_drawer_{options_};  // after options_, which it copies
  protos::FgMode data_mode_ = protos::FG_NONE;
  std::vector<Task> tasks_;  // one per label field, in label order
  std::vector<int> order_;   // tasks in drawing order (parents first)
  bool has_towers_ = false;
  // Grouping keys: FG_NONE features, raw columns (with the feature whose values they take),
  // and declared columns no feature reads; values come from a pool sized by pool_rows_.
  std::set<std::string> group_features_, group_columns_;
  std::map<std::string, const fg::FeatureInfo*> group_raw_;
  int64_t pool_rows_ = 0;
  SequenceSignal sequence_;
  // FG_NONE sequence features whose steps sequence_ draws -> their sequence name.
  std::map<std::string, std::string> stepped_;
  int64_t sequence_rows_ = 0, sequence_matches_ = 0;  // of the current Write()
  std::vector<std::unique_ptr<Feature>> features_;
  std::vector<HiddenFeature> hidden_;
  std::vector<std::string> columns_, labels_, weights_;
  char delimiter_ = ',';
  std::string multival_sep_;
  bool write_header_ = true;
  bool parquet_ = false;
  std::unique_ptr<RetrievalPlan> retrieval_;
};

}  // namespace

namespace {

// Bounds of the sequence options: a row's text must stay far below the CSV record cap, and
// pools are meant to be small.
constexpr int kMaxSequenceSteps = 10000;
constexpr int64_t kMaxSequencePool = 1000000;

void CheckSequenceOptions(const GenDataOptions& options) {
  const double variance = options.sequence_signal_variance;
  if (!(variance >= 0) || !std::isfinite(variance)) {
    Fail("gen_data: --sequence_signal_variance must be a finite number >= 0, got ",
         options.sequence_signal_variance);
  }
  if (options.max_sequence_steps < 1 || options.max_sequence_steps > kMaxSequenceSteps) {
    Fail("gen_data: --max_sequence_steps must be in [1, ", kMaxSequenceSteps, "], got ",
         options.max_sequence_steps);
  }
  if (options.sequence_pool_size < 2 || options.sequence_pool_size > kMaxSequencePool) {
    Fail("gen_data: --sequence_pool_size must be in [2, ", kMaxSequencePool, "], got ",
         options.sequence_pool_size);
  }
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Oracle AUC of a task's eval draws: exact AUC of P(label != 0) for binary labels, the
// mean one-vs-rest AUC over classes with both outcomes present for num_class > 2.
double OracleAuc(const TaskDraws& eval, int num_class) {
  if (num_class <= 2) return ExactAuc(eval.probs, eval.labels);
  double sum = 0.0;
  int classes = 0;
  const size_t rows = eval.labels.size();
  for (int c = 0; c < num_class; ++c) {
    std::vector<float> probs(rows), labels(rows);
    int64_t positives = 0;
    for (size_t r = 0; r < rows; ++r) {
      probs[r] = eval.probs[r * num_class + c];
      labels[r] = static_cast<int>(eval.labels[r]) == c ? 1.0f : 0.0f;
      positives += labels[r] > 0.5f;
    }
    if (positives == 0 || positives == static_cast<int64_t>(rows)) continue;
    sum += ExactAuc(probs, labels);
    ++classes;
  }
  return classes ? sum / classes : 0.0;
}

}  // namespace

GenDataResult GenerateMockData(const protos::EasyRecConfig& config,
                               const GenDataOptions& options) {
  if (options.output_dir.empty()) Fail("gen_data: --output_dir is required");
  if (options.train_rows <= 0 || options.eval_rows <= 0) Fail("gen_data: rows must be > 0");
  CheckSequenceOptions(options);
  Generator generator(config, options);
  GenDataResult result;
  std::vector<TaskDraws> train, eval;
  int train_files = std::max(1, options.num_files);
  int eval_files = std::max(1, train_files / 4);
  std::string train_dir = JoinPath(options.output_dir, "train");
  std::string eval_dir = JoinPath(options.output_dir, "eval");
  generator.Write(train_dir, options.train_rows, train_files, 1, &train);
  result.sequence_match_rate = generator.sequence_match_rate();
  generator.Write(eval_dir, options.eval_rows, eval_files, 2, &eval);
  result.sequence_pairs = generator.sequence_signal().PairNames();
  const bool with_sequence = !result.sequence_pairs.empty();
  if (generator.retrieval()) {
    result.sampler_tables = generator.retrieval()->WriteTables(JoinPath(options.output_dir, "sampler"));
  }
  result.train_pattern = JoinPath(train_dir, std::string("*.") + generator.extension());
  result.eval_pattern = JoinPath(eval_dir, std::string("*.") + generator.extension());

  const auto& tasks = generator.tasks();
  int headline = -1;  // the label behind the top-level oracle_auc / positive_rate
  for (size_t t = 0; t < tasks.size(); ++t) {
    const Task& task = tasks[t];
    GenDataLabel label;
    label.label = task.label;
    label.tower = task.tower;
    label.num_class = task.num_class;
    label.regression = task.regression;
    for (int p : task.parents) label.depends_on.push_back(tasks[p].label);
    if (task.regression) {
      double squared = 0.0, sum = 0.0;
      for (size_t r = 0; r < eval[t].labels.size(); ++r) {
        const double d = static_cast<double>(eval[t].probs[r]) - eval[t].labels[r];
        squared += d * d;
      }
      for (float y : train[t].labels) sum += y;
      label.oracle_mse = squared / static_cast<double>(eval[t].labels.size());
      label.mean = sum / static_cast<double>(train[t].labels.size());
    } else {
      label.oracle_auc = OracleAuc(eval[t], task.num_class);
      if (with_sequence) {
        TaskDraws blind;
        blind.probs = eval[t].probs_without_sequence;
        blind.labels = eval[t].labels;
        label.oracle_auc_without_sequence = OracleAuc(blind, task.num_class);
      }
      double positives = 0;
      for (float y : train[t].labels) positives += y != 0.0f;
      label.positive_rate = positives / static_cast<double>(train[t].labels.size());
      if (headline < 0) headline = static_cast<int>(t);
    }
    result.labels.push_back(label);
  }
  if (headline >= 0) {
    result.oracle_auc = result.labels[headline].oracle_auc;
    result.positive_rate = result.labels[headline].positive_rate;
  }

  auto oracle_fields = [&](const GenDataLabel& label) {
    std::ostringstream out;
    out.precision(17);
    if (label.regression) {
      out << "\"oracle_mse\": " << label.oracle_mse;
    } else {
      out << "\"oracle_auc\": " << label.oracle_auc;
      if (with_sequence) {
        out << ", \"oracle_auc_without_sequence\": " << label.oracle_auc_without_sequence;
      }
    }
    return out.str();
  };
  std::ostringstream json;
  json.precision(17);
  json << "{\"eval_pattern\": " << JsonString(result.eval_pattern) << ", \"labels\": {";
  for (size_t l = 0; l < result.labels.size(); ++l) {
    const GenDataLabel& label = result.labels[l];
    json << (l ? ", " : "") << JsonString(label.label) << ": {";
    if (label.regression) {
      json << "\"mean\": " << label.mean << ", " << oracle_fields(label);
    } else {
      json << oracle_fields(label) << ", \"positive_rate\": " << label.positive_rate;
    }
    json << "}";
  }
  json << "}";
  if (generator.has_towers()) {
    json << ", \"towers\": {";
    bool first = true;
    for (const GenDataLabel& label : result.labels) {
      if (label.tower.empty()) continue;
      json << (first ? "" : ", ") << JsonString(label.tower) << ": {\"label\": "
           << JsonString(label.label) << ", " << oracle_fields(label) << "}";
      first = false;
    }
    json << "}";
  }
  if (with_sequence) {
    json << ", \"sequence_signal\": {\"match_rate\": " << result.sequence_match_rate
         << ", \"pairs\": [";
    for (size_t p = 0; p < result.sequence_pairs.size(); ++p) {
      json << (p ? ", " : "") << "[" << JsonString(result.sequence_pairs[p].first) << ", "
           << JsonString(result.sequence_pairs[p].second) << "]";
    }
    json << "], \"variance\": " << options.sequence_signal_variance << "}";
  }
  if (const RetrievalPlan* plan = generator.retrieval()) {
    const RetrievalPlanOptions& o = plan->options();
    json << ", \"retrieval\": {\"items\": " << o.items << ", \"users\": " << o.users
         << ", \"clusters\": " << o.clusters << ", \"in_cluster_rate\": " << o.in_cluster_rate
         << ", \"tables\": {";
    bool first = true;
    for (const auto& [name, path] : result.sampler_tables) {
      json << (first ? "" : ", ") << JsonString(name) << ": " << JsonString(path);
      first = false;
    }
    json << "}}";
  }
  // The top-level fields last: scripts read them with a greedy `.*"oracle_auc": `.
  json << ", \"oracle_auc\": " << result.oracle_auc << ", \"positive_rate\": "
       << result.positive_rate << ", \"train_pattern\": " << JsonString(result.train_pattern)
       << "}";
  WriteFileAtomic(JoinPath(options.output_dir, "oracle.json"), json.str() + "\n");
  return result;
}

int GenDataMain(const std::vector<std::string>& args) {
  Flags flags("gen_data",
              "Writes mock train/eval data for a pipeline config (CSV, or Parquet for "
              "ParquetDataset), with labels drawn from a hidden model (one per task tower), and "
              "reports the oracle AUC of each label.",
              {{"pipeline_config_path", "pipeline config to generate data for"},
               {"output_dir", "directory for train/, eval/ and oracle.json"},
               {"train_rows", "number of train rows", false, "100000"},
               {"eval_rows", "number of eval rows", false, "20000"},
               {"num_files", "number of train files (eval gets a quarter, at least 1)", false, "2"},
               {"seed", "random seed", false, "2024"},
               {"multi_value_fraction", "share of sparse values with two ids", false, "0.1"},
               {"null_fraction", "share of sparse values left empty", false, "0.02"},
               {"first_order_variance",
                "variance of the hidden model's per-id weights, summed over features", false, "1.0"},
               {"interaction_variance",
                "variance of the hidden model's pairwise feature interactions (first-order ids "
                "have 1.0)", false, "1.0"},
               {"sequence_signal_variance",
                "variance of the hidden model's target/history term, for models with sequence "
                "groups (0: none): the mean hidden value of the history steps whose key attribute "
                "(e.g. cate_id) equals the target's",
                false, "1.0"},
               {"max_sequence_steps",
                "most steps a sequence gets per row (uniform from 0; capped by sequence_length)",
                false, "8"},
               {"sequence_pool_size",
                "distinct values of each attribute that query and history share in a sequence "
                "group", false, "500"},
               {"edit_config_json", "JSON object of config path -> value overrides (as for "
                                    "train_eval), e.g. to write Parquet for an ODPS config"}});
  if (!flags.Parse(args)) return 0;
  if (flags.Get("pipeline_config_path").empty()) Fail("gen_data: --pipeline_config_path is required");
  GenDataOptions options;
  options.output_dir = flags.Get("output_dir");
  options.train_rows = flags.GetInt("train_rows");
  options.eval_rows = flags.GetInt("eval_rows");
  options.num_files = static_cast<int>(flags.GetInt("num_files"));
  options.seed = static_cast<uint64_t>(flags.GetInt("seed"));
  if (!ParseDouble(flags.Get("multi_value_fraction"), &options.multi_value_fraction) ||
      !ParseDouble(flags.Get("null_fraction"), &options.null_fraction) ||
      !ParseDouble(flags.Get("first_order_variance"), &options.first_order_variance) ||
      !ParseDouble(flags.Get("interaction_variance"), &options.interaction_variance)) {
    Fail("gen_data: --multi_value_fraction, --null_fraction, --first_order_variance and "
         "--interaction_variance must be numbers");
  }
  if (options.first_order_variance < 0) Fail("gen_data: --first_order_variance must be >= 0");
  if (options.interaction_variance < 0) Fail("gen_data: --interaction_variance must be >= 0");
  if (!ParseDouble(flags.Get("sequence_signal_variance"), &options.sequence_signal_variance)) {
    Fail("gen_data: --sequence_signal_variance must be a number, got '",
         flags.Get("sequence_signal_variance"), "'");
  }
  const int64_t steps = flags.GetInt("max_sequence_steps");
  if (steps < 1 || steps > kMaxSequenceSteps) {
    Fail("gen_data: --max_sequence_steps must be in [1, ", kMaxSequenceSteps, "], got ", steps);
  }
  options.max_sequence_steps = static_cast<int>(steps);
  options.sequence_pool_size = flags.GetInt("sequence_pool_size");
  CheckSequenceOptions(options);  // bad flags fail before the config is read
  auto config = LoadPipelineConfig(flags.Get("pipeline_config_path"));
  if (!flags.Get("edit_config_json").empty()) EditConfigJson(&config, flags.Get("edit_config_json"));
  // The check train_eval runs first: an unsupported field otherwise surfaces as whatever
  // gen_data's own use of the config trips over.
  CheckConfigSupported(config);
  auto result = GenerateMockData(config, options);
  LOG_INFO << "gen_data: wrote " << options.train_rows << " train rows to "
           << result.train_pattern << " and " << options.eval_rows << " eval rows to "
           << result.eval_pattern;
  LOG_INFO << "gen_data: positive rate " << result.positive_rate << ", oracle AUC "
           << result.oracle_auc;
  if (!result.sequence_pairs.empty()) {
    LOG_INFO << "gen_data: sequence signal on " << result.sequence_pairs.size()
             << " pairs; share of histories with a step relevant to the target "
             << result.sequence_match_rate;
  }
  std::printf("oracle_auc=%.6f\n", result.oracle_auc);
  for (const auto& [name, path] : result.sampler_tables) {
    LOG_INFO << "gen_data: sampler " << name << " " << path;
    std::printf("sampler_%s=%s\n", name.c_str(), path.c_str());
  }
  for (const auto& label : result.labels) {
    if (label.regression) {
      LOG_INFO << "gen_data: label " << label.label << ": mean " << label.mean << ", oracle MSE "
               << label.oracle_mse;
      std::printf("oracle_mse_%s=%.6f\n", label.label.c_str(), label.oracle_mse);
    } else {
      LOG_INFO << "gen_data: label " << label.label << ": positive rate " << label.positive_rate
               << ", oracle AUC " << label.oracle_auc;
      std::printf("oracle_auc_%s=%.6f\n", label.label.c_str(), label.oracle_auc);
      if (!result.sequence_pairs.empty()) {
        LOG_INFO << "gen_data: label " << label.label << ": oracle AUC without the sequence term "
                 << label.oracle_auc_without_sequence;
        std::printf("oracle_auc_without_sequence_%s=%.6f\n", label.label.c_str(),
                    label.oracle_auc_without_sequence);
      }
    }
  }
  return 0;
}

}  // namespace tzrec
