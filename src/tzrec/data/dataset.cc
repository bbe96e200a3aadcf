#include "tzrec/data/dataset.h"

#include <sched.h>

#include <algorithm>
#include <random>
#include <set>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/parquet/parquet_reader.h"

namespace tzrec {
namespace {

ColumnType ColumnTypeForField(const std::string& field_name, const std::string& type_name,
                              const std::string& where) {
  std::string t = type_name;
  std::transform(t.begin(), t.end(), t.begin(), ::toupper);
  if (t == "INT32" || t == "INT64" || t == "INT" || t == "BIGINT") return ColumnType::kInt64;
  if (t == "FLOAT" || t == "DOUBLE") return ColumnType::kDouble;
  if (t == "STRING") return ColumnType::kString;
  Fail(where, ": input field '", field_name, "' of type ", type_name,
       " is not supported yet for CsvDataset");
}

// Parses a label or sample-weight column as floats; nulls and non-numbers are errors.
void ParseFloatColumn(const RecordBatch& records, const std::string& name, const char* what,
                      std::vector<float>* out) {
  const Column* column = records.Find(name);
  if (!column) Fail(records.source, ": ", what, " column '", name, "' is missing");
  for (size_t row = 0; row < column->size(); ++row) {
    if (column->IsNull(row) ||
        (column->type == ColumnType::kString && column->StringAt(row).empty())) {
      Fail(records.RowLocation(row), ": ", what, " '", name, "' is null");
    }
    switch (column->type) {
      case ColumnType::kInt64: out->push_back(static_cast<float>(column->ints[row])); break;
      case ColumnType::kDouble: out->push_back(static_cast<float>(column->doubles[row])); break;
      case ColumnType::kString: {
        float value;
        if (!ParseFloat(column->StringAt(row), &value)) {
          Fail(records.RowLocation(row), ": ", what, " '", name, "': '",
               Printable(column->StringAt(row)), "' is not a number");
        }
        out->push_back(value);
      }
    }
  }
}

}  // namespace

void ResolveCsvSchema(const protos::DataConfig& data_config, CsvOptions* options) {
  options->column_names.clear();
  options->column_types.clear();
  if (!data_config.input_fields_str().empty()) {
    // "name:TYPE;name:TYPE;" (wins over input_fields, as in TorchEasyRec).
    for (auto entry : SplitView(data_config.input_fields_str(), ";")) {
      std::string item;
      for (char c : entry) {
        if (c != ' ') item += c;
      }
      if (item.empty()) continue;
      size_t colon = item.find(':');
      if (colon == std::string::npos) {
        Fail("data_config.input_fields_str: '", item, "' is not name:TYPE");
      }
      std::string name = item.substr(0, colon);
      options->column_names.push_back(name);
      options->column_types[name] =
          ColumnTypeForField(name, item.substr(colon + 1), "data_config.input_fields_str");
    }
    return;
  }
  for (int i = 0; i < data_config.input_fields_size(); ++i) {
    const auto& field = data_config.input_fields(i);
    options->column_names.push_back(field.input_name());
    if (field.has_input_type()) {
      options->column_types[field.input_name()] = ColumnTypeForField(
          field.input_name(), protos::FieldType_Name(field.input_type()),
          StrCat("data_config.input_fields[", i, "]"));
    }
  }
}

Dataset::Dataset(const protos::DataConfig& data_config, std::vector<const Feature*> features,
                 const std::string& input_path, DatasetMode mode, uint64_t seed,
                 std::shared_ptr<const fg::FeatureGenerator> generator, int rank, int world_size)
    : features_(std::move(features)), generator_(std::move(generator)) {
  options_.rank = rank;
  options_.world_size = world_size;
  if (data_config.dataset_type() != protos::CsvDataset &&
      data_config.dataset_type() != protos::ParquetDataset) {
    Fail("data_config.dataset_type: ", protos::DatasetType_Name(data_config.dataset_type()),
         " not supported yet (supported: CsvDataset, ParquetDataset)");
  }
  TZREC_CHECK((data_config.fg_mode() != protos::FG_NONE) == (generator_ != nullptr),
              "a feature generator is needed exactly when fg_mode is not FG_NONE");
  options_.format = data_config.dataset_type() == protos::ParquetDataset ? DataFormat::kParquet
                                                                          : DataFormat::kCsv;
  options_.input_path = input_path;
  options_.list_separator = data_config.fg_encoded_multival_sep();
  options_.files = ExpandInputPaths(input_path);
  if (options_.files.empty()) Fail("input path '", input_path, "' has no files");
  if (options_.format == DataFormat::kCsv) {
    options_.csv.delimiter = ParseCsvDelimiter(data_config.delimiter());
    options_.csv.with_header = data_config.with_header();
    ResolveCsvSchema(data_config, &options_.csv);
  }
  options_.batch_size = mode == DatasetMode::kTrain || !data_config.has_eval_batch_size()
                            ? data_config.batch_size()
                            : data_config.eval_batch_size();
  if (options_.batch_size <= 0) Fail("data_config.batch_size must be > 0");
  options_.drop_remainder = data_config.drop_remainder();
  options_.shuffle = mode == DatasetMode::kTrain && data_config.shuffle();
  options_.shuffle_buffer_size = std::max<int>(1, data_config.shuffle_buffer_size());
  options_.num_workers = std::max<int>(1, data_config.num_workers());
  options_.in_order = data_config.in_order();
  options_.seed = seed;
  options_.label_fields.assign(data_config.label_fields().begin(),
                               data_config.label_fields().end());
  options_.sample_weight_fields.assign(data_config.sample_weight_fields().begin(),
                                       data_config.sample_weight_fields().end());
  if (options_.format == DataFormat::kCsv) {
    // Whole files are the unit of work, as in TorchEasyRec's CSV reader: file i goes to
    // global reader i % (world_size * num_workers).
    const size_t files = options_.files.size();
    if (files < static_cast<size_t>(world_size) && mode == DatasetMode::kTrain) {
      Fail("input path '", input_path, "' has ", files, " CSV files but the job has ", world_size,
           " ranks; CSV data is split by whole files, so it needs at least one file per rank");
    }
    // Evaluation may leave ranks without a file: their metrics simply add nothing.
    const size_t per_rank = std::max<size_t>(1, files / static_cast<size_t>(world_size));
    if (static_cast<size_t>(options_.num_workers) > per_rank) {
      LOG_INFO << "num_workers reduced from " << options_.num_workers << " to " << per_rank
               << " (one reader per file)";
      options_.num_workers = static_cast<int>(per_rank);
    }
  }
  std::set<std::string> wanted;
  auto want = [&](const std::string& name) {
    if (wanted.insert(name).second) options_.columns.push_back(name);
  };
  if (generator_) {
    for (const auto& column : generator_->input_columns()) want(column);
  } else {
    for (const Feature* feature : features_) want(feature->name());
  }
  for (const auto& name : options_.label_fields) want(name);
  for (const auto& name : options_.sample_weight_fields) want(name);
  options_.csv.wanted_columns = options_.columns;
  if (options_.format == DataFormat::kParquet) {
    // Footers only: row counts for the split, and every file checked for the needed columns
    // before any reader starts.
    ParquetReadOptions read_options;
    read_options.columns = options_.columns;
    for (const auto& file : options_.files) {
      options_.parquet_file_rows.push_back(ParquetFileReader(file, read_options).num_rows());
    }
  }
}

Dataset::Dataset(DatasetOptions options, std::vector<const Feature*> features)
    : options_(std::move(options)), features_(std::move(features)) {}

std::unique_ptr<BatchStream> Dataset::Open(int64_t epoch, const DataloaderState* resume) const {
  return std::make_unique<BatchStream>(this, epoch, resume);
}

ParsedBatch Dataset::ParseRecords(const RecordBatch& records) const {
  ParsedBatch parsed;
  parsed.size = static_cast<int64_t>(records.num_rows());
  if (generator_) {
    generator_->Generate(records, &parsed);
  } else {
    for (const Feature* feature : features_) feature->ParseEncoded(records, &parsed);
  }
  for (const auto& name : options_.label_fields) {
    ParseFloatColumn(records, name, "label", &parsed.labels[name]);
  }
  for (const auto& name : options_.sample_weight_fields) {
    ParseFloatColumn(records, name, "sample weight", &parsed.sample_weights[name]);
  }
  return parsed;
}

BatchStream::BatchStream(const Dataset* dataset, int64_t epoch, const DataloaderState* resume)
    : dataset_(dataset), epoch_(epoch) {
  const DatasetOptions& options = dataset_->options();
  const int workers = options.num_workers;
  std::vector<std::unique_ptr<RowSource>> sources;
  if (options.format == DataFormat::kCsv) {
    std::vector<std::string> files = options.files;
    if (options.shuffle) {
      std::mt19937_64 rng(options.seed * 1000003ULL + static_cast<uint64_t>(epoch_));
      std::shuffle(files.begin(), files.end(), rng);
    }
    const size_t readers = static_cast<size_t>(options.world_size) * workers;
    for (int w = 0; w < workers; ++w) {
      std::vector<std::string> mine;
      for (size_t i = static_cast<size_t>(options.rank) * workers + w; i < files.size(); i += readers) {
        mine.push_back(files[i]);
      }
      sources.push_back(MakeCsvRowSource(std::move(mine), options.csv, resume));
    }
  } else {
    ParquetInput input{options.input_path, options.files, options.parquet_file_rows,
                       options.columns, options.list_separator};
    int64_t total = 0;
    for (int64_t rows : options.parquet_file_rows) total += rows;
    const std::vector<RowInterval> remaining =
        RemainingIntervals(resume, options.input_path, total);
    const int64_t slices = static_cast<int64_t>(options.world_size) * workers;
    for (int w = 0; w < workers; ++w) {
      sources.push_back(MakeParquetRowSource(
          input, WorkerIntervals(remaining, static_cast<int64_t>(options.rank) * workers + w,
                                 slices, options.batch_size, options.drop_redundant_bs_eq_one)));
    }
  }
  queues_.resize(workers);
  if (resume && resume->readers() == workers && resume->next_reader() >= 0) {
    next_worker_ = static_cast<size_t>(resume->next_reader()) % workers;
  }
  for (int w = 0; w < workers; ++w) {
    threads_.emplace_back(&BatchStream::RunWorker, this, w, std::move(sources[w]));
  }
}

BatchStream::~BatchStream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  has_room_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void BatchStream::Push(int worker, ParsedBatch batch) {
  std::unique_lock<std::mutex> lock(mutex_);
  has_room_.wait(lock, [&] {
    return stop_ || queues_[worker].batches.size() < dataset_->options().prefetch_batches;
  });
  if (stop_) return;
  queues_[worker].batches.push_back(std::move(batch));
  ready_.notify_all();
}

void BatchStream::RunWorker(int worker, std::unique_ptr<RowSource> source) {
  const DatasetOptions& options = dataset_->options();
  if (options.background_priority) {
    // Readers only use CPU the compute threads leave idle: preempting one of LibTorch's OpenMP
    // threads stalls every thread of a parallel GEMM at its next barrier.
    sched_param param{};
    sched_setscheduler(0, SCHED_IDLE, &param);
  }
  std::mt19937_64 rng(options.seed * 7919ULL + static_cast<uint64_t>(epoch_) * 104729ULL +
                      static_cast<uint64_t>(worker));
  std::vector<ParsedBatch> shuffle_buffer;
  auto emit = [&](ParsedBatch batch) {
    if (!options.shuffle) {
      Push(worker, std::move(batch));
      return;
    }
    shuffle_buffer.push_back(std::move(batch));
    if (static_cast<int>(shuffle_buffer.size()) >= options.shuffle_buffer_size) {
      size_t pick = std::uniform_int_distribution<size_t>(0, shuffle_buffer.size() - 1)(rng);
      std::swap(shuffle_buffer[pick], shuffle_buffer.back());
      Push(worker, std::move(shuffle_buffer.back()));
      shuffle_buffer.pop_back();
    }
  };
  try {
    ParsedBatch pending;
    const int64_t batch_size = options.batch_size;
    RecordBatch records;
    RowPositions positions;
    while (source->Next(static_cast<size_t>(std::min<int64_t>(batch_size, 8192)), &records,
                        &positions)) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) return;
      }
      ParsedBatch parsed = dataset_->ParseRecords(records);
      parsed.positions = std::move(positions);
      pending.Append(parsed);
      if (pending.size >= batch_size) {
        int64_t full = pending.size / batch_size * batch_size;
        for (int64_t begin = 0; begin < full; begin += batch_size) {
          emit(pending.Slice(begin, begin + batch_size));
        }
        pending = pending.Slice(full, pending.size);
      }
    }
    if (pending.size > 0 && !options.drop_remainder) emit(std::move(pending));
    std::shuffle(shuffle_buffer.begin(), shuffle_buffer.end(), rng);
    for (auto& batch : shuffle_buffer) Push(worker, std::move(batch));
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  queues_[worker].done = true;
  ready_.notify_all();
}

bool BatchStream::Next(ParsedBatch* out) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool in_order = dataset_->options().in_order;
  while (true) {
    if (error_) std::rethrow_exception(error_);
    bool all_done = true;
    for (const auto& queue : queues_) all_done = all_done && queue.done && queue.batches.empty();
    if (all_done) return false;
    // In order: the next worker in rotation that still has data; otherwise any ready one.
    size_t n = queues_.size();
    for (size_t k = 0; k < n; ++k) {
      size_t w = (next_worker_ + k) % n;
      WorkerQueue& queue = queues_[w];
      if (queue.done && queue.batches.empty()) continue;
      if (queue.batches.empty()) {
        if (in_order) break;  // wait for this worker to produce its turn
        continue;
      }
      *out = std::move(queue.batches.front());
      queue.batches.pop_front();
      next_worker_ = (w + 1) % n;
      out->positions.next_reader = static_cast<int32_t>(next_worker_);
      out->positions.readers = static_cast<int32_t>(n);
      has_room_.notify_all();
      return true;
    }
    ready_.wait(lock);
  }
}

}  // namespace tzrec
