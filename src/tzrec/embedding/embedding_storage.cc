#include "tzrec/embedding/embedding_storage.h"

#include <ATen/ops/empty.h>

#include <cmath>

#include "tzrec/common/error.h"

namespace tzrec {

int EmbeddingTable::dim() const { return storage_->dim(); }

at::Tensor EmbeddingTable::weight() const {
  return storage_->tensor().narrow(0, first_row_, rows_).narrow(1, 0, storage_->dim());
}

std::vector<std::pair<std::string, at::Tensor>> EmbeddingTable::optimizer_state() const {
  std::vector<std::pair<std::string, at::Tensor>> state;
  at::Tensor rows = storage_->tensor().narrow(0, first_row_, rows_);
  for (const auto& slice : storage_->optimizer().spec().StateSlices(storage_->dim())) {
    state.emplace_back(slice.name, rows.narrow(1, storage_->dim() + slice.offset, slice.width));
  }
  return state;
}

EmbeddingStorage::EmbeddingStorage(int dim, const SparseOptimizer* optimizer)
    : dim_(dim), optimizer_(optimizer) {
  TZREC_CHECK(dim > 0);
  row_width_ = dim + optimizer->spec().StateWidth(dim);
}

EmbeddingTable* EmbeddingStorage::AddTable(const std::string& name, int64_t rows, bool trainable) {
  TZREC_CHECK(!data_.defined(), "table added after allocation");
  TZREC_CHECK(rows > 0, "table ", name);
  tables_.push_back(std::make_unique<EmbeddingTable>(this, name, total_rows_, rows, trainable));
  total_rows_ += rows;
  return tables_.back().get();
}

void EmbeddingStorage::Allocate() {
  data_ = at::empty({total_rows_, row_width_}, at::TensorOptions().dtype(at::kFloat));
  if (row_width_ > dim_) {
    data_.narrow(1, dim_, row_width_ - dim_).fill_(optimizer_->spec().InitialState());
  }
  for (const auto& table : tables_) {
    const double bound = std::sqrt(1.0 / static_cast<double>(table->rows()));
    table->weight().uniform_(-bound, bound);
  }
}

int32_t* EmbeddingStorage::slots() {
  if (slots_.empty()) slots_.assign(total_rows_, -1);
  return slots_.data();
}

}  // namespace tzrec
