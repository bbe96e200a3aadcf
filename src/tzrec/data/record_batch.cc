#include "tzrec/data/record_batch.h"

#include <sstream>

#include "tzrec/common/error.h"

namespace tzrec {

std::string Column::TextAt(size_t row) const {
  if (IsNull(row)) return "";
  switch (type) {
    case ColumnType::kString: return std::string(StringAt(row));
    case ColumnType::kInt64: return std::to_string(ints[row]);
    case ColumnType::kDouble: {
      std::ostringstream out;
      out << doubles[row];
      return out.str();
    }
  }
  return "";
}

void Column::AppendString(std::string_view text, bool is_valid) {
  chars.append(text.data(), text.size());
  offsets.push_back(static_cast<uint32_t>(chars.size()));
  valid.push_back(is_valid ? 1 : 0);
}

const Column* RecordBatch::Find(const std::string& name) const {
  for (const auto& column : columns) {
    if (column.name == name) return &column;
  }
  return nullptr;
}

std::string RecordBatch::RowLocation(size_t row) const {
  return StrCat(source, ":", line_numbers[row]);
}

}  // namespace tzrec
