#include "tzrec/serving/tdm_retrieval.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <set>

#include "tzrec/batch/batch.h"
#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/csv_reader.h"
#include "tzrec/data/parquet/parquet_writer.h"
#include "tzrec/input/tdm_pairs.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/serving/output_part.h"
#include "tzrec/train/runtime.h"

namespace tzrec {
namespace {

constexpr char kRecallColumn[] = "recall_ids";
// Pair rows per forward: a level's pairs (users x 2 * n_cluster * recall_num) are scored in
// slices of this many rows, so memory does not grow with recall_num or the user batch.
constexpr int64_t kPairRowsPerForward = 4096;

// Writes one part file: the reserved columns, then recall_ids.
class RecallWriter {
 public:
  RecallWriter(std::string path, bool parquet, std::vector<std::string> reserved)
      : path_(std::move(path)), reserved_(std::move(reserved)) {
    if (parquet) {
      std::vector<ParquetFieldSpec> fields;
      for (const std::string& name : reserved_) fields.push_back(ParquetFieldSpec::Plain(name, ParquetType::kString));
      fields.push_back(ParquetFieldSpec::List(kRecallColumn, ParquetType::kInt64, 1));
      parquet_ = std::make_unique<ParquetFileWriter>(path_, fields);
      return;
    }
    csv_ = std::fopen(path_.c_str(), "wb");
    if (!csv_) Fail("cannot write '", path_, "': ", std::strerror(errno));
    std::string header;
    for (const std::string& name : reserved_) header += CsvField(name) + ",";
    WriteCsv(header + kRecallColumn + "\n");
  }
  ~RecallWriter() {
    if (csv_) std::fclose(csv_);
  }

  // `reserved`: per reserved column, one value per user; `recall`: per user.
  void Write(const std::vector<std::vector<std::string>>& reserved, const std::vector<std::vector<int64_t>>& recall) {
    if (parquet_) {
      std::vector<ParquetColumn> columns(reserved_.size() + 1);
      for (size_t c = 0; c < reserved_.size(); ++c) {
        columns[c].name = reserved_[c];
        columns[c].values.name = reserved_[c];
        columns[c].values.type = ColumnType::kString;
        for (const std::string& value : reserved[c]) columns[c].values.AppendString(value, true);
      }
      ParquetColumn& ids = columns.back();
      ids.name = kRecallColumn;
      ids.values.name = kRecallColumn;
      ids.values.type = ColumnType::kInt64;
      ParquetListLevel level;
      for (const std::vector<int64_t>& row : recall) {
        level.Append(true, static_cast<uint32_t>(row.size()));
        ids.values.ints.insert(ids.values.ints.end(), row.begin(), row.end());
      }
      ids.values.valid.assign(ids.values.ints.size(), 1);
      ids.lists.push_back(std::move(level));
      parquet_->Write(columns);
      return;
    }
    std::string text;
    for (size_t r = 0; r < recall.size(); ++r) {
      for (const auto& column : reserved) text += CsvField(column[r]) + ",";
      std::string ids;
      for (size_t i = 0; i < recall[r].size(); ++i) ids += (i ? "," : "") + std::to_string(recall[r][i]);
      text += CsvField(ids) + "\n";
    }
    WriteCsv(text);
  }

  void Close() {
    if (parquet_) {
      parquet_->Close();
      return;
    }
    const bool failed = std::fflush(csv_) != 0 || fsync(fileno(csv_)) != 0;
    const int closed = std::fclose(csv_);
    csv_ = nullptr;
    if (failed || closed != 0) Fail("cannot write '", path_, "': ", std::strerror(errno));
  }

 private:
  void WriteCsv(const std::string& text) {
    if (std::fwrite(text.data(), 1, text.size(), csv_) != text.size()) {
      Fail("cannot write '", path_, "': ", std::strerror(errno));
    }
  }

