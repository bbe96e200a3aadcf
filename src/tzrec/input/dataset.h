// Dataset: input files -> parsed, batch-sized ParsedBatches, read by worker threads (no
// LibTorch). The input pipeline of training, evaluation and (later) predict.
//
// The dataset type (data_config.dataset_type) picks a DatasetReader from DatasetReaderRegistry
// (dataset_reader.h): CsvDataset sends whole files round-robin to the reader threads,
// ParquetDataset splits rows into contiguous ranges over world_size x num_workers readers.
// Each reader parses its rows (feature generation when fg_mode is not FG_NONE, else the
// FG-encoded columns), turns them into batches of exactly `batch_size` rows (its last partial
// batch is dropped iff drop_remainder), optionally shuffled through a buffer of
// `shuffle_buffer_size` batches (train only), into a bounded prefetch queue. With in_order
// the stream takes batches from readers round-robin, so a run is reproducible for a fixed seed
// and reader count. Every row carries its position; a stream opened with a DataloaderState
// reads only what the state has not consumed (exact resume).
//
// With a negative sampler (data_config's `sampler`; not in predict), each reader thread samples
// for every batch it emits, from the batch's item (and user) ids, and parses the sampled items'
// attributes into the "__NEG__" features after the batch's rows (sampler.h). Sampling is seeded
// per rank, reader and epoch, so a run is reproducible like its batch order.
//
// With a tdm_sampler (TDM; not in predict) every emitted batch of B rows grows as TorchEasyRec's
// expand_tdm_sample grows it: after the B rows come each row's tree ancestors (label 1), then
// each row's per-level negatives (label 0) (tdm_sampler.h), all in "__BASE__". Item features
// (those reading the sampler's attribute columns) are generated from the sampled nodes'
// attributes; every other feature, sample weight and reserved column repeats its row's value.
// A feature reading both kinds of columns is an error.
//
// Thread safety: a Dataset is immutable after construction; each ParsedBatchStream is used by
// one consumer thread (its reader threads are internal).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tzrec/data/csv_reader.h"
#include "tzrec/data/data_position.h"
#include "tzrec/data/parsed_batch.h"
#include "tzrec/data/row_source.h"
#include "tzrec/features/feature.h"
#include "tzrec/fg/feature_generator.h"
#include "tzrec/input/sampler.h"
#include "tzrec/input/tdm_pairs.h"
#include "tzrec/protos/data.pb.h"

namespace tzrec {

enum class DatasetMode { kTrain, kEval, kPredict };

// What a loss accepts as its label, e.g. [0, 1] for binary cross entropy, class indices for
// softmax cross entropy. Checked per row by the readers, so the error names file and row.
struct LabelRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool integral = false;
  std::string required_by;  // e.g. "model_config.deepfm: binary_cross_entropy"
};

struct DatasetOptions {
  std::string input_path;  // as configured (names Parquet positions)
  std::vector<std::string> files;
  std::vector<std::string> columns;  // columns the features, labels, weights and reserves read
  std::string list_separator = "\x03";  // Parquet LIST items -> text (fg_encoded_multival_sep)
  int64_t batch_size = 1024;
  bool drop_remainder = false;
  bool shuffle = false;
  int shuffle_buffer_size = 32;  // in batches
  int num_workers = 1;
  bool in_order = true;
  uint64_t seed = 0;
  std::vector<std::string> label_fields;
  std::vector<std::string> sample_weight_fields;
  // Values a label may take (from the losses reading it); labels are always checked finite.
  std::map<std::string, LabelRange> label_ranges;
  // Columns passed through as text (ParsedBatch::reserved), e.g. predict's reserved columns.
  std::vector<std::string> reserved_columns;
  size_t prefetch_batches = 4;      // per worker
  bool background_priority = true;  // reader threads run at SCHED_IDLE
  // Distributed readers: this process is `rank` of `world_size`.
  int rank = 0;
  int world_size = 1;
  DatasetMode mode = DatasetMode::kTrain;
};

class DatasetReader;
class ParsedBatchStream;

// The features of rows in hand (feature generation when `generator` is set, else FG_NONE
// parsing), every value checked finite: what a Dataset does to each chunk it reads, for
// callers that get rows from elsewhere (serving). Errors name `records.source` and the row.
ParsedBatch ParseFeatureRows(const std::vector<const Feature*>& features,
                             const fg::FeatureGenerator* generator, const RecordBatch& records);

