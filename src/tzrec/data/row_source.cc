#include "tzrec/data/row_source.h"

#include <algorithm>

#include "tzrec/common/error.h"
#include "tzrec/data/parquet/parquet_reader.h"

namespace tzrec {
namespace {

class CsvRowSource : public RowSource {
 public:
  CsvRowSource(std::vector<std::string> files, CsvOptions options, const DataloaderState* resume)
      : files_(std::move(files)), options_(std::move(options)) {
    for (const auto& file : files_) {
      int64_t skip = 0;
      if (resume) {
        auto it = resume->consumed().find(file + ":0");
        if (it != resume->consumed().end()) skip = it->second + 1;
      }
      skips_.push_back(skip);
    }
  }

  bool Next(size_t max_rows, RecordBatch* records, RowPositions* positions) override {
    while (true) {
      if (!reader_) {
        if (next_file_ >= files_.size()) return false;
        reader_ = std::make_unique<CsvFileReader>(files_[next_file_], options_);
        row_ = reader_->SkipRecords(skips_[next_file_]);
        source_id_ = files_[next_file_] + ":0";
        ++next_file_;
      }
      if (reader_->Next(max_rows, records)) {
        *positions = RowPositions();
        positions->AddRange(source_id_, row_, static_cast<int64_t>(records->num_rows()));
        row_ += static_cast<int64_t>(records->num_rows());
        return true;
      }
      reader_.reset();
    }
  }

 private:
  std::vector<std::string> files_;
  std::vector<int64_t> skips_;
  CsvOptions options_;
  size_t next_file_ = 0;
  std::unique_ptr<CsvFileReader> reader_;
  std::string source_id_;
  int64_t row_ = 0;
};

class ParquetRowSource : public RowSource {
 public:
  ParquetRowSource(const ParquetInput& input, std::vector<RowInterval> intervals)
      : input_(input), intervals_(std::move(intervals)) {
    int64_t first = 0;
    for (int64_t rows : input_.file_rows) {
      file_first_row_.push_back(first);
      first += rows;
    }
  }

  bool Next(size_t max_rows, RecordBatch* records, RowPositions* positions) override {
    while (true) {
      if (interval_ >= intervals_.size()) return false;
      const RowInterval& interval = intervals_[interval_];
      if (cursor_ < interval.begin) cursor_ = interval.begin;
      if (cursor_ >= interval.end) {
        ++interval_;
        reader_.reset();
        continue;
      }
      // The file holding row cursor_.
      const size_t file = static_cast<size_t>(
          std::upper_bound(file_first_row_.begin(), file_first_row_.end(), cursor_) -
          file_first_row_.begin() - 1);
      const int64_t file_begin = file_first_row_[file];
      const int64_t file_end = file_begin + input_.file_rows[file];
      if (!reader_ || reader_file_ != file) {
        ParquetReadOptions options;
        options.columns = input_.columns;
        options.list_separator = input_.list_separator;
        reader_ = std::make_unique<ParquetFileReader>(input_.files[file], options);
        if (reader_->num_rows() != input_.file_rows[file]) {
          Fail(input_.files[file], ": has ", reader_->num_rows(), " rows now but had ",
               input_.file_rows[file], " when the dataset was opened (file changed while training)");
        }
        reader_file_ = file;
        reader_->SetRowRange(cursor_ - file_begin, std::min(interval.end, file_end) - file_begin);
      }
      if (reader_->Next(max_rows, records)) {
        const int64_t n = static_cast<int64_t>(records->num_rows());
        *positions = RowPositions();
        positions->AddRange(input_.input_path + ":" + std::to_string(interval.begin), cursor_, n);
        cursor_ += n;
        return true;
      }
      // This file's part of the interval is done: continue in the next file (or interval).
      cursor_ = std::min(interval.end, file_end);
      reader_.reset();
    }
  }

 private:
  ParquetInput input_;
  std::vector<RowInterval> intervals_;
  std::vector<int64_t> file_first_row_;
  size_t interval_ = 0;
  int64_t cursor_ = 0;
  std::unique_ptr<ParquetFileReader> reader_;
  size_t reader_file_ = 0;
};

}  // namespace

std::unique_ptr<RowSource> MakeCsvRowSource(std::vector<std::string> files, CsvOptions options,
                                            const DataloaderState* resume) {
  return std::make_unique<CsvRowSource>(std::move(files), std::move(options), resume);
}

std::unique_ptr<RowSource> MakeParquetRowSource(const ParquetInput& input,
                                                std::vector<RowInterval> intervals) {
  return std::make_unique<ParquetRowSource>(input, std::move(intervals));
}

}  // namespace tzrec
