#include "tzrec/serving/predict.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "tzrec/batch/batch_stream.h"
#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/config/supported_fields.h"
#include "tzrec/data/csv_reader.h"
#include "tzrec/data/parquet/parquet_reader.h"
#include "tzrec/data/parquet/parquet_writer.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/serving/output_part.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/runtime.h"

namespace tzrec {
namespace {

constexpr char kAllColumns[] = "ALL_COLUMNS";

// Every column of the input, in file order (for --reserved_columns=ALL_COLUMNS).
std::vector<std::string> AllInputColumns(const protos::DataConfig& data, const std::string& input_path) {
  std::vector<std::string> files = ExpandInputPaths(input_path);
  if (files.empty()) Fail("--predict_input_path: no file matches '", input_path, "'");
  if (data.dataset_type() == protos::ParquetDataset) {
    return ParquetFileReader(files.front()).column_names();
  }
  if (data.with_header()) {
    CsvOptions csv;
    csv.with_header = true;
    if (!data.delimiter().empty()) csv.delimiter = data.delimiter()[0];
    return CsvFileReader(files.front(), csv).column_names();
  }
  std::vector<std::string> names;
  for (const auto& field : data.input_fields()) names.push_back(field.input_name());
  if (names.empty()) {
    for (auto entry : SplitView(data.input_fields_str(), ";")) {
      std::string item(Trim(entry));
      if (!item.empty()) names.push_back(item.substr(0, item.find(':')));
    }
  }
  return names;
}

// One batch's rows on their way to the writer.
struct OutputChunk {
  int64_t rows = 0;
  std::vector<at::Tensor> outputs;                    // per output column, [rows] or [rows, k]
  std::vector<std::vector<std::string>> reserved;     // per reserved column
};

// Writes chunks to one file (CSV or Parquet) on its own thread; Push blocks when the queue is
// full so a slow disk slows the model down instead of filling memory.
class PartWriter {
 public:
  PartWriter(std::string path, bool parquet, std::vector<std::string> output_names,
             std::vector<std::vector<int64_t>> output_shapes, std::vector<std::string> reserved_names)
      : path_(std::move(path)), parquet_(parquet), output_names_(std::move(output_names)),
        output_shapes_(std::move(output_shapes)), reserved_names_(std::move(reserved_names)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~PartWriter() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void Push(OutputChunk chunk) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return queue_.size() < 4 || error_; });
    if (error_) std::rethrow_exception(error_);
    queue_.push_back(std::move(chunk));
    changed_.notify_all();
  }
  // Writes what is queued, closes the file; rethrows a writer error.
  void Finish() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    changed_.notify_all();
    thread_.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void Run() {
    try {
      Open();
      while (true) {
        OutputChunk chunk;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock, [&] { return !queue_.empty() || closing_; });
          if (queue_.empty()) break;
          chunk = std::move(queue_.front());
          queue_.pop_front();
        }
        changed_.notify_all();
        Write(chunk);
      }
      Close();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
    }
  }

  void Open() {
    if (parquet_) {
      std::vector<ParquetFieldSpec> fields;
      for (size_t i = 0; i < output_names_.size(); ++i) {
        const int depth = static_cast<int>(output_shapes_[i].size());
        fields.push_back(depth == 0 ? ParquetFieldSpec::Plain(output_names_[i], ParquetType::kFloat, false)
                                    : ParquetFieldSpec::List(output_names_[i], ParquetType::kFloat, depth));
      }
      for (const auto& name : reserved_names_) {
        fields.push_back(ParquetFieldSpec::Plain(name, ParquetType::kString));
      }
      parquet_writer_ = std::make_unique<ParquetFileWriter>(path_, fields);
      return;
    }
    csv_ = std::fopen(path_.c_str(), "wb");
    if (!csv_) Fail("cannot write '", path_, "': ", std::strerror(errno));
    std::string header;
    for (const auto& name : output_names_) header += (header.empty() ? "" : ",") + CsvField(name);
    for (const auto& name : reserved_names_) header += (header.empty() ? "" : ",") + CsvField(name);
    header += "\n";
    WriteCsv(header);
  }

  static void AppendFloat(float value, std::string* out) {
    char buffer[32];
    const int n = std::snprintf(buffer, sizeof(buffer), "%.9g", value);
    out->append(buffer, n);
  }

  void WriteCsv(const std::string& text) {
    if (std::fwrite(text.data(), 1, text.size(), csv_) != text.size()) {
      Fail("cannot write '", path_, "': ", std::strerror(errno));
    }
  }

  void Write(const OutputChunk& chunk) {
    std::vector<at::Tensor> outputs;
    for (const auto& t : chunk.outputs) outputs.push_back(t.contiguous());
    if (parquet_) {
      std::vector<ParquetColumn> columns(output_names_.size() + reserved_names_.size());
      for (size_t i = 0; i < outputs.size(); ++i) {
        ParquetColumn& column = columns[i];
        column.name = output_names_[i];
        column.values.name = output_names_[i];
        column.values.type = ColumnType::kDouble;
        const float* values = outputs[i].data_ptr<float>();
        const int64_t count = outputs[i].numel();
        column.values.doubles.assign(values, values + count);
        column.values.valid.assign(count, 1);
        // [rows, D] -> LIST<FLOAT>; [rows, K, D] -> LIST<LIST<FLOAT>> (K lists of D per row).
        int64_t lists = chunk.rows;
        for (int64_t dim : output_shapes_[i]) {
          ParquetListLevel level;
          for (int64_t l = 0; l < lists; ++l) level.Append(true, static_cast<uint32_t>(dim));
          column.lists.push_back(std::move(level));
          lists *= dim;
        }
      }
      for (size_t j = 0; j < reserved_names_.size(); ++j) {
        ParquetColumn& column = columns[outputs.size() + j];
        column.name = reserved_names_[j];
        column.values.name = reserved_names_[j];
        column.values.type = ColumnType::kString;
        for (const auto& value : chunk.reserved[j]) column.values.AppendString(value, true);
      }
      parquet_writer_->Write(columns);
      return;
    }
    std::string text;
    for (int64_t r = 0; r < chunk.rows; ++r) {
      bool first = true;
      for (size_t i = 0; i < outputs.size(); ++i) {
        if (!first) text += ',';
        first = false;
        const float* values = outputs[i].data_ptr<float>();
        const std::vector<int64_t>& shape = output_shapes_[i];
        if (shape.empty()) {
          AppendFloat(values[r], &text);
          continue;
        }
        // "v,v,..." for [rows, D]; "v,v;v,v;..." (';' between the K lists) for [rows, K, D], as
        // hitrate reads multi-interest embeddings.
        const int64_t width = shape.back();
        const int64_t lists = shape.size() > 1 ? shape[0] : 1;
        std::string list;
        for (int64_t l = 0; l < lists; ++l) {
          if (l) list += ';';
          const float* row = values + (r * lists + l) * width;
          for (int64_t k = 0; k < width; ++k) {
            if (k) list += ',';
            AppendFloat(row[k], &list);
          }
        }
        text += CsvField(list);
      }
      for (const auto& column : chunk.reserved) {
        if (!first) text += ',';
        first = false;
        text += CsvField(column[r]);
      }
      text += '\n';
    }
    WriteCsv(text);
  }

  void Close() {
    if (parquet_) {
      parquet_writer_->Close();
      return;
    }
    const bool ok = std::fflush(csv_) == 0 && fsync(fileno(csv_)) == 0;
    const int error = errno;
    std::fclose(csv_);
    csv_ = nullptr;
    if (!ok) Fail("cannot write '", path_, "': ", std::strerror(error));
  }

  std::string path_;
  bool parquet_;
  std::vector<std::string> output_names_;
  std::vector<std::vector<int64_t>> output_shapes_;  // dims after the row, at most 2
  std::vector<std::string> reserved_names_;
  std::unique_ptr<ParquetFileWriter> parquet_writer_;
  std::FILE* csv_ = nullptr;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<OutputChunk> queue_;
  bool closing_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

