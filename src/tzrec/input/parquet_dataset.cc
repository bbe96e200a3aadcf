// ParquetDataset: rows of all files of the input path, in order, split into contiguous ranges
// over world_size x num_workers readers (TorchEasyRec's rebalanced split, data_position.h);
// only the needed columns and the row groups a range touches are read. Column types come from
// the files, so it reads no schema fields of data_config.
#include "tzrec/common/error.h"
#include "tzrec/data/parquet/parquet_reader.h"
#include "tzrec/input/dataset_reader.h"

namespace tzrec {
namespace {

class ParquetDatasetReader : public DatasetReader {
 public:
  explicit ParquetDatasetReader(const DatasetOptions& options) : options_(options) {
    // Footers only: row counts for the split, and every file checked for the needed columns
    // before any reader starts.
    ParquetReadOptions read_options;
    read_options.columns = options_.columns;
    for (const auto& file : options_.files) {
      file_rows_.push_back(ParquetFileReader(file, read_options).num_rows());
      total_rows_ += file_rows_.back();
    }
  }

  std::vector<std::unique_ptr<RowSource>> Open(int64_t epoch,
                                               const DataloaderState* resume) const override {
    ParquetInput input{options_.input_path, options_.files, file_rows_, options_.columns,
                       options_.list_separator};
    const std::vector<RowInterval> remaining =
        RemainingIntervals(resume, options_.input_path, total_rows_);
    const int workers = options_.num_workers;
    const int64_t slices = static_cast<int64_t>(options_.world_size) * workers;
    // TorchEasyRec drops one row from a reader's range when that alone would leave it a
    // 1-row batch (train and eval; not predict).
    const bool drop_bs_eq_one = options_.mode != DatasetMode::kPredict;
    std::vector<std::unique_ptr<RowSource>> sources;
    for (int w = 0; w < workers; ++w) {
      sources.push_back(MakeParquetRowSource(
          input, WorkerIntervals(remaining, static_cast<int64_t>(options_.rank) * workers + w,
                                 slices, options_.batch_size, drop_bs_eq_one)));
    }
    return sources;
  }

 private:
  DatasetOptions options_;
  std::vector<int64_t> file_rows_;
  int64_t total_rows_ = 0;
};

std::unique_ptr<DatasetReader> MakeParquetReader(const protos::DataConfig&, DatasetOptions* options) {
  return std::make_unique<ParquetDatasetReader>(*options);
}

}  // namespace

Registry<DatasetReaderFactory>& DatasetReaderRegistry() {
  static Registry<DatasetReaderFactory> registry(
      "dataset type", {ConfigSlot{"tzrec.protos.DataConfig", "", "dataset_type"}});
  return registry;
}

TZREC_REGISTER(DatasetReaderRegistry(), "ParquetDataset", MakeParquetReader);

}  // namespace tzrec
