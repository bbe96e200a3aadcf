// A reader thread's share of the input: raw rows in chunks, each row with its data position.
//
// CSV: whole files (TorchEasyRec assigns CSV files round-robin to readers), each starting
// after the row a resumed DataloaderState says was consumed last. Parquet: intervals of the
// rows of all files of the input path taken in order (TorchEasyRec's row-rebalanced split,
// see data_position.h), read with projection and only the row groups the intervals touch.
// Kafka: messages of some partitions of a topic (kafka_source.h), an unbounded stream.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tzrec/data/csv_reader.h"
#include "tzrec/data/data_position.h"
#include "tzrec/data/record_batch.h"

namespace tzrec {

class RowSource {
 public:
  virtual ~RowSource() = default;
  // Reads up to `max_rows` next rows into `records` and their positions into `positions`
  // (both replaced). Returns false when the share is exhausted.
  virtual bool Next(size_t max_rows, RecordBatch* records, RowPositions* positions) = 0;
  // Makes a Next that waits for data (a stream) return false soon, now or later; callable
  // from any thread while Next runs. Sources of files finish on their own and ignore it.
  virtual void Cancel() {}
};

// `files` in reading order; rows of a file up to state["<file>:0"] are skipped.
std::unique_ptr<RowSource> MakeCsvRowSource(std::vector<std::string> files, CsvOptions options,
                                            const DataloaderState* resume);

struct ParquetInput {
  std::string input_path;           // the configured path (names the position keys)
  std::vector<std::string> files;   // expanded, in order
  std::vector<int64_t> file_rows;   // rows of each file (from the footers)
  std::vector<std::string> columns; // projection
  std::string list_separator;       // joins LIST items into text (fg_encoded_multival_sep)
};
// Reads `intervals` (rows over all files of `input` in order).
std::unique_ptr<RowSource> MakeParquetRowSource(const ParquetInput& input,
                                                std::vector<RowInterval> intervals);

}  // namespace tzrec