// A float as numpy's str() writes a float32: the shortest text that reads back the same,
// with ".0" on whole numbers.
void AppendFloat(float value, std::string* out) {
  if (std::isnan(value)) {
    *out += "nan";
    return;
  }
  if (std::isinf(value)) {
    *out += value > 0 ? "inf" : "-inf";
    return;
  }
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  const std::string_view text(buffer, static_cast<size_t>(result.ptr - buffer));
  *out += text;
  if (text.find_first_of(".e") == std::string_view::npos) *out += ".0";
}

}  // namespace

std::vector<std::string> FeatureDump(const Batch& batch, const std::vector<const Feature*>& features) {
  std::vector<std::string> rows(static_cast<size_t>(batch.size));
  auto start_item = [&](size_t row, const Feature* feature) {
    if (!rows[row].empty()) rows[row] += " | ";
    rows[row] += feature->name() + ":";
  };
  for (const Feature* feature : features) {
    if (feature->data_group() != kBaseDataGroup) continue;
    const DataGroupBatch& group = batch.base();
    if (feature->is_sparse() && !feature->is_sequence()) {
      const JaggedIds& ids = batch.Sparse(feature->name());
      const int64_t* values = ids.values.data_ptr<int64_t>();
      const int32_t* lengths = ids.lengths.data_ptr<int32_t>();
      const float* weights = ids.weights.defined() ? ids.weights.data_ptr<float>() : nullptr;
      int64_t at = 0;
      for (size_t r = 0; r < rows.size(); ++r) {
        start_item(r, feature);
        std::vector<std::string> items;
        for (int32_t i = 0; i < lengths[r]; ++i, ++at) {
          std::string item = std::to_string(values[at]);
          if (weights) {
            item += ":";
            AppendFloat(weights[at], &item);
          }
          items.push_back(std::move(item));
        }
        if (weights) std::sort(items.begin(), items.end());  // TorchEasyRec sorts the text items
        rows[r] += Join(items, ",");
      }
    } else if (feature->is_sparse()) {
      const SequenceIds& ids = batch.Sequence(feature->name());
      const int64_t* values = ids.values.data_ptr<int64_t>();
      const int32_t* steps = ids.step_lengths.data_ptr<int32_t>();
      const int32_t* keys = ids.key_lengths.data_ptr<int32_t>();
      int64_t step = 0, at = 0;
      for (size_t r = 0; r < rows.size(); ++r) {
        start_item(r, feature);
        for (int32_t s = 0; s < steps[r]; ++s, ++step) {
          if (s) rows[r] += feature->sequence_delim();
          for (int32_t k = 0; k < keys[step]; ++k, ++at) rows[r] += (k ? "," : "") + std::to_string(values[at]);
        }
      }
    } else {
      const bool sequence = feature->is_sequence();
      const at::Tensor values = (sequence ? batch.DenseSeq(feature->name()).values : batch.Dense(feature->name())).contiguous();
      const float* v = values.data_ptr<float>();
      const int64_t dim = values.size(1);
      const int32_t* steps = sequence ? group.dense_sequences.at(feature->name()).step_lengths.data_ptr<int32_t>() : nullptr;
      int64_t step = 0;
      for (size_t r = 0; r < rows.size(); ++r) {
        start_item(r, feature);
        const int32_t count = sequence ? steps[r] : 1;
        for (int32_t s = 0; s < count; ++s, ++step) {
          if (s) rows[r] += feature->sequence_delim();
          for (int64_t d = 0; d < dim; ++d) {
            if (d) rows[r] += ",";
            AppendFloat(v[step * dim + d], &rows[r]);
          }
        }
      }
    }
  }
  return rows;
}

