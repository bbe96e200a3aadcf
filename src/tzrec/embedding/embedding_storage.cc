#include "tzrec/embedding/embedding_storage.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>

#include "tzrec/common/error.h"
#include "tzrec/embedding/table_quantization.h"

namespace tzrec {

int EmbeddingTable::dim() const { return storage_->dim(); }

at::Tensor EmbeddingTable::weight() const {
  TZREC_CHECK(!storage_->int8_rows(), "table '", name_, "' is stored INT8: read stored()");
  return storage_->tensor().narrow(0, first_row_, rows_).narrow(1, 0, storage_->dim());
}

at::Tensor EmbeddingTable::stored() const {
  if (!storage_->int8_rows()) return weight();
  return storage_->tensor().narrow(0, first_row_, rows_);
}

std::vector<std::pair<std::string, at::Tensor>> EmbeddingTable::optimizer_state() const {
  std::vector<std::pair<std::string, at::Tensor>> state;
  if (!storage_->has_optimizer()) return state;
  at::Tensor rows = storage_->tensor().narrow(0, first_row_, rows_);
  for (const auto& slice : storage_->optimizer().spec().StateSlices(storage_->dim())) {
    state.emplace_back(slice.name, rows.narrow(1, storage_->dim() + slice.offset, slice.width));
  }
  return state;
}

EmbeddingStorage::EmbeddingStorage(int dim, const SparseOptimizer* optimizer, bool int8_rows)
    : dim_(dim), int8_rows_(int8_rows), optimizer_(optimizer) {
  TZREC_CHECK(dim > 0);
  TZREC_CHECK(!int8_rows || !optimizer, "INT8 embedding storages are for inference only");
  row_width_ = dim + (optimizer ? optimizer->spec().StateWidth(dim) : 0);
}

EmbeddingTable* EmbeddingStorage::AddTable(const std::string& name, int64_t rows, bool trainable) {
  TZREC_CHECK(!data_.defined(), "table added after allocation");
  TZREC_CHECK(rows >= 0, "table ", name);  // 0: a table_wise table held by another rank
  tables_.push_back(std::make_unique<EmbeddingTable>(this, name, total_rows_, rows, trainable));
  total_rows_ += rows;
  return tables_.back().get();
}

void EmbeddingStorage::Allocate(bool initialize) {
  if (int8_rows_) {
    data_ = at::zeros({total_rows_, dim_ + 4}, at::TensorOptions().dtype(at::kByte));
    if (!initialize) return;
    for (const auto& table : tables_) InitializeTable(table.get(), table->rows(), dim_, 0, 0);
    return;
  }
  data_ = at::empty({total_rows_, row_width_}, at::TensorOptions().dtype(at::kFloat));
  if (row_width_ > dim_) {
    data_.narrow(1, dim_, row_width_ - dim_).fill_(optimizer_->spec().InitialState());
  }
  if (!initialize) return;
  for (const auto& table : tables_) InitializeTable(table.get(), table->rows(), dim_, 0, 0);
}

void EmbeddingStorage::InitializeTable(EmbeddingTable* table, int64_t logical_rows, int logical_dim,
                                       int64_t row_begin, int column_begin) {
  const double bound = std::sqrt(1.0 / static_cast<double>(std::max<int64_t>(1, logical_rows)));
  if (int8_rows_) {
    TZREC_CHECK(logical_rows == table->rows() && logical_dim == dim_, "sharded INT8 table");
    at::Tensor drawn = at::empty({table->rows(), dim_}, at::kFloat).uniform_(-bound, bound);
    table->stored().copy_(QuantizeTable(drawn, TableDtype::kINT8));
    return;
  }
  if (logical_rows == table->rows() && logical_dim == dim_) {
    table->weight().uniform_(-bound, bound);
    return;
  }
  // A shard: draw the whole logical table's random stream (in chunks, so memory stays small)
  // and keep this rank's block, so every rank's part equals what one process would draw.
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 22) / std::max(1, logical_dim));
  const int64_t row_end = row_begin + table->rows();
  at::Tensor weight = table->weight();
  for (int64_t start = 0; start < logical_rows; start += chunk) {
    const int64_t n = std::min(chunk, logical_rows - start);
    at::Tensor drawn = at::empty({n, logical_dim}, at::kFloat).uniform_(-bound, bound);
    const int64_t lo = std::max(start, row_begin), hi = std::min(start + n, row_end);
    if (lo >= hi) continue;
    weight.narrow(0, lo - row_begin, hi - lo)
        .copy_(drawn.narrow(0, lo - start, hi - lo).narrow(1, column_begin, dim_));
  }
}

int32_t* EmbeddingStorage::slots() {
  if (!slots_.defined()) slots_ = at::full({total_rows_}, -1, at::TensorOptions().dtype(at::kInt));
  return slots_.data_ptr<int32_t>();
}

}  // namespace tzrec