  std::string path_;
  std::vector<std::string> reserved_;
  std::unique_ptr<ParquetFileWriter> parquet_;
  std::FILE* csv_ = nullptr;
};

// The beam search over one batch of users.
class BeamSearch {
 public:
  BeamSearch(Model* model, const TdmPairs* pairs, int64_t recall_num, int first_level, std::string prob_name)
      : model_(model), pairs_(pairs), recall_num_(recall_num), first_level_(first_level),
        prob_name_(std::move(prob_name)) {
    const TdmSampler& tree = pairs_->sampler();
    // The root's descendants on the first recall level (nobody is scored above it).
    size_t count = 0;
    const uint32_t* roots = tree.Children(tree.entry_node(), &count);
    start_.assign(roots, roots + count);
    for (int level = 0; level < first_level_; ++level) start_ = Children(start_);
    // Item features of every node the search can score, generated once.
    std::vector<uint32_t> scorable;
    row_of_node_.assign(tree.nodes().size(), -1);
    for (uint32_t n = 0; n < tree.nodes().size(); ++n) {
      if (tree.level(n) >= first_level_) {
        row_of_node_[n] = static_cast<int64_t>(scorable.size());
        scorable.push_back(n);
      }
    }
    node_features_ = pairs_->NodeFeatures(scorable);
    LOG_INFO << "tdm_retrieval: " << start_.size() << " candidates on level " << first_level_ << ", "
             << scorable.size() << " nodes on levels " << first_level_ << ".." << tree.num_levels() - 1;
  }

  // recall_ids of each row of `users` (their user side; item features are replaced).
  std::vector<std::vector<int64_t>> Recall(const ParsedBatch& users) {
    const TdmSampler& tree = pairs_->sampler();
    const int leaf_level = tree.num_levels() - 1;
    const int64_t b = users.size;
    std::vector<std::vector<uint32_t>> candidates(b, start_);
    std::vector<std::vector<int64_t>> recall(b);
    for (int level = first_level_;; ++level) {
      std::vector<int64_t> rows;
      std::vector<uint32_t> nodes;
      for (int64_t u = 0; u < b; ++u) {
        rows.insert(rows.end(), candidates[u].size(), u);
        nodes.insert(nodes.end(), candidates[u].begin(), candidates[u].end());
      }
      const std::vector<float> probs = Score(users, rows, nodes);
      size_t offset = 0;
      for (int64_t u = 0; u < b; ++u) {
        const size_t n = candidates[u].size();
        std::vector<size_t> order(n);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t x, size_t y) { return probs[offset + x] > probs[offset + y]; });
        if (level == leaf_level) {
          std::set<int64_t> seen;
          for (size_t i : order) {
            if (static_cast<int64_t>(recall[u].size()) >= recall_num_) break;
            const uint32_t node = candidates[u][i];
            if (tree.level(node) != leaf_level) continue;
            const int64_t id = tree.nodes().id(node);
            if (seen.insert(id).second) recall[u].push_back(id);
          }
        } else {
          std::vector<uint32_t> kept;
          for (size_t i = 0; i < n && static_cast<int64_t>(kept.size()) < 2 * recall_num_; ++i) {
            kept.push_back(candidates[u][order[i]]);
          }
          candidates[u] = Children(kept);
        }
        offset += n;
      }
      if (level >= leaf_level) break;
    }
    return recall;
  }

 private:
  std::vector<uint32_t> Children(const std::vector<uint32_t>& nodes) const {
    std::vector<uint32_t> out;
    for (uint32_t node : nodes) {
      size_t count = 0;
      const uint32_t* children = pairs_->sampler().Children(node, &count);
      out.insert(out.end(), children, children + count);
    }
    return out;
  }

  // The ranker's positive-class probability of user rows[i] with node nodes[i].
  std::vector<float> Score(const ParsedBatch& users, const std::vector<int64_t>& rows,
                           const std::vector<uint32_t>& nodes) {
    std::vector<float> probs;
    probs.reserve(rows.size());
    for (size_t begin = 0; begin < rows.size(); begin += kPairRowsPerForward) {
      const size_t end = std::min(rows.size(), begin + static_cast<size_t>(kPairRowsPerForward));
      std::vector<int64_t> item_rows;
      for (size_t i = begin; i < end; ++i) {
        const int64_t row = row_of_node_[nodes[i]];
        TZREC_CHECK(row >= 0, "node ", pairs_->sampler().nodes().id(nodes[i]), " above the first recall level");
        item_rows.push_back(row);
      }
      const std::vector<int64_t> user_rows(rows.begin() + begin, rows.begin() + end);
      Batch batch = ToBatch(pairs_->Pair(users, user_rows, node_features_.TakeRows(item_rows)));
      ScopedGemmPrecision precision(model_->gemm_precision());
      const Predictions predictions = model_->Predict(batch);
      auto it = predictions.find(prob_name_);
      if (it == predictions.end()) Fail("the model has no output '", prob_name_, "' (tdm_retrieval ranks by it)");
      const at::Tensor p = it->second.detach().to(at::kFloat).contiguous().reshape({-1});
      TZREC_CHECK(p.numel() == static_cast<int64_t>(end - begin), "one probability per pair");
      probs.insert(probs.end(), p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
    }
    return probs;
  }

  Model* model_;
  const TdmPairs* pairs_;
  int64_t recall_num_;
  int first_level_;
  std::string prob_name_;
  std::vector<uint32_t> start_;
  std::vector<int64_t> row_of_node_;  // node index -> row of node_features_, -1 above first_level_
  ParsedBatch node_features_;
};

}  // namespace