int64_t Predict(const PredictOptions& options) {
  if (options.predict_input_path.empty()) Fail("--predict_input_path is required");
  if (options.predict_output_path.empty()) Fail("--predict_output_path is required");
  if (options.scripted_model_path.empty() && options.pipeline_config_path.empty()) {
    Fail("one of --scripted_model_path (an export directory) or --pipeline_config_path is required");
  }
  if (options.debug_level < 0) Fail("--debug_level must not be negative");
  if (options.batch_size < 0 || options.predict_steps < 0 || options.predict_threads < 0) {
    Fail("--batch_size, --predict_steps and --predict_threads must not be negative");
  }
  const auto adjust = ScoringConfigEdits(options.edit_config_json, options.batch_size, options.dataset_type);
  std::unique_ptr<DistContext> dist = DistContext::FromEnvironment();
  std::unique_ptr<Pipeline> pipeline;
  if (!options.scripted_model_path.empty()) {
    pipeline = LoadExportedPipeline(options.scripted_model_path, PipelineMode::kPredict, adjust);
  } else {
    protos::EasyRecConfig config = LoadPipelineConfig(options.pipeline_config_path);
    adjust(&config);
    CheckConfigSupported(config);
    const std::string source =
        options.checkpoint_path.empty() ? config.model_dir() : options.checkpoint_path;
    auto checkpoint = LatestCheckpoint(source);
    if (!checkpoint) Fail("no checkpoint found at '", source, "'");
    pipeline = BuildFeatures(config, PipelineMode::kPredict);
    BuildModel(pipeline.get(), nullptr);
    if (pipeline->model->is_match_model()) {
      Fail("model_config: a retrieval model predicts tower by tower: export it (tzrec export) and ",
           "pass --scripted_model_path=<export_dir>/user or <export_dir>/item");
    }
    RestoreOptions restore;
    restore.restore_optimizer = false;
    restore.restore_rng = false;
    restore.require_all = true;
    // As an export of this checkpoint would: the averaged weights when the config says so.
    restore.use_dense_ema = UseDenseEma(pipeline->config.export_config(), pipeline->config.train_config());
    RestoreCheckpoint(checkpoint->path, TrainingState{pipeline->model.get(), nullptr, nullptr},
                      restore);
  }
  const protos::DataConfig& data = pipeline->config.data_config();
  const bool parquet = WritesParquet(options.writer_type, data);

  std::vector<std::string> reserved = CommaList(options.reserved_columns);
  if (reserved.size() == 1 && reserved[0] == kAllColumns) {
    reserved = AllInputColumns(data, options.predict_input_path);
  }
  Model& model = *pipeline->model;
  model.eval();
  // Output names and shapes, before any data is read.
  const std::map<std::string, std::vector<int64_t>> known_outputs = model.OutputShapes();
  std::vector<std::string> outputs = CommaList(options.output_columns);
  if (outputs.empty()) {
    for (const auto& kv : known_outputs) outputs.push_back(kv.first);  // std::map: sorted
  }
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& name : outputs) {
    auto it = known_outputs.find(name);
    if (it == known_outputs.end()) {
      std::string known;
      for (const auto& kv : known_outputs) known += (known.empty() ? "" : ", ") + kv.first;
      Fail("--output_columns: the model has no output '", name, "' (it has ", known, ")");
    }
    if (it->second.size() > 2) Fail("output '", name, "' has ", it->second.size() + 1, " dims; predict writes at most 3");
    shapes.push_back(it->second);
  }
  for (const auto& name : reserved) {
    if (std::find(outputs.begin(), outputs.end(), name) != outputs.end()) {
      Fail("--reserved_columns: '", name, "' is also a model output column");
    }
    if (options.debug_level > 0 && name == kFeatureDumpColumn) {
      Fail("--reserved_columns: '", name, "' is the column --debug_level adds");
    }
  }
  std::vector<std::string> written_reserved = reserved;
  if (options.debug_level > 0) written_reserved.push_back(kFeatureDumpColumn);
  const std::vector<const Feature*> features = pipeline->FeaturePointers();

  const int rank = dist->rank();
  OutputPart part(options.predict_output_path, rank, parquet ? "parquet" : "csv", "predict");
  std::unique_ptr<Dataset> dataset = pipeline->MakeDataset(
      options.predict_input_path, DatasetMode::kPredict, DataSeed(), dist.get(), reserved);
  const std::string staged_path = part.Stage();

  const int previous_threads = at::get_num_threads();
  if (options.predict_threads > 0) at::set_num_threads(options.predict_threads);
  int64_t rows_written = 0;
  std::exception_ptr failure;
  const auto start = std::chrono::steady_clock::now();
  try {
    PartWriter writer(staged_path, parquet, outputs, shapes, written_reserved);
    c10::NoGradGuard no_grad;
    ScopedGemmPrecision precision(model.gemm_precision());
    BatchStream stream(*dataset, 0);
    Batch batch;
    int64_t steps = 0;
    constexpr int64_t kLogEvery = 100;  // batches
    while ((options.predict_steps == 0 || steps < options.predict_steps) && stream.Next(&batch)) {
      Predictions predictions = model.Predict(batch);
      OutputChunk chunk;
      chunk.rows = batch.size;
      for (const auto& name : outputs) chunk.outputs.push_back(predictions.at(name).detach().to(at::kFloat));
      for (const auto& name : reserved) {
        auto it = batch.reserved.find(name);
        if (it == batch.reserved.end()) Fail("reserved column '", name, "' is not in the input");
        chunk.reserved.push_back(std::move(it->second));
      }
      if (options.debug_level > 0) chunk.reserved.push_back(FeatureDump(batch, features));
      rows_written += chunk.rows;
      writer.Push(std::move(chunk));
      if (++steps % kLogEvery == 0) LOG_INFO << "Predict: " << steps << " batches, " << rows_written << " rows";
    }
    writer.Finish();
  } catch (...) {
    failure = std::current_exception();
  }
  at::set_num_threads(previous_threads);
  part.Commit(failure, dist->comm(), "predict");  // visible only when every rank succeeded
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LOG_INFO << "Predict: wrote " << rows_written << " rows to " << part.final_path() << " in "
           << seconds << " s (" << static_cast<int64_t>(rows_written / std::max(seconds, 1e-9))
           << " rows/s)";
  return rows_written;
}

