#include "tzrec/input/dataset.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <set>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/kafka_source.h"
#include "tzrec/input/dataset_reader.h"

namespace tzrec {
namespace {

// Parses a label or sample-weight column as floats; nulls, non-numbers and non-finite values
// are errors (one NaN would otherwise poison every weight), as are labels outside `range`.
void ParseFloatColumn(const RecordBatch& records, const std::string& name, const char* what,
                      const LabelRange* range, std::vector<float>* out) {
  const Column* column = records.Find(name);
  if (!column) Fail(records.source, ": ", what, " column '", name, "' is missing");
  for (size_t row = 0; row < column->size(); ++row) {
    if (column->IsNull(row) ||
        (column->type == ColumnType::kString && column->StringAt(row).empty())) {
      Fail(records.RowLocation(row), ": ", what, " '", name, "' is null");
    }
    float value = 0;
    switch (column->type) {
      case ColumnType::kInt64: value = static_cast<float>(column->ints[row]); break;
      case ColumnType::kDouble: value = static_cast<float>(column->doubles[row]); break;
      case ColumnType::kString:
        if (!ParseFloat(column->StringAt(row), &value)) {
          Fail(records.RowLocation(row), ": ", what, " '", name, "': '",
               Printable(column->StringAt(row)), "' is not a number");
        }
    }
    if (!std::isfinite(value)) {
      Fail(records.RowLocation(row), ": ", what, " '", name, "' is ", value,
           " (labels and weights must be finite)");
    }
    if (range && (value < range->min || value > range->max ||
                  (range->integral && value != std::floor(value)))) {
      Fail(records.RowLocation(row), ": label '", name, "' is ", value, ", but ",
           range->required_by, " needs ", range->integral ? "an integer in [" : "a value in [",
           range->min, ", ", range->max, "]");
    }
    out->push_back(value);
  }
}

// Row of the `index`-th value of a jagged feature (`lengths` per row; for sequences steps per
// row and `key_lengths` values per step).
size_t RowOfValue(const std::vector<int32_t>& lengths, const std::vector<int32_t>* key_lengths,
                  size_t index) {
  size_t end = 0, step = 0;
  for (size_t row = 0; row < lengths.size(); ++row) {
    if (key_lengths) {
      for (int32_t s = 0; s < lengths[row] && step < key_lengths->size(); ++s) end += (*key_lengths)[step++];
    } else {
      end += lengths[row];
    }
    if (index < end) return row;
  }
  return lengths.empty() ? 0 : lengths.size() - 1;
}

[[noreturn]] void FailNonFinite(const RecordBatch& records, size_t row, const std::string& feature,
                                float value, const char* what) {
  const std::string location =
      row < records.line_numbers.size() ? records.RowLocation(row) : records.source;
  Fail(location, ": feature '", feature, "' has ", what, " ", value,
       " (non-finite values would poison the weights; fix the data or the feature's expression)");
}

// Dense values and id weights must be finite: TorchEasyRec's readers pass NaN on silently.
void CheckFinite(const ParsedBatch& parsed, const RecordBatch& records) {
  for (const auto& [name, dense] : parsed.dense) {
    for (size_t i = 0; i < dense.values.size(); ++i) {
      if (std::isfinite(dense.values[i])) continue;
      const size_t dim = std::max<int32_t>(1, dense.dim);
      const size_t row = dense.sequence ? RowOfValue(dense.lengths, nullptr, i / dim) : i / dim;
      FailNonFinite(records, row, name, dense.values[i], "value");
    }
  }
  for (const auto& [name, sparse] : parsed.sparse) {
    for (size_t i = 0; i < sparse.weights.size(); ++i) {
      if (std::isfinite(sparse.weights[i])) continue;
      const size_t row = RowOfValue(sparse.lengths, sparse.sequence ? &sparse.key_lengths : nullptr, i);
      FailNonFinite(records, row, name, sparse.weights[i], "id weight");
    }
  }
}

}  // namespace

Dataset::Dataset(const protos::DataConfig& data_config, std::vector<const Feature*> features,
                 const std::string& input_path, DatasetMode mode, uint64_t seed,
                 std::shared_ptr<const fg::FeatureGenerator> generator, int rank, int world_size,
                 std::vector<std::string> reserved_columns)
    : features_(std::move(features)), generator_(std::move(generator)) {
  options_.rank = rank;
  options_.world_size = world_size;
  options_.mode = mode;
  std::string type_name = protos::DatasetType_Name(data_config.dataset_type());
  const bool stream = data_config.dataset_type() == protos::KafkaDataset && IsKafkaUri(input_path);
  if (data_config.dataset_type() == protos::KafkaDataset && !stream) {
    // Online training evaluates on files: a file path under a KafkaDataset config is read by
    // the file reader its names call for.
    type_name = input_path.find(".csv") != std::string::npos ? "CsvDataset" : "ParquetDataset";
    LOG_INFO << "input path '" << input_path << "' is not a kafka:// URI: read as " << type_name;
  }
  if (!DatasetReaderRegistry().Has(type_name)) {
    Fail("data_config.dataset_type: ", type_name, " not supported yet (supported: ",
         DatasetReaderRegistry().JoinNames(), ")");
  }
  // MaxCompute read settings: TorchEasyRec ignores them for other datasets as well.
  for (const char* field : {"odps_data_quota_name", "odps_data_compression", "is_orderby_partition"}) {
    const auto* fd = data_config.GetDescriptor()->FindFieldByName(field);
    if (fd && data_config.GetReflection()->HasField(data_config, fd)) {
      LOG_INFO << "data_config." << field << " has no effect on " << type_name
               << " (it configures MaxCompute reads)";
    }
  }
  // Fields only another dataset type reads (e.g. a CSV `delimiter` left in a config switched to
  // Parquet) are accepted by the config check; say that they do nothing here.
  const std::vector<std::string>& mine = DatasetReaderRegistry().Fields(type_name);
  for (const std::string& other : DatasetReaderRegistry().Names()) {
    if (other == type_name) continue;
    for (const std::string& pattern : DatasetReaderRegistry().Fields(other)) {
      if (std::find(mine.begin(), mine.end(), pattern) != mine.end()) continue;
      const std::string field = pattern.substr(0, pattern.find('.'));
      const auto* fd = data_config.GetDescriptor()->FindFieldByName(field);
      if (!fd) continue;
      const bool set = fd->is_repeated() ? data_config.GetReflection()->FieldSize(data_config, fd) > 0
                                         : data_config.GetReflection()->HasField(data_config, fd);
      if (set) LOG_INFO << "data_config." << field << " has no effect on " << type_name << " (" << other << " reads it)";
    }
  }
  TZREC_CHECK((data_config.fg_mode() != protos::FG_NONE) == (generator_ != nullptr),
              "a feature generator is needed exactly when fg_mode is not FG_NONE");
  options_.input_path = input_path;
  options_.list_separator = data_config.fg_encoded_multival_sep();
  // A stream (kafka://...) has no files.
  if (!stream) options_.files = ExpandInputPaths(input_path);
  if (options_.files.empty() && !stream) {
    Fail("input path '", input_path, "' has no data files (a directory is read for the regular ",
         "files in it; hidden files and _-prefixed markers such as _SUCCESS are skipped)");
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
  if (mode != DatasetMode::kPredict) {
    options_.label_fields.assign(data_config.label_fields().begin(), data_config.label_fields().end());
    options_.sample_weight_fields.assign(data_config.sample_weight_fields().begin(),
                                         data_config.sample_weight_fields().end());
  }
  options_.reserved_columns = std::move(reserved_columns);
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
  for (const auto& name : options_.reserved_columns) want(name);
  force_base_data_group_ = data_config.force_base_data_group();
  if (mode != DatasetMode::kPredict) sampler_ = CreateSampler(data_config, mode == DatasetMode::kEval);
  if (sampler_) {
    std::vector<std::string> ignored;
    for (const auto& attr : sampler_->attr_fields()) {
      if (!wanted.count(attr)) ignored.push_back(attr);
    }
    if (!ignored.empty()) {
      LOG_WARNING << "negative sampler attr_fields " << Join(ignored, ", ")
                  << " are read by no feature and are ignored";
    }
    bool any_negative = false;
    for (const Feature* feature : features_) any_negative = any_negative || feature->negative();
    if (!any_negative) {
      Fail("data_config: the negative sampler's attr_fields (", Join(sampler_->attr_fields(), ", "),
           ") are inputs of no feature, so sampled items would have no features");
    }
    want(sampler_->item_id_field());
    if (!sampler_->user_id_field().empty()) want(sampler_->user_id_field());
  }
  if (mode != DatasetMode::kPredict && data_config.has_tdm_sampler()) {
    const std::string where = "data_config.tdm_sampler";
    auto sampler = std::make_shared<const TdmSampler>(data_config.tdm_sampler(), where);
    want(sampler->item_id_field());
    tdm_pairs_ = std::make_shared<const TdmPairs>(std::move(sampler), features_, generator_, options_.columns, where);
  }
  reader_ = DatasetReaderRegistry().Get(type_name)(data_config, &options_);
}

Dataset::~Dataset() = default;

void Dataset::RequireLabelRange(const std::string& label, const LabelRange& range) {
  if (std::find(options_.label_fields.begin(), options_.label_fields.end(), label) ==
      options_.label_fields.end()) {
    return;  // predict reads no labels
  }
  auto [it, inserted] = options_.label_ranges.emplace(label, range);
  if (inserted) return;
  LabelRange& merged = it->second;
  merged.min = std::max(merged.min, range.min);
  merged.max = std::min(merged.max, range.max);
  merged.integral = merged.integral || range.integral;
  merged.required_by += " and " + range.required_by;
}

std::unique_ptr<ParsedBatchStream> Dataset::Open(int64_t epoch, const DataloaderState* resume) const {
  return std::make_unique<ParsedBatchStream>(this, reader_->Open(epoch, resume), epoch, resume);
}

ParsedBatch ParseFeatureRows(const std::vector<const Feature*>& features,
                             const fg::FeatureGenerator* generator, const RecordBatch& records) {
  ParsedBatch parsed;
  parsed.size = static_cast<int64_t>(records.num_rows());
  if (generator) {
    generator->Generate(records, &parsed);
  } else {
    for (const Feature* feature : features) feature->ParseEncoded(records, &parsed);
  }
  CheckFinite(parsed, records);
  return parsed;
}

ParsedBatch Dataset::ParseRecords(const RecordBatch& records) const {
  ParsedBatch parsed = ParseFeatureRows(features_, generator_.get(), records);
  for (const auto& name : options_.label_fields) {
    auto range = options_.label_ranges.find(name);
    ParseFloatColumn(records, name, "label",
                     range == options_.label_ranges.end() ? nullptr : &range->second,
                     &parsed.labels[name]);
  }
  for (const auto& name : options_.sample_weight_fields) {
    ParseFloatColumn(records, name, "sample weight", nullptr, &parsed.sample_weights[name]);
  }
  if (sampler_) {
    for (const std::string* field : {&sampler_->item_id_field(), &sampler_->user_id_field()}) {
      if (field->empty()) continue;
      const Column* column = records.Find(*field);
      if (!column) Fail(records.source, ": the negative sampler's id column '", *field, "' is missing");
      std::vector<int64_t>& ids = parsed.id_columns[*field];
      const std::string what = "'" + *field + "' (the negative sampler's id column)";
      for (size_t row = 0; row < column->size(); ++row) ids.push_back(IdAt(records, *column, row, what));
    }
  }
  if (tdm_pairs_) {
    const std::string& field = tdm_pairs_->sampler().item_id_field();
    const Column* column = records.Find(field);
    if (!column) Fail(records.source, ": the tdm_sampler's item id column '", field, "' is missing");
    std::vector<int64_t>& ids = parsed.id_columns[field];
    const std::string what = "'" + field + "' (the tdm_sampler's item id column)";
    for (size_t row = 0; row < column->size(); ++row) ids.push_back(IdAt(records, *column, row, what));
  }
  for (const auto& name : options_.reserved_columns) {
    const Column* column = records.Find(name);
    if (!column) Fail(records.source, ": reserved column '", name, "' is missing");
    std::vector<std::string>& out = parsed.reserved[name];
    for (size_t row = 0; row < column->size(); ++row) {
      out.push_back(column->IsNull(row) ? std::string() : column->TextAt(row));
    }
  }
  return parsed;
}

void Dataset::ExpandTdmRows(ParsedBatch* batch, std::mt19937_64& rng) const {
  const TdmSampler& sampler = tdm_pairs_->sampler();
  const std::vector<int64_t> ids = std::move(batch->id_columns[sampler.item_id_field()]);
  batch->id_columns.clear();
  const TdmSample sample = sampler.Sample(ids, rng);
  std::vector<uint32_t> nodes = sample.positives;
  nodes.insert(nodes.end(), sample.negatives.begin(), sample.negatives.end());
  const int64_t rows = batch->size;
  std::vector<int64_t> repeat;
  repeat.reserve(nodes.size());
  for (int64_t r = 0; r < rows; ++r) repeat.insert(repeat.end(), sample.positives_per_row, r);
  for (int64_t r = 0; r < rows; ++r) repeat.insert(repeat.end(), sample.negatives_per_row, r);
  ParsedBatch expanded = tdm_pairs_->Pair(*batch, repeat, tdm_pairs_->NodeFeatures(nodes));
  const size_t positives = sample.positives.size();
  for (auto& [name, labels] : expanded.labels) {
    std::fill(labels.begin(), labels.begin() + positives, 1.0f);
    std::fill(labels.begin() + positives, labels.end(), 0.0f);
  }
  std::call_once(*first_sample_logged_, [&] {
    LOG_INFO << "tdm sampler: first batch of " << rows << " rows: " << sample.positives_per_row
             << " ancestors and " << sample.negatives_per_row << " negatives per row";
  });
  batch->Append(expanded);
}

void Dataset::AddSampledRows(ParsedBatch* batch, std::mt19937_64& rng) const {
  if (tdm_pairs_) {
    ExpandTdmRows(batch, rng);
    return;
  }
  if (!sampler_) {
    // Predict (or a config without sampler): item features keep their data group, with the
    // batch's rows only, so a retrieval model's item tower finds them where it looks.
    if (force_base_data_group_) return;
    for (const Feature* feature : features_) {
      if (feature->data_group() != kNegDataGroup) continue;
      batch->sampled_group = kNegDataGroup;
      batch->sampled_features.push_back(feature->name());
    }
    return;
  }
  SamplerInput input;
  input.item_ids = std::move(batch->id_columns[sampler_->item_id_field()]);
  if (!sampler_->user_id_field().empty()) {
    input.user_ids = std::move(batch->id_columns[sampler_->user_id_field()]);
  }
  batch->id_columns.clear();
  const SampledItems sampled = sampler_->Sample(input, rng);
  RecordBatch records = sampler_->AttrRows(sampled, options_.columns);
  const size_t n = sampled.items.size();
  // Inputs the sampler does not give (user-side columns) are missing in the sampled rows.
  std::vector<const Feature*> negative;
  for (const Feature* feature : features_) {
    if (feature->negative()) negative.push_back(feature);
  }
  const std::vector<std::string> inputs =
      generator_ ? generator_->input_columns() : std::vector<std::string>{};
  for (const std::string& name : inputs) {
    if (records.Find(name)) continue;
    Column column;
    column.name = name;
    for (size_t i = 0; i < n; ++i) column.AppendString({}, false);
    records.columns.push_back(std::move(column));
  }
  ParsedBatch sampled_features = ParseFeatureRows(negative, generator_.get(), records);
  for (const Feature* feature : features_) {
    const std::string& name = feature->name();
    if (feature->negative()) {
      if (feature->is_sparse()) {
        batch->sparse[name].Append(sampled_features.sparse.at(name));
      } else {
        batch->dense[name].Append(sampled_features.dense.at(name));
      }
    } else if (force_base_data_group_) {
      // TorchEasyRec pads the shorter columns of the one data group with empty rows.
      if (feature->is_sparse()) {
        SparseValues& values = batch->sparse[name];
        values.lengths.insert(values.lengths.end(), n, 0);
      } else {
        DenseValues& values = batch->dense[name];
        if (values.sequence) {
          values.lengths.insert(values.lengths.end(), n, 0);
        } else {
          values.values.insert(values.values.end(), n * std::max<int32_t>(1, values.dim), 0.0f);
        }
      }
    } else {
      continue;
    }
    batch->sampled_features.push_back(name);
  }
  std::call_once(*first_sample_logged_, [&] {
    LOG_INFO << "negative sampler: first batch of " << batch->size << " rows: " << sampled.num_negatives
             << " negatives, " << sampled.hard_neg_indices.size() / 2 << " hard negatives";
  });
  batch->sampled_rows = static_cast<int64_t>(n);
  batch->sampled_group = force_base_data_group_ ? "__BASE__" : kNegDataGroup;
  batch->hard_neg_indices = sampled.hard_neg_indices;
}

ParsedBatchStream::ParsedBatchStream(const Dataset* dataset,
                                     std::vector<std::unique_ptr<RowSource>> sources, int64_t epoch,
                                     const DataloaderState* resume)
    : dataset_(dataset), epoch_(epoch) {
  const int workers = static_cast<int>(sources.size());
  queues_.resize(workers);
  if (resume && resume->readers() == workers && resume->next_reader() >= 0) {
    next_worker_ = static_cast<size_t>(resume->next_reader()) % workers;
  }
  sources_ = std::move(sources);
  for (int w = 0; w < workers; ++w) {
    threads_.emplace_back(&ParsedBatchStream::RunWorker, this, w, sources_[w].get());
  }
}

ParsedBatchStream::~ParsedBatchStream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  has_room_.notify_all();
  for (auto& source : sources_) source->Cancel();
  for (auto& thread : threads_) thread.join();
}

void ParsedBatchStream::Push(int worker, ParsedBatch batch) {
  std::unique_lock<std::mutex> lock(mutex_);
  has_room_.wait(lock, [&] {
    return stop_ || queues_[worker].batches.size() < dataset_->options().prefetch_batches;
  });
  if (stop_) return;
  queues_[worker].batches.push_back(std::move(batch));
  ready_.notify_all();
}

void ParsedBatchStream::RunWorker(int worker, RowSource* source) {
  const DatasetOptions& options = dataset_->options();
  if (options.background_priority) {
    // Readers only use CPU the compute threads leave idle: preempting one of LibTorch's OpenMP
    // threads stalls every thread of a parallel GEMM at its next barrier.
    sched_param param{};
    sched_setscheduler(0, SCHED_IDLE, &param);
  }
  std::mt19937_64 rng(options.seed * 7919ULL + static_cast<uint64_t>(epoch_) * 104729ULL +
                      static_cast<uint64_t>(worker));
  // Sampling has its own engine (with the rank), so the shuffle order does not depend on it.
  std::seed_seq sampler_seed{static_cast<uint64_t>(options.seed), static_cast<uint64_t>(options.rank),
                             static_cast<uint64_t>(worker), static_cast<uint64_t>(epoch_), uint64_t{0x5a}};
  std::mt19937_64 sampler_rng(sampler_seed);
  std::vector<ParsedBatch> shuffle_buffer;
  auto emit = [&](ParsedBatch batch) {
    dataset_->AddSampledRows(&batch, sampler_rng);
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
      if (pending.size == 0 && parsed.size == batch_size) {
        emit(std::move(parsed));  // a whole batch as read: no copy through `pending`
        continue;
      }
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

bool ParsedBatchStream::Next(ParsedBatch* out) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool in_order = dataset_->options().in_order;
  while (true) {
    if (error_) std::rethrow_exception(error_);
    if (interrupt_ && interrupt_->load()) return false;
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
    if (interrupt_) {
      ready_.wait_for(lock, std::chrono::milliseconds(100));
    } else {
      ready_.wait(lock);
    }
  }
}

}  // namespace tzrec