int TdmFirstRecallLevel(int n_cluster, int64_t recall_num, int leaf_level) {
  const double wanted = 2.0 * n_cluster * static_cast<double>(recall_num);
  int level = 0;
  double width = 1.0;
  while (width < wanted && level < leaf_level) {
    width *= n_cluster;
    ++level;
  }
  return level;
}

TdmRetrievalResult TdmRetrieve(const TdmRetrievalOptions& options) {
  if (options.scripted_model_path.empty()) Fail("--scripted_model_path (a TDM export's model/ directory) is required");
  if (options.predict_input_path.empty()) Fail("--predict_input_path is required");
  if (options.predict_output_path.empty()) Fail("--predict_output_path is required");
  if (options.recall_num <= 0) Fail("--recall_num must be positive, got ", options.recall_num);
  if (options.n_cluster < 2) Fail("--n_cluster must be at least 2, got ", options.n_cluster);
  if (options.batch_size < 0 || options.predict_threads < 0) {
    Fail("--batch_size and --predict_threads must not be negative");
  }
  std::unique_ptr<DistContext> dist = DistContext::FromEnvironment();
  std::unique_ptr<Pipeline> pipeline = LoadExportedPipeline(
      options.scripted_model_path, PipelineMode::kPredict,
      ScoringConfigEdits(options.edit_config_json, options.batch_size, options.dataset_type));
  const protos::EasyRecConfig& config = pipeline->config;
  if (config.model_config().model_case() != protos::ModelConfig::kTdm || !pipeline->tower.empty()) {
    Fail("--scripted_model_path: '", options.scripted_model_path, "' is not the model/ directory of a TDM export");
  }
  if (!config.data_config().has_tdm_sampler()) {
    Fail(options.scripted_model_path, "/pipeline.config: data_config.tdm_sampler (the tree) is required");
  }
  const protos::DataConfig& data = config.data_config();
  const bool parquet = WritesParquet(options.writer_type, data);
  const std::string where = "data_config.tdm_sampler";
  auto tree = std::make_shared<const TdmSampler>(data.tdm_sampler(), where, TdmTreeUse::kRetrieve);
  const std::string& item_id_field = tree->item_id_field();
  const std::vector<std::string> reserved = CommaList(options.reserved_columns);
  for (const std::string& name : reserved) {
    if (name == kRecallColumn) Fail("--reserved_columns: '", name, "' is the column tdm_retrieval writes");
  }
  std::vector<std::string> read_reserved = reserved;
  if (std::find(reserved.begin(), reserved.end(), item_id_field) == reserved.end()) read_reserved.push_back(item_id_field);

  Model& model = *pipeline->model;
  model.eval();
  const std::string prob_name = config.model_config().num_class() == 2 ? "probs1" : "probs";
  const int leaf_level = tree->num_levels() - 1;
  const int first_level = TdmFirstRecallLevel(options.n_cluster, options.recall_num, leaf_level);

  OutputPart part(options.predict_output_path, dist->rank(), parquet ? "parquet" : "csv", "tdm-retrieval");
  std::unique_ptr<Dataset> dataset = pipeline->MakeDataset(options.predict_input_path, DatasetMode::kPredict,
                                                           DataSeed(), dist.get(), read_reserved);
  const TdmPairs pairs(tree, pipeline->FeaturePointers(), pipeline->generator, dataset->options().columns, where);
  const std::string staged_path = part.Stage();

  const int previous_threads = at::get_num_threads();
  if (options.predict_threads > 0) at::set_num_threads(options.predict_threads);
  std::vector<double> counts = {0.0, 0.0};  // users, hits
  std::exception_ptr failure;
  const auto start = std::chrono::steady_clock::now();
  try {
    c10::NoGradGuard no_grad;
    BeamSearch search(&model, &pairs, options.recall_num, first_level, prob_name);
    LOG_INFO << "tdm_retrieval: recall_num " << options.recall_num << ", n_cluster " << options.n_cluster
             << ", beam search from level " << first_level << " to the leaves on level " << leaf_level;
    RecallWriter writer(staged_path, parquet, reserved);
    std::unique_ptr<ParsedBatchStream> stream = dataset->Open(0);
    ParsedBatch users;
    int64_t batches = 0;
    while (stream->Next(&users)) {
      std::vector<std::vector<std::string>> reserved_values;
      for (const std::string& name : reserved) reserved_values.push_back(users.reserved.at(name));
      const std::vector<std::string> actual = users.reserved.at(item_id_field);
      users.reserved.clear();  // not repeated into the pair rows
      const std::vector<std::vector<int64_t>> recall = search.Recall(users);
      for (size_t u = 0; u < recall.size(); ++u) {
        int64_t id = 0;
        if (!ParseInt64(Trim(actual[u]), &id)) {
          Fail(options.predict_input_path, ": '", item_id_field, "' (the tdm_sampler's item_id_field) is '", actual[u],
               "', not an integer id");
        }
        counts[1] += std::find(recall[u].begin(), recall[u].end(), id) != recall[u].end();
      }
      counts[0] += static_cast<double>(recall.size());
      writer.Write(reserved_values, recall);
      if (++batches % 10 == 0) {
        LOG_INFO << "tdm_retrieval: " << batches << " batches, " << static_cast<int64_t>(counts[0]) << " users";
      }
    }
    writer.Close();
  } catch (...) {
    failure = std::current_exception();
  }
  at::set_num_threads(previous_threads);
  part.Commit(failure, dist->comm(), "tdm_retrieval");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t local_users = static_cast<int64_t>(counts[0]);
  if (dist->comm()) dist->comm()->AllReduceSum(&counts);
  TdmRetrievalResult result;
  result.users = static_cast<int64_t>(counts[0]);
  result.hits = static_cast<int64_t>(counts[1]);
  LOG_INFO << "tdm_retrieval: wrote " << local_users << " users to " << part.final_path() << " in " << seconds << " s";
  LOG_INFO << "tdm_retrieval: Recall@" << options.recall_num << " = " << result.recall() << " (" << result.hits << " of "
           << result.users << " users' " << item_id_field << " recalled)";
  return result;
}

