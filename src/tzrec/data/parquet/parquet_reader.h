// Streaming Parquet reader producing RecordBatches (own implementation: no Arrow, no LibTorch).
//
// Opening a file reads only its footer: row counts per row group are available before any
// data is read, so a dataset can split a file's rows across readers by contiguous ranges.
// Data is read one row group at a time, and only the column chunks of the requested
// top-level columns (pread, never the whole file).
//
// Output types: INT32/INT64/BOOLEAN -> kInt64 (booleans 0/1, UINT_8/16/32 zero-extended),
// FLOAT/DOUBLE -> kDouble, BYTE_ARRAY -> kString; nulls via Column::valid. Nested fields
// (LIST<x>, LIST<LIST<x>>, MAP<k, v> of those primitives) come out as kString text using the
// separators in ParquetReadOptions, or in structured form from ReadRowGroupColumns().
// RecordBatch::line_numbers hold 1-based row numbers within the file.
//
// Supported: data pages v1/v2, dictionary pages; PLAIN, RLE/bit-packed levels and booleans,
// PLAIN_DICTIONARY/RLE_DICTIONARY, DELTA_BINARY_PACKED, DELTA_LENGTH_BYTE_ARRAY,
// DELTA_BYTE_ARRAY, BYTE_STREAM_SPLIT, deprecated BIT_PACKED levels; codecs UNCOMPRESSED,
// SNAPPY, GZIP, ZSTD, LZ4_RAW; page CRCs are verified when present. Not supported (fails with
// "not supported yet" when such a column is requested): INT96, FIXED_LEN_BYTE_ARRAY, DECIMAL,
// UINT_64, structs, lists of structs/maps, lists nested deeper than two, maps with nested
// values, codecs LZO/BROTLI/Hadoop-LZ4, encrypted files, column chunks in other files.
//
// Every failure is a tzrec::Error naming the file and, for data errors, the row group, leaf
// column and page. Not thread-safe; use one reader per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tzrec/data/parquet/parquet_column.h"
#include "tzrec/data/record_batch.h"

namespace tzrec {

namespace parquet {
struct FileMetaData;
class ParquetSchema;
struct LeafData;
}  // namespace parquet

struct ParquetReadOptions {
  // Top-level columns to read, in output order; empty = every column of the file.
  std::vector<std::string> columns;

  // Text form of nested columns in RecordBatch output:
  //   LIST<x>:        items joined by list_separator                      "1\x1d2\x1d3"
  //   LIST<LIST<x>>:  each sub-list's items joined by list_separator, the
  //                   sub-lists joined by nested_list_separator            "1\x1d2;3"
  //   MAP<k, v>:      key + map_kv_separator + value, entries joined by
  //                   list_separator                                      "a:1\x1db:2"
  // A null row is a null cell; an empty list or map is "" (valid). A null item, null map
  // value or null sub-list is empty text in its position. Numbers print in the shortest form
  // that reads back exactly (FLOAT items at float precision); booleans print 0/1.
  std::string list_separator = "\x1d";
  std::string nested_list_separator = ";";
  std::string map_kv_separator = ":";

  // Verify page CRCs when a writer stored them (a mismatch is an error).
  bool verify_checksums = true;
};

struct ParquetFieldInfo {
  std::string name;
  std::string parquet_type;  // e.g. "INT64", "LIST<BYTE_ARRAY>", "MAP<BYTE_ARRAY, DOUBLE>"
  ColumnType output_type = ColumnType::kString;  // RecordBatch column type
  int list_depth = 0;
  bool is_map = false;
  bool nullable = true;
  bool float_items = false;  // the leaf values are FLOAT (for exact text)
  bool float_keys = false;   // the map keys are FLOAT
  std::string unsupported;   // non-empty: why this column cannot be read
};

class ParquetFileReader {
 public:
  // Reads the footer. Fails naming the file on bad magic, a truncated file or footer, corrupt
  // metadata, or a requested column that is missing or not supported.
  explicit ParquetFileReader(std::string path, ParquetReadOptions options = {});
  ~ParquetFileReader();
  ParquetFileReader(const ParquetFileReader&) = delete;
  ParquetFileReader& operator=(const ParquetFileReader&) = delete;

