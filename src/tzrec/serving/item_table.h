// ItemTable: item features served from a local table, standing in for the FeatureStore that
// feeds the TorchEasyRec Processor's item cache. `tzrec serve --item_table_path` loads it once;
// a rank request then names only item ids and the table supplies each item's columns.
//
// The table is CSV with a header or Parquet (by file extension), one row per item keyed by one
// column; cells keep the reader's types, so feature generation sees them exactly as in
// training. Immutable after construction; thread-safe.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tzrec/data/record_batch.h"

namespace tzrec {

struct ItemTableOptions {
  std::string path;          // comma-separated files or globs
  std::string key_column;    // the item id column
  char csv_delimiter = ',';
  std::string list_separator = "\x1d";  // how Parquet LIST cells are joined (fg_encoded_multival_sep)
};

class ItemTable {
 public:
  // Reads every row. Fails naming the file and row on a missing key column, an empty or a
  // repeated item id, or files whose columns differ.
  explicit ItemTable(const ItemTableOptions& options);

  const std::string& key_column() const { return key_column_; }
  size_t size() const { return row_of_.size(); }

  // The table row of each id in `ids` (the text of its rows), -1 for unknown items.
  std::vector<int64_t> Find(const Column& ids) const;
  // Appends to `records` the table's columns (all but the key and those `records` already
  // has: a request's own values win) for table rows `rows` (all known), one per record row.
  void AppendItemColumns(const std::vector<int64_t>& rows, RecordBatch* records) const;

 private:
  void Add(const RecordBatch& batch, const std::string& file);

  std::string key_column_;
  std::vector<Column> columns_;  // every column but the key, all rows
  std::unordered_map<std::string, size_t> row_of_;
  std::vector<std::string> files_;
  std::vector<std::pair<uint32_t, int64_t>> origins_;  // file index and line of each row (errors)
};

// Rows `rows` of `records` (in that order), columns and types kept.
RecordBatch SelectRows(const RecordBatch& records, const std::vector<size_t>& rows);

}  // namespace tzrec