int TdmRetrievalMain(const std::vector<std::string>& args) {
  Flags flags("tdm_retrieval",
              "Recalls items for each input user by beam search down the TDM tree (the export's "
              "data_config.tdm_sampler tables) with the exported TDM ranker, and logs the recall "
              "of the input's item_id_field. Writes part-<rank>.<csv|parquet> with the reserved "
              "columns and recall_ids.",
              {{"scripted_model_path", "a TDM export's model/ directory (tzrec export)"},
               {"predict_input_path", "input files: user rows with the tdm_sampler's item_id_field"},
               {"predict_output_path", "output directory"},
               {"recall_num", "items recalled per user", false, "200"},
               {"n_cluster", "the tree's branching factor (as in tdm_init_tree / tdm_cluster_tree)", false, "2"},
               {"reserved_columns", "input columns copied to the output (comma-separated)"},
               {"batch_size", "users per batch (default: data_config.batch_size)", false, "0"},
               {"predict_threads", "intra-op threads of the forward (default: all cores)", false, "0"},
               {"dataset_type", "CsvDataset or ParquetDataset (default: the config's)"},
               {"writer_type", "CsvWriter or ParquetWriter (default: from the dataset type)"},
               {"edit_config_json", "JSON object of config path -> value overrides (e.g. the tree's tables)"},
               {"num_worker_per_level", "accepted for TorchEasyRec compatibility (its sampler processes per "
                                        "level); tzrec walks the tree in process",
                false, "1"}});
  if (!flags.Parse(args)) return 0;
  TdmRetrievalOptions options;
  options.scripted_model_path = flags.Get("scripted_model_path");
  options.predict_input_path = flags.Get("predict_input_path");
  options.predict_output_path = flags.Get("predict_output_path");
  options.recall_num = flags.GetInt("recall_num");
  options.n_cluster = static_cast<int>(flags.GetInt("n_cluster"));
  options.reserved_columns = flags.Get("reserved_columns");
  options.batch_size = flags.GetInt("batch_size");
  options.predict_threads = static_cast<int>(flags.GetInt("predict_threads"));
  options.dataset_type = flags.Get("dataset_type");
  options.writer_type = flags.Get("writer_type");
  options.edit_config_json = flags.Get("edit_config_json");
  if (flags.GetInt("num_worker_per_level") < 1) Fail("--num_worker_per_level must be at least 1");
  TdmRetrieve(options);
  return 0;
}

}  // namespace tzrec
