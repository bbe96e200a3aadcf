#include "tzrec/embedding/table_shard.h"

#include "tzrec/common/error.h"

namespace tzrec {

int64_t TableShard::row_offset(int r) const { return type == Type::kRowWise ? r : 0; }

at::Tensor TableShard::RowsOf(int r, const at::Tensor& logical) const {
  const int64_t n = local_rows(r), first = row_offset(r);
  if (n == 0) return logical.narrow(0, 0, 0);
  return logical.slice(0, first, first + (n - 1) * row_step() + 1, row_step());
}

int64_t TableShard::local_rows(int r) const {
  switch (type) {
    case Type::kTableWise: return r == owner ? rows : 0;
    case Type::kRowWise: return r < rows ? (rows - r + world_size - 1) / world_size : 0;
    default: return rows;
  }
}

int TableShard::column_begin(int r) const {
  return type == Type::kColumnWise ? static_cast<int>(static_cast<int64_t>(dim) * r / world_size) : 0;
}

int TableShard::column_end(int r) const {
  return type == Type::kColumnWise ? static_cast<int>(static_cast<int64_t>(dim) * (r + 1) / world_size)
                                   : dim;
}

TableShard::Type TableShard::ParseType(const std::string& name) {
  if (name == "data_parallel") return Type::kDataParallel;
  if (name == "table_wise") return Type::kTableWise;
  if (name == "row_wise") return Type::kRowWise;
  if (name == "column_wise") return Type::kColumnWise;
  Fail("sharding type '", name, "' not supported yet (supported: data_parallel, table_wise, ",
       "row_wise, column_wise)");
}

const char* TableShard::TypeName(Type type) {
  switch (type) {
    case Type::kDataParallel: return "data_parallel";
    case Type::kTableWise: return "table_wise";
    case Type::kRowWise: return "row_wise";
    case Type::kColumnWise: return "column_wise";
  }
  return "?";
}

}  // namespace tzrec
