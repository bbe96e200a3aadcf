// Parquet writer for generated training data and predictions (own implementation: no Arrow,
// no LibTorch).
//
// The schema is declared up front as ParquetFieldSpecs: primitives (BOOLEAN, INT32, INT64,
// FLOAT, DOUBLE, UTF8 string), LIST<x>, LIST<LIST<x>> (standard 3-level layout) and
// MAP<key, x>, each nullable or not. Rows arrive as ParquetColumns (structured form, see
// parquet_column.h) or, for plain fields, as a RecordBatch, and are cut into row groups of
// `row_group_rows` rows; each row group is written out as soon as it is full, so memory holds
// at most one row group. Pages are data page v1 (PLAIN values, RLE levels), compressed with the
// chosen codec and CRC-checked; string columns are dictionary-encoded per column chunk unless
// the dictionary would exceed `dictionary_max_bytes`, in which case they fall back to PLAIN.
//
// Atomic: everything goes to a temp file next to `path`, renamed into place by Close(). A
// writer destroyed without Close() (e.g. during an exception) removes the temp file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tzrec/data/parquet/parquet_column.h"
#include "tzrec/data/record_batch.h"

namespace tzrec {

namespace parquet {
struct ColumnMetaData;
struct FileMetaData;
struct LeafBuffer;
struct PageHeader;
}  // namespace parquet

enum class ParquetType { kBoolean, kInt32, kInt64, kFloat, kDouble, kString };
enum class ParquetCodec { kUncompressed, kSnappy, kGzip, kZstd, kLz4Raw };

// Column type a ParquetType is written from (kInt64 for BOOLEAN/INT32/INT64, kDouble for
// FLOAT/DOUBLE, kString for strings), the same type the reader gives back.
ColumnType ColumnTypeFor(ParquetType type);

struct ParquetFieldSpec {
  std::string name;
  ParquetType type = ParquetType::kInt64;  // the value, the list item, or the map value
  bool nullable = true;                    // the row's value (whole list/map) may be null
  int list_depth = 0;                      // 0 plain, 1 LIST<type>, 2 LIST<LIST<type>>
  bool is_map = false;                     // MAP<key_type, type>
  ParquetType key_type = ParquetType::kString;
  bool items_nullable = true;  // list items, inner lists, map values may be null

  static ParquetFieldSpec Plain(std::string name, ParquetType type, bool nullable = true);
  static ParquetFieldSpec List(std::string name, ParquetType item_type, int depth = 1);
  static ParquetFieldSpec Map(std::string name, ParquetType key_type, ParquetType value_type);
};

struct ParquetWriteOptions {
  ParquetCodec codec = ParquetCodec::kSnappy;
  int compression_level = 0;  // 0 = the codec's default
  int64_t row_group_rows = 128 * 1024;
  size_t data_page_bytes = 1 << 20;  // target uncompressed size of a data page
  bool dictionary = true;            // dictionary-encode string columns
  size_t dictionary_max_bytes = 1 << 20;
  bool page_checksums = true;
  std::string created_by = "tzrec-cpp";
  std::vector<std::pair<std::string, std::string>> key_value_metadata;
};

class ParquetFileWriter {
 public:
  // Validates the schema and opens the temp file.
  ParquetFileWriter(std::string path, std::vector<ParquetFieldSpec> fields,
                    ParquetWriteOptions options = {});
  ~ParquetFileWriter();
  ParquetFileWriter(const ParquetFileWriter&) = delete;
  ParquetFileWriter& operator=(const ParquetFileWriter&) = delete;

  // Appends rows: one ParquetColumn per field, in schema order, all with the same row count.
  // Fails naming the column and row on a shape or type mismatch, a null in a non-nullable
  // position, or an INT32 value out of range.
  void Write(const std::vector<ParquetColumn>& columns);
  // Appends rows of plain (non-nested) fields, found in `batch` by name.
  void Write(const RecordBatch& batch);
  // Flushes the last row group, writes the footer and renames the file into place.
  void Close();

  int64_t rows_written() const { return rows_written_; }

 private:
  struct FieldInput {
    const std::vector<ParquetListLevel>* lists;
    const Column* keys;
    const Column* values;
  };
  void WriteInputs(const std::vector<FieldInput>& inputs, size_t num_rows);
  void Validate(size_t field, const FieldInput& input, size_t num_rows) const;
  void Shred(size_t field, const FieldInput& input, size_t begin, size_t end);
  void FlushRowGroup();
  void WriteColumnChunk(size_t leaf);
  void WritePage(parquet::PageHeader header, const std::string& body, const std::string& column,
                 parquet::ColumnMetaData* meta);
  void WriteBytes(const char* data, size_t size);

  std::string path_;
  std::string temp_path_;
  std::vector<ParquetFieldSpec> fields_;
  ParquetWriteOptions options_;
  FILE* file_ = nullptr;
  int64_t offset_ = 0;
  std::unique_ptr<parquet::FileMetaData> metadata_;
  std::vector<std::unique_ptr<parquet::LeafBuffer>> leaves_;
  std::vector<std::vector<size_t>> field_leaves_;  // leaf indices of each field
  std::string page_buffer_;                        // compressed page, reused
  int64_t buffered_rows_ = 0;
  int64_t rows_written_ = 0;
  bool closed_ = false;
};

}  // namespace tzrec
