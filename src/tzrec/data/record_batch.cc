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
