// Plain columnar data as it comes out of a reader, before feature parsing (no LibTorch).
//
// A RecordBatch holds rows of one source file: named columns that are strings (CSV text,
// kept as Arrow-style offsets into one buffer), int64 or double, each with a validity mask,
// plus the line number of every row so parse errors can name file and line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tzrec {

enum class ColumnType { kString, kInt64, kDouble };

struct Column {
  std::string name;
  ColumnType type = ColumnType::kString;
  std::vector<uint8_t> valid;       // 1 = value present, 0 = null; one entry per row
  std::vector<uint32_t> offsets{0};  // kString: row i is chars[offsets[i], offsets[i+1])
  std::string chars;
  std::vector<int64_t> ints;        // kInt64
  std::vector<double> doubles;      // kDouble
  // Text of nested values (Parquet LIST columns): list_depth 1 = items joined by
  // list_separator; 2 = sub-lists joined by nested_separator, their items by list_separator.
  // 0 for plain values (CSV text is split by each feature's own separators).
  int list_depth = 0;
  std::string list_separator;
  std::string nested_separator;

  size_t size() const { return valid.size(); }
  bool IsNull(size_t row) const { return !valid[row]; }
  std::string_view StringAt(size_t row) const {
    return std::string_view(chars).substr(offsets[row], offsets[row + 1] - offsets[row]);
  }
  // The row's value as text whatever the type (for error messages and string parsing).
  std::string TextAt(size_t row) const;
  // Inline: readers call it once per cell.
  void AppendString(std::string_view text, bool is_valid) {
    chars.append(text.data(), text.size());
    offsets.push_back(static_cast<uint32_t>(chars.size()));
    valid.push_back(is_valid ? 1 : 0);
  }
};

struct RecordBatch {
  std::string source;               // file the rows came from
  std::vector<int64_t> line_numbers;  // 1-based line of each row in `source`
  std::vector<Column> columns;

  size_t num_rows() const { return line_numbers.size(); }
  // Returns nullptr if absent.
  const Column* Find(const std::string& name) const;
  // "file.csv:12" for row `row`.
  std::string RowLocation(size_t row) const;
};

}  // namespace tzrec
