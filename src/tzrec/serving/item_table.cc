#include "tzrec/serving/item_table.h"

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/csv_reader.h"
#include "tzrec/data/parquet/parquet_reader.h"

namespace tzrec {
namespace {

// Appends row `row` of `from` (same type) to `to`; row < 0 appends a null.
void AppendCell(const Column& from, int64_t row, Column* to) {
  const bool present = row >= 0 && !from.IsNull(static_cast<size_t>(row));
  switch (from.type) {
    case ColumnType::kString:
      to->AppendString(present ? from.StringAt(static_cast<size_t>(row)) : std::string_view(), present);
      return;
    case ColumnType::kInt64:
      to->ints.push_back(present ? from.ints[row] : 0);
      break;
    case ColumnType::kDouble:
      to->doubles.push_back(present ? from.doubles[row] : 0.0);
      break;
  }
  to->valid.push_back(present ? 1 : 0);
}

Column EmptyLike(const Column& column) {
  Column out;
  out.name = column.name;
  out.type = column.type;
  out.list_depth = column.list_depth;
  out.list_separator = column.list_separator;
  out.nested_separator = column.nested_separator;
  return out;
}

}  // namespace

ItemTable::ItemTable(const ItemTableOptions& options) : key_column_(options.key_column) {
  if (key_column_.empty()) Fail("--item_table_key is required with --item_table_path");
  const std::vector<std::string> files = ExpandInputPaths(options.path);
  if (files.empty()) Fail("--item_table_path: no file matches '", options.path, "'");
  constexpr size_t kChunk = 65536;
  for (const std::string& file : files) {
    RecordBatch batch;
    if (EndsWith(file, ".parquet")) {
      ParquetReadOptions read;
      read.list_separator = options.list_separator;
      ParquetFileReader reader(file, read);
      while (reader.Next(kChunk, &batch)) Add(batch, file);
    } else {
      CsvOptions csv;
      csv.with_header = true;
      csv.delimiter = options.csv_delimiter;
      CsvFileReader reader(file, csv);
      while (reader.Next(kChunk, &batch)) Add(batch, file);
    }
  }
  LOG_INFO << "item table: " << row_of_.size() << " items, " << columns_.size() << " feature columns from "
           << files.size() << " file(s), keyed by '" << key_column_ << "'";
}

void ItemTable::Add(const RecordBatch& batch, const std::string& file) {
  if (files_.empty() || files_.back() != file) files_.push_back(file);
  const Column* key = batch.Find(key_column_);
  if (!key) Fail(file, ": the item table has no column '", key_column_, "' (--item_table_key)");
  if (columns_.empty() && row_of_.empty()) {
    for (const Column& column : batch.columns) {
      if (column.name != key_column_) columns_.push_back(EmptyLike(column));
    }
  }
  if (batch.columns.size() != columns_.size() + 1) {
    Fail(file, ": its columns differ from the item table's first file");
  }
  std::vector<const Column*> sources;
  for (Column& column : columns_) {
    const Column* source = batch.Find(column.name);
    if (!source || source->type != column.type || source->list_depth != column.list_depth) {
      Fail(file, ": column '", column.name, "' is missing or has another type than in the first file");
    }
    sources.push_back(source);
  }
  for (size_t r = 0; r < batch.num_rows(); ++r) {
    const std::string id = key->TextAt(r);
    if (key->IsNull(r) || id.empty()) Fail(file, ":", batch.line_numbers[r], ": empty item id in '", key_column_, "'");
    auto [it, inserted] = row_of_.emplace(id, origins_.size());
    if (!inserted) {
      const auto& first = origins_[it->second];
      Fail(file, ":", batch.line_numbers[r], ": item id '", id, "' repeats (first at ", files_[first.first], ":",
           first.second, ")");
    }
    origins_.emplace_back(static_cast<uint32_t>(files_.size() - 1), batch.line_numbers[r]);
    for (size_t c = 0; c < columns_.size(); ++c) AppendCell(*sources[c], static_cast<int64_t>(r), &columns_[c]);
  }
}

std::vector<int64_t> ItemTable::Find(const Column& ids) const {
  std::vector<int64_t> rows(ids.size(), -1);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = row_of_.find(ids.TextAt(i));
    if (it != row_of_.end()) rows[i] = static_cast<int64_t>(it->second);
  }
  return rows;
}

void ItemTable::AppendItemColumns(const std::vector<int64_t>& rows, RecordBatch* records) const {
  for (const Column& column : columns_) {
    if (records->Find(column.name)) continue;
    Column gathered = EmptyLike(column);
    for (int64_t row : rows) AppendCell(column, row, &gathered);
    records->columns.push_back(std::move(gathered));
  }
}

RecordBatch SelectRows(const RecordBatch& records, const std::vector<size_t>& rows) {
  RecordBatch out;
  out.source = records.source;
  for (size_t row : rows) out.line_numbers.push_back(records.line_numbers[row]);
  for (const Column& column : records.columns) {
    Column selected = EmptyLike(column);
    for (size_t row : rows) AppendCell(column, static_cast<int64_t>(row), &selected);
    out.columns.push_back(std::move(selected));
  }
  return out;
}

}  // namespace tzrec