class Dataset {
 public:
  // `features` must outlive the dataset. `generator` turns raw columns into the features when
  // data_config.fg_mode is not FG_NONE (required then; see fg/feature_generator.h).
  // `reserved_columns` are passed through as text.
  Dataset(const protos::DataConfig& data_config, std::vector<const Feature*> features,
          const std::string& input_path, DatasetMode mode, uint64_t seed,
          std::shared_ptr<const fg::FeatureGenerator> generator = nullptr, int rank = 0,
          int world_size = 1, std::vector<std::string> reserved_columns = {});
  ~Dataset();

  // Starts one pass over the data; `epoch` varies the shuffle. With `resume`, rows the state
  // records as consumed are not read again.
  std::unique_ptr<ParsedBatchStream> Open(int64_t epoch,
                                          const DataloaderState* resume = nullptr) const;
  const DatasetOptions& options() const { return options_; }
  // Labels outside `range` become errors naming file, row and column (intersected when several
  // losses read one label). Call before Open.
  void RequireLabelRange(const std::string& label, const LabelRange& range);

  // Parses one chunk of rows (one file's rows) into features, labels, weights and reserves.
  ParsedBatch ParseRecords(const RecordBatch& records) const;
  // The negative sampler, or null.
  const Sampler* sampler() const { return sampler_.get(); }
  // The tdm_sampler, or null.
  const TdmSampler* tdm_sampler() const { return tdm_pairs_ ? &tdm_pairs_->sampler() : nullptr; }
  // Samples for a whole batch and appends the sampled rows (see above); no-op without sampler.
  void AddSampledRows(ParsedBatch* batch, std::mt19937_64& rng) const;

 private:
  DatasetOptions options_;
  std::vector<const Feature*> features_;
  std::shared_ptr<const fg::FeatureGenerator> generator_;
  std::unique_ptr<DatasetReader> reader_;
  std::shared_ptr<const Sampler> sampler_;
  void ExpandTdmRows(ParsedBatch* batch, std::mt19937_64& rng) const;
  std::shared_ptr<const TdmPairs> tdm_pairs_;
  bool force_base_data_group_ = false;
  std::unique_ptr<std::once_flag> first_sample_logged_ = std::make_unique<std::once_flag>();
};

// One pass over a dataset. Next() blocks until a batch is ready; errors from reader threads
// are rethrown there. Destroying the stream stops the workers.
class ParsedBatchStream {
 public:
  ParsedBatchStream(const Dataset* dataset, std::vector<std::unique_ptr<RowSource>> sources,
                    int64_t epoch, const DataloaderState* resume);
  ~ParsedBatchStream();
  ParsedBatchStream(const ParsedBatchStream&) = delete;
  ParsedBatchStream& operator=(const ParsedBatchStream&) = delete;

  // Returns false when the pass is complete, or once `*interrupt` (set_interrupt) is true.
  bool Next(ParsedBatch* out);
  // Makes Next return false within ~0.1 s of `*flag` becoming true (a stop request must end
  // the wait on a stream that has no end); the flag must outlive the stream.
  void set_interrupt(const std::atomic<bool>* flag) { interrupt_ = flag; }

 private:
  struct WorkerQueue {
    std::deque<ParsedBatch> batches;
    bool done = false;
  };
  void RunWorker(int worker, RowSource* source);
  void Push(int worker, ParsedBatch batch);

  const Dataset* dataset_;
  int64_t epoch_;
  std::mutex mutex_;
  std::condition_variable ready_;     // consumer waits
  std::condition_variable has_room_;  // workers wait
  std::vector<WorkerQueue> queues_;
  bool stop_ = false;
  std::exception_ptr error_;
  size_t next_worker_ = 0;
  const std::atomic<bool>* interrupt_ = nullptr;
  std::vector<std::unique_ptr<RowSource>> sources_;  // outlive the workers (Cancel on stop)
  std::vector<std::thread> threads_;
};

// One declared input field: data_config.input_fields_str's "name:TYPE" entries (they win, as in
// TorchEasyRec) or input_fields. `type` is the FieldType name, empty when input_type is unset;
// `where` names the config field for errors.
struct InputFieldSpec {
  std::string name;
  std::string type;
  std::string where;
};
std::vector<InputFieldSpec> DeclaredInputFields(const protos::DataConfig& data_config);

// Maps data_config.input_fields / input_fields_str to CSV column names and types.
void ResolveCsvSchema(const protos::DataConfig& data_config, CsvOptions* options);

}  // namespace tzrec