  const std::string& path() const { return path_; }
  int64_t num_rows() const { return num_rows_; }
  int num_row_groups() const { return static_cast<int>(row_group_rows_.size()); }
  int64_t row_group_num_rows(int index) const;
  const std::vector<int64_t>& row_group_row_counts() const { return row_group_rows_; }
  // Every top-level field of the file, in schema order.
  const std::vector<ParquetFieldInfo>& fields() const { return fields_; }
  // The columns this reader outputs, in output order.
  const std::vector<std::string>& column_names() const { return column_names_; }
  std::vector<std::pair<std::string, std::string>> key_value_metadata() const;

  // Limits Next() to file rows [begin, end) (end clamped to num_rows()) and rewinds to begin.
  // The default range is the whole file. Row groups outside the range are never read.
  void SetRowRange(int64_t begin, int64_t end);
  // Reads up to `max_rows` of the next rows into `out` (replacing its contents); a batch never
  // spans two row groups. Returns false when the range is exhausted.
  bool Next(size_t max_rows, RecordBatch* out);

  // Rows [begin, end) of the file in one batch (end clamped to num_rows()).
  void ReadRows(int64_t begin, int64_t end, RecordBatch* out);
  void ReadRowGroup(int index, RecordBatch* out);
  // The requested columns of one row group in structured form (see parquet_column.h).
  std::vector<ParquetColumn> ReadRowGroupColumns(int index);

 private:
  void ReadFooter();
  void SelectColumns();
  void ReadLeaf(int row_group, int leaf_index, parquet::LeafData* out);
  void ReadExact(int64_t offset, size_t size, char* out) const;
  // Rows [begin, end) of row group `row_group`, whose columns are `columns`.
  void BuildBatch(const std::vector<ParquetColumn>& columns, int row_group, size_t begin,
                  size_t end, RecordBatch* out) const;

  std::string path_;
  ParquetReadOptions options_;
  int fd_ = -1;
  int64_t file_size_ = 0;
  int64_t data_end_ = 0;  // where the footer starts
  std::unique_ptr<parquet::FileMetaData> metadata_;
  std::unique_ptr<parquet::ParquetSchema> schema_;
  int64_t num_rows_ = 0;
  std::vector<int64_t> row_group_rows_;
  std::vector<int64_t> row_group_first_row_;
  std::vector<ParquetFieldInfo> fields_;
  std::vector<int> selected_fields_;  // indices into fields_
  std::vector<std::string> column_names_;
  std::string chunk_buffer_;

  int64_t range_begin_ = 0;
  int64_t range_end_ = 0;
  int64_t cursor_ = 0;
  int loaded_group_ = -1;
  std::vector<ParquetColumn> loaded_columns_;
};

// The text form of rows [begin, end) of `column` (a kString Column named column.name), using
// the separators of `options` (see ParquetReadOptions). `float_items`/`float_keys`: print
// values/keys at float precision.
Column ParquetColumnToText(const ParquetColumn& column, size_t begin, size_t end,
                           const ParquetReadOptions& options, bool float_items = false,
                           bool float_keys = false);
// Rows [begin, end) of `column` as a RecordBatch column: plain columns keep their type, nested
// ones become text (ParquetColumnToText).
Column ParquetColumnRows(const ParquetColumn& column, size_t begin, size_t end,
                         const ParquetReadOptions& options, bool float_items = false,
                         bool float_keys = false);
// Rows [begin, end) of a plain column.
Column SliceColumn(const Column& column, size_t begin, size_t end);

}  // namespace tzrec