int PredictMain(const std::vector<std::string>& args) {
  Flags flags("predict",
              "Scores input rows with an export directory (--scripted_model_path) or a "
              "checkpoint (--pipeline_config_path [+ --checkpoint_path]) and writes "
              "part-<rank>.<csv|parquet> with the outputs and reserved columns.",
              {{"scripted_model_path", "export directory (tzrec export)"},
               {"pipeline_config_path", "pipeline config, to predict from a checkpoint"},
               {"checkpoint_path", "checkpoint directory (default: latest in model_dir)"},
               {"predict_input_path", "input files (comma-separated globs)"},
               {"predict_output_path", "output directory"},
               {"reserved_columns", "input columns copied to the output (comma-separated, or "
                                    "ALL_COLUMNS)"},
               {"output_columns", "model outputs to write (comma-separated; default all, sorted)"},
               {"batch_size", "rows per batch (default: data_config.batch_size)", false, "0"},
               {"predict_threads", "intra-op threads of the forward (default: all cores)", false, "0"},
               {"dataset_type", "CsvDataset or ParquetDataset (default: the config's)"},
               {"writer_type", "CsvWriter or ParquetWriter (default: from the dataset type)"},
               {"predict_steps", "stop after this many batches (0: all)", false, "0"},
               {"edit_config_json", "JSON object of config path -> value overrides"},
               {"debug_level", "> 0 adds a last column __features__ with each row's generated features",
                false, "0"}});
  if (!flags.Parse(args)) return 0;
  PredictOptions options;
  options.scripted_model_path = flags.Get("scripted_model_path");
  options.pipeline_config_path = flags.Get("pipeline_config_path");
  options.checkpoint_path = flags.Get("checkpoint_path");
  options.predict_input_path = flags.Get("predict_input_path");
  options.predict_output_path = flags.Get("predict_output_path");
  options.reserved_columns = flags.Get("reserved_columns");
  options.output_columns = flags.Get("output_columns");
  options.batch_size = flags.GetInt("batch_size");
  options.predict_threads = static_cast<int>(flags.GetInt("predict_threads"));
  options.dataset_type = flags.Get("dataset_type");
  options.writer_type = flags.Get("writer_type");
  options.predict_steps = flags.GetInt("predict_steps");
  options.edit_config_json = flags.Get("edit_config_json");
  options.debug_level = static_cast<int>(flags.GetInt("debug_level"));
  Predict(options);
  return 0;
}

}  // namespace tzrec
