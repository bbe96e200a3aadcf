// Text form of nested Parquet columns (declared in parquet_reader.h).
#include <charconv>

#include "tzrec/common/error.h"
#include "tzrec/data/parquet/parquet_reader.h"

namespace tzrec {
namespace {

void AppendNumber(int64_t value, std::string* out) {
  char buffer[24];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, result.ptr);
}

void AppendNumber(double value, bool as_float, std::string* out) {
  char buffer[40];
  auto result = as_float ? std::to_chars(buffer, buffer + sizeof(buffer), static_cast<float>(value))
                         : std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, result.ptr);
}

void AppendItem(const Column& column, size_t index, bool as_float, std::string* out) {
  if (column.IsNull(index)) return;
  switch (column.type) {
    case ColumnType::kString: out->append(column.StringAt(index)); break;
    case ColumnType::kInt64: AppendNumber(column.ints[index], out); break;
    case ColumnType::kDouble: AppendNumber(column.doubles[index], as_float, out); break;
  }
}

struct TextBuilder {
  const ParquetColumn& column;
  const ParquetReadOptions& format;
  bool float_items;
  bool float_keys;

  // Appends the children of list `index` at `level` (the innermost level prints items).
  void AppendList(size_t level, size_t index, std::string* out) const {
    const ParquetListLevel& lists = column.lists[level];
    uint32_t begin = lists.offsets[index];
    uint32_t end = lists.offsets[index + 1];
    bool innermost = level + 1 == column.lists.size();
    const std::string& separator = innermost ? format.list_separator : format.nested_list_separator;
    for (uint32_t child = begin; child < end; ++child) {
      if (child > begin) out->append(separator);
      if (!innermost) {
        if (column.lists[level + 1].valid[child]) AppendList(level + 1, child, out);
      } else if (column.is_map) {
        AppendItem(column.keys, child, float_keys, out);
        out->append(format.map_kv_separator);
        AppendItem(column.values, child, float_items, out);
      } else {
        AppendItem(column.values, child, float_items, out);
      }
    }
  }
};

}  // namespace

Column SliceColumn(const Column& column, size_t begin, size_t end) {
  Column out;
  out.name = column.name;
  out.type = column.type;
  out.valid.assign(column.valid.begin() + begin, column.valid.begin() + end);
  switch (column.type) {
    case ColumnType::kInt64:
      out.ints.assign(column.ints.begin() + begin, column.ints.begin() + end);
      break;
    case ColumnType::kDouble:
      out.doubles.assign(column.doubles.begin() + begin, column.doubles.begin() + end);
      break;
    case ColumnType::kString: {
      uint32_t base = column.offsets[begin];
      out.offsets.resize(end - begin + 1);
      for (size_t i = begin; i <= end; ++i) out.offsets[i - begin] = column.offsets[i] - base;
      out.chars.assign(column.chars, base, column.offsets[end] - base);
      break;
    }
  }
  return out;
}



Column ParquetColumnToText(const ParquetColumn& column, size_t begin, size_t end,
                           const ParquetReadOptions& format, bool float_items, bool float_keys) {
  TZREC_CHECK(begin <= end && end <= column.num_rows());
  Column out;
  out.name = column.name;
  out.type = ColumnType::kString;
  out.list_depth = static_cast<int>(column.lists.size());
  if (out.list_depth > 0) out.list_separator = format.list_separator;
  if (out.list_depth > 1) out.nested_separator = format.nested_list_separator;
  out.valid.reserve(end - begin);
  out.offsets.reserve(end - begin + 1);
  TextBuilder builder{column, format, float_items, float_keys};
  std::string text;
  for (size_t row = begin; row < end; ++row) {
    text.clear();
    bool valid;
    if (column.lists.empty()) {
      valid = !column.values.IsNull(row);
      AppendItem(column.values, row, float_items, &text);
    } else {
      valid = column.lists[0].valid[row] != 0;
      if (valid) builder.AppendList(0, row, &text);
    }
    if (out.chars.size() + text.size() > UINT32_MAX) {
      Fail("column '", column.name, "': text exceeds 4 GiB in one batch; read fewer rows");
    }
    out.AppendString(text, valid);
  }
  return out;
}

Column ParquetColumnRows(const ParquetColumn& column, size_t begin, size_t end,
                         const ParquetReadOptions& format, bool float_items, bool float_keys) {
  if (!column.lists.empty()) return ParquetColumnToText(column, begin, end, format, float_items, float_keys);
  Column out = SliceColumn(column.values, begin, end);
  out.name = column.name;
  return out;
}

}  // namespace tzrec
