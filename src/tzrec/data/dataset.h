// Dataset: files -> parsed, batch-sized ParsedBatches, read by worker threads (no LibTorch).
//
// Mirrors TorchEasyRec's CsvDataset and ParquetDataset: comma-separated glob lists; CSV files
// go whole and round-robin to `num_workers` reader threads, Parquet rows are split into
// contiguous ranges over world_size x num_workers readers (row_source.h). Each reader turns
// its rows into batches of exactly `batch_size` rows (its last partial batch is dropped iff
// drop_remainder), optionally shuffled through a buffer of `shuffle_buffer_size` batches
// (train only; CSV also shuffles file order), into a bounded prefetch queue. With in_order
// the stream takes batches from workers round-robin, so a run is reproducible for a fixed
// seed and worker count. Every row carries its position; a stream opened with a
// DataloaderState reads only what the state has not consumed (exact resume).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tzrec/data/csv_reader.h"
#include "tzrec/data/data_position.h"
#include "tzrec/data/parsed_batch.h"
#include "tzrec/data/row_source.h"
#include "tzrec/features/feature.h"
#include "tzrec/fg/feature_generator.h"
#include "tzrec/protos/data.pb.h"

namespace tzrec {

enum class DatasetMode { kTrain, kEval };
enum class DataFormat { kCsv, kParquet };

struct DatasetOptions {
  DataFormat format = DataFormat::kCsv;
  std::string input_path;  // as configured (names Parquet positions)
  std::vector<std::string> files;
  CsvOptions csv;
  std::vector<int64_t> parquet_file_rows;  // per file, from the footers
  std::vector<std::string> columns;        // columns the features, labels and weights read
  std::string list_separator = "\x03";     // Parquet LIST items -> text (fg_encoded_multival_sep)
  int64_t batch_size = 1024;
  bool drop_remainder = false;
  bool shuffle = false;
  int shuffle_buffer_size = 32;  // in batches
  int num_workers = 1;
  bool in_order = true;
  uint64_t seed = 0;
  std::vector<std::string> label_fields;
  std::vector<std::string> sample_weight_fields;
  size_t prefetch_batches = 4;  // per worker
  bool background_priority = true;  // reader threads run at SCHED_IDLE
  // Distributed readers: this process reads slices rank*num_workers + w of
  // world_size*num_workers (Parquet rows).
  int rank = 0;
  int world_size = 1;
  // TorchEasyRec drops one row from a Parquet reader's range when that alone would leave it
  // a 1-row batch (train and eval; not predict).
  bool drop_redundant_bs_eq_one = true;
};

class BatchStream;

class Dataset {
 public:
  // `features` must outlive the dataset. `generator` turns raw columns into the features when
  // data_config.fg_mode is not FG_NONE (required then; see fg/feature_generator.h).
  Dataset(const protos::DataConfig& data_config, std::vector<const Feature*> features,
          const std::string& input_path, DatasetMode mode, uint64_t seed,
          std::shared_ptr<const fg::FeatureGenerator> generator = nullptr, int rank = 0,
          int world_size = 1);
  Dataset(DatasetOptions options, std::vector<const Feature*> features);

  // Starts one pass over the data; `epoch` varies the shuffle. With `resume`, rows the state
  // records as consumed are not read again.
  std::unique_ptr<BatchStream> Open(int64_t epoch, const DataloaderState* resume = nullptr) const;
  const DatasetOptions& options() const { return options_; }

  // Parses one chunk of rows (one file's rows) into features, labels and weights.
  ParsedBatch ParseRecords(const RecordBatch& records) const;

 private:
  DatasetOptions options_;
  std::vector<const Feature*> features_;
  std::shared_ptr<const fg::FeatureGenerator> generator_;
};

// One pass over a dataset. Next() blocks until a batch is ready; errors from reader threads
// are rethrown there. Destroying the stream stops the workers.
class BatchStream {
 public:
  BatchStream(const Dataset* dataset, int64_t epoch, const DataloaderState* resume);
  ~BatchStream();
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;

  // Returns false when the pass is complete.
  bool Next(ParsedBatch* out);

 private:
  struct WorkerQueue {
    std::deque<ParsedBatch> batches;
    bool done = false;
  };
  void RunWorker(int worker, std::unique_ptr<RowSource> source);
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
  std::vector<std::thread> threads_;
};

// Maps data_config.input_fields / input_fields_str to CSV column names and types.
void ResolveCsvSchema(const protos::DataConfig& data_config, CsvOptions* options);

}  // namespace tzrec
