#include "tzrec/embedding/embedding_storage.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tzrec/common/error.h"
#include "tzrec/embedding/table_quantization.h"

namespace tzrec {
namespace {

// A zero-filled tensor whose pages are only backed by memory once written: an anonymous
// private mapping without swap reservation. Storages with hash-stored tables use it, so a
// table's declared rows cost address space only and its memory follows the rows handed out.
at::Tensor LazilyZeroedTensor(at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t bytes = static_cast<int64_t>(c10::elementSize(dtype));
  for (int64_t s : sizes) bytes *= s;
  const size_t length = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  void* memory = mmap(nullptr, length, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) {
    Fail("cannot reserve ", bytes >> 20, " MiB of address space for a hash-stored embedding storage: ",
         std::strerror(errno));
  }
  return at::from_blob(memory, sizes, [length](void* p) { munmap(p, length); },
                       at::TensorOptions().dtype(dtype));
}

// Memory of a storage's rows, on transparent huge pages where the kernel allows them. Lookups
// and updates touch rows at random: with 4 KiB pages nearly every access to a table beyond the
// TLB's reach (a few MiB) misses it, and a miss is a two-level page walk under virtualisation;
// 2 MiB pages cover a 128 MiB table with 64 TLB entries (measured, 26 lookups x 4096 bags on a
// 10M-row table: forward 3.9 -> 2.4 ms, backward+Adagrad 6.9 -> 4.1 ms; ~7% on a 1M-row one).
// Debian's default THP mode is "madvise", so the region asks for them; where THP is off this is
// the same memory on small pages. TZREC_HUGE_PAGES=0 keeps small pages. Zero-filled.
bool HugePagesWanted() {
  static const bool wanted = [] {
    const char* flag = std::getenv("TZREC_HUGE_PAGES");
    return !(flag && std::strcmp(flag, "0") == 0);
  }();
  return wanted;
}

at::Tensor RowMemory(at::IntArrayRef sizes, at::ScalarType dtype) {
  constexpr size_t kHugePage = size_t{2} << 20;
  int64_t bytes = static_cast<int64_t>(c10::elementSize(dtype));
  for (int64_t s : sizes) bytes *= s;
  if (bytes < static_cast<int64_t>(kHugePage) || !HugePagesWanted()) {
    return at::zeros(sizes, at::TensorOptions().dtype(dtype));
  }
  const size_t used = (static_cast<size_t>(bytes) + kHugePage - 1) / kHugePage * kHugePage;
  const size_t length = used + kHugePage;  // room to align the start to a huge page
  void* raw = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    Fail("cannot allocate ", bytes >> 20, " MiB for embedding rows: ", std::strerror(errno));
  }
  const uintptr_t start = (reinterpret_cast<uintptr_t>(raw) + kHugePage - 1) / kHugePage * kHugePage;
  void* aligned = reinterpret_cast<void*>(start);
  madvise(aligned, used, MADV_HUGEPAGE);  // refused where THP is off: small pages then
  return at::from_blob(aligned, sizes, [raw, length](void*) { munmap(raw, length); },
                       at::TensorOptions().dtype(dtype));
}

}  // namespace

int EmbeddingTable::dim() const { return storage_->dim(); }

int64_t EmbeddingTable::resident_rows() const {
  if (managed_) return managed_rows_;
  if (!index_) return rows_;
  std::lock_guard<std::mutex> lock(index_mutex_);
  return index_->size();
}

std::vector<int64_t> EmbeddingTable::resident_ids() const {
  TZREC_CHECK(index_ != nullptr, "table '", name_, "' is not hash-stored");
  std::lock_guard<std::mutex> lock(index_mutex_);
  return index_->ids();
}

at::Tensor EmbeddingTable::weight() const {
  TZREC_CHECK(!storage_->int8_rows(), "table '", name_, "' is stored INT8: read stored()");
  if (storage_->half_rows()) return stored().to(at::kFloat);
  return storage_->tensor().narrow(0, first_row_, resident_rows()).narrow(1, 0, storage_->dim());
}

at::Tensor EmbeddingTable::stored() const {
  at::Tensor rows = storage_->tensor().narrow(0, first_row_, resident_rows());
  if (storage_->int8_rows()) return rows;
  if (storage_->half_rows()) {
    // The packed 2-byte weights of each row, reinterpreted in place.
    return rows.narrow(1, 0, storage_->state_offset()).view(storage_->half_type()).narrow(1, 0, storage_->dim());
  }
  return rows.narrow(1, 0, storage_->dim());
}

std::vector<std::pair<std::string, at::Tensor>> EmbeddingTable::optimizer_state() const {
  std::vector<std::pair<std::string, at::Tensor>> state;
  if (!storage_->has_optimizer()) return state;
  at::Tensor rows = storage_->tensor().narrow(0, first_row_, resident_rows());
  for (const auto& slice : storage_->optimizer().spec().StateSlices(storage_->dim())) {
    state.emplace_back(slice.name, rows.narrow(1, storage_->state_offset() + slice.offset, slice.width));
  }
  return state;
}

EmbeddingStorage::EmbeddingStorage(int dim, const SparseOptimizer* optimizer, RowFormat format)
    : dim_(dim), format_(format), int8_rows_(format == RowFormat::kInt8), optimizer_(optimizer) {
  TZREC_CHECK(dim > 0);
  TZREC_CHECK(!int8_rows_ || !optimizer, "INT8 embedding storages are for inference only");
  state_offset_ = half_rows() ? HalfWeightFloats(dim) : dim;
  row_width_ = state_offset_ + (optimizer ? optimizer->spec().StateWidth(dim) : 0);
}

EmbeddingTable* EmbeddingStorage::AddTable(const std::string& name, int64_t rows, bool trainable,
                                           bool hashed, bool managed) {
  TZREC_CHECK(!data_.defined(), "table added after allocation");
  TZREC_CHECK(rows >= 0, "table ", name);  // 0: a table_wise table held by another rank
  TZREC_CHECK(!(hashed && managed), "table ", name);
  tables_.push_back(std::make_unique<EmbeddingTable>(this, name, total_rows_, rows, trainable, hashed, managed));
  total_rows_ += rows;
  hashed_tables_ += hashed ? 1 : 0;
  managed_tables_ += managed ? 1 : 0;
  return tables_.back().get();
}

void EmbeddingStorage::Allocate(bool initialize) {
  const bool lazy = has_hashed_tables() || managed_tables_ > 0;
  const at::ScalarType dtype = int8_rows_ ? at::kByte : at::kFloat;
  const int64_t width = int8_rows_ ? dim_ + 4 : row_width_;
  if (lazy) {
    data_ = LazilyZeroedTensor({total_rows_, width}, dtype);
    if (optimizer_) slots_ = LazilyZeroedTensor({total_rows_}, at::kInt);
  } else {
    data_ = RowMemory({total_rows_, width}, dtype);
  }
  // Dense tables' state and backward slots now; hash-stored and managed rows' when handed out.
  for (const auto& table : tables_) {
    if (table->hashed() || table->managed()) continue;
    if (!int8_rows_) ResetStateRange(table->first_row(), table->rows());
    if (slots_.defined()) slots_.narrow(0, table->first_row(), table->rows()).fill_(-1);
  }
  if (!initialize) return;
  for (const auto& table : tables_) InitializeTable(table.get(), table->rows(), dim_, 0, 1, 0);
}

void EmbeddingStorage::InitializeTable(EmbeddingTable* table, int64_t logical_rows, int logical_dim,
                                       int64_t row_offset, int64_t row_step, int column_begin) {
  table->row_init_ = RowInit::ForTable(table->name(), logical_rows);
  table->logical_row_offset_ = row_offset;
  table->logical_row_step_ = row_step;
  table->logical_column_begin_ = column_begin;
  TZREC_CHECK(column_begin + dim_ <= logical_dim, "table '", table->name(), "' shard columns");
  if (table->hashed() || table->managed()) return;
  if (int8_rows_) {
    TZREC_CHECK(logical_rows == table->rows() && logical_dim == dim_, "sharded INT8 table");
    at::Tensor drawn = at::empty({table->rows(), dim_}, at::kFloat);
    InitializeRowRange(table->row_init_, 0, 1, table->rows(), 0, dim_, drawn.data_ptr<float>(), dim_);
    table->stored().copy_(QuantizeTable(drawn, TableDtype::kINT8));
    return;
  }
  InitializeWeights(*table);
}

void EmbeddingStorage::InitializeWeights(const EmbeddingTable& table) {
  const int64_t step = table.logical_row_step_;
  const int column_begin = table.logical_column_begin_;
  if (!half_rows()) {
    InitializeRowRange(table.row_init_, table.logical_row_offset_, step, table.rows(), column_begin, dim_,
                       data() + table.first_row() * row_width_, row_width_);
    return;
  }
  // Drawn in fp32 a block at a time (a whole table's fp32 copy would double the memory that
  // 2-byte rows save), then rounded to nearest even into the rows.
  constexpr int64_t kBlock = 1 << 16;
  at::Tensor drawn = at::empty({std::min(kBlock, table.rows()), dim_}, at::kFloat);
  for (int64_t begin = 0; begin < table.rows(); begin += kBlock) {
    const int64_t n = std::min(kBlock, table.rows() - begin);
    InitializeRowRange(table.row_init_, table.LogicalRow(begin), step, n, column_begin, dim_,
                       drawn.data_ptr<float>(), dim_);
    at::Tensor halves = data_.narrow(0, table.first_row() + begin, n).narrow(1, 0, state_offset_).view(half_type());
    halves.narrow(1, 0, dim_).copy_(drawn.narrow(0, 0, n));
    if (dim_ % 2 == 1) halves.narrow(1, dim_, 1).zero_();  // the padding half, so rows are fully defined
  }
}

void EmbeddingStorage::ResetStateRange(int64_t first_row, int64_t n) {
  if (row_width_ == state_offset_ || n == 0) return;
  data_.narrow(0, first_row, n).narrow(1, state_offset_, row_width_ - state_offset_)
      .fill_(optimizer_->spec().InitialState());
}

void EmbeddingStorage::InitializeRowsAt(const EmbeddingTable& table, const std::vector<int64_t>& slots,
                                        const std::vector<int64_t>& logical, const RowInit* init) {
  const int64_t n = static_cast<int64_t>(slots.size());
  if (n == 0) return;
  at::Tensor drawn = at::empty({n, dim_}, at::kFloat);
  tzrec::InitializeRows(init ? *init : table.row_init_, logical.data(), n, table.logical_column_begin_, dim_,
                        drawn.data_ptr<float>(), dim_);
  if (int8_rows_) {
    const at::Tensor quantized = QuantizeTable(drawn, TableDtype::kINT8);
    for (int64_t i = 0; i < n; ++i) data_[table.first_row() + slots[i]].copy_(quantized[i]);
    return;
  }
  // Row by row in plain loops: hash-stored tables come here for every new id of a batch.
  float* base = data() + table.first_row() * row_width_;
  const float* src = drawn.data_ptr<float>();
  const float state = row_width_ > state_offset_ ? optimizer_->spec().InitialState() : 0.0f;
  int32_t* free_slots = slots_.defined() ? slots_.data_ptr<int32_t>() + table.first_row() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    float* row = base + slots[i] * row_width_;
    if (format_ == RowFormat::kFloat16) {
      c10::Half* half = reinterpret_cast<c10::Half*>(row);
      for (int d = 0; d < dim_; ++d) half[d] = c10::Half(src[i * dim_ + d]);  // round to nearest even
      if (dim_ % 2 == 1) half[dim_] = c10::Half(0.0f);
    } else if (format_ == RowFormat::kBFloat16) {
      c10::BFloat16* bf16 = reinterpret_cast<c10::BFloat16*>(row);
      for (int d = 0; d < dim_; ++d) bf16[d] = c10::BFloat16(src[i * dim_ + d]);  // round to nearest even
      if (dim_ % 2 == 1) bf16[dim_] = c10::BFloat16(0.0f);
    } else {
      std::memcpy(row, src + i * dim_, sizeof(float) * dim_);
    }
    std::fill(row + state_offset_, row + row_width_, state);
    if (free_slots) free_slots[slots[i]] = -1;
  }
}

void EmbeddingStorage::ResetRows(EmbeddingTable* table, const std::vector<int64_t>& rows) {
  TZREC_CHECK(table->storage() == this && !table->hashed(), "ResetRows of table '", table->name(), "'");
  TZREC_CHECK(data_.defined(), "ResetRows before allocation");
  std::vector<int64_t> logical(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    TZREC_CHECK(rows[i] >= 0 && rows[i] < table->rows(), "row ", rows[i], " of table '", table->name(), "'");
    logical[i] = table->LogicalRow(rows[i]);
  }
  InitializeRowsAt(*table, rows, logical);
}

void EmbeddingStorage::SetRowInit(EmbeddingTable* table, const RowInit& init) {
  TZREC_CHECK(table->storage() == this && table->managed(), "SetRowInit of table '", table->name(), "'");
  table->row_init_ = init;
}

void EmbeddingStorage::InitializeRows(EmbeddingTable* table, const std::vector<int64_t>& rows,
                                      const std::vector<int64_t>& keys) {
  TZREC_CHECK(table->storage() == this && table->managed() && rows.size() == keys.size() && data_.defined(),
              "InitializeRows of table '", table->name(), "'");
  for (int64_t row : rows) TZREC_CHECK(row >= 0 && row < table->rows(), "row ", row, " of table '", table->name(), "'");
  InitializeRowsAt(*table, rows, keys);
}

void EmbeddingStorage::FillRows(EmbeddingTable* table, const std::vector<int64_t>& rows, float value) {
  TZREC_CHECK(table->storage() == this && data_.defined(), "FillRows of table '", table->name(), "'");
  for (int64_t row : rows) TZREC_CHECK(row >= 0 && row < table->rows(), "row ", row, " of table '", table->name(), "'");
  RowInit constant;
  constant.mode = RowInit::Mode::kConstant;
  constant.value = value;
  InitializeRowsAt(*table, rows, rows, &constant);
}

void EmbeddingStorage::SetResidentRows(EmbeddingTable* table, int64_t n) {
  TZREC_CHECK(table->storage() == this && table->managed() && n >= 0 && n <= table->rows(),
              "SetResidentRows of table '", table->name(), "'");
  table->managed_rows_ = n;
}

at::Tensor EmbeddingStorage::SlotsOf(EmbeddingTable* table, const at::Tensor& ids) {
  TZREC_CHECK(table->storage() == this);
  if (!table->hashed()) return ids;
  TZREC_CHECK(data_.defined(), "lookup before allocation");
  const at::Tensor in = ids.contiguous();
  const int64_t n = in.numel();
  at::Tensor out = at::empty({n}, at::TensorOptions().dtype(at::kLong));
  const int64_t* id = in.data_ptr<int64_t>();
  int64_t* slot = out.data_ptr<int64_t>();
  std::vector<int64_t> new_slots, new_logical;
  std::lock_guard<std::mutex> lock(table->index_mutex_);
  for (int64_t i = 0; i < n; ++i) {
    if (id[i] < 0 || id[i] >= table->rows()) {
      Fail("embedding id ", id[i], " out of range [0, ", table->rows(), ") of table '", table->name(), "'");
    }
    bool inserted = false;
    slot[i] = table->index_->FindOrInsert(id[i], &inserted);
    if (inserted) {
      new_slots.push_back(slot[i]);
      new_logical.push_back(table->LogicalRow(id[i]));
    }
  }
  // Written before the lock is released: another thread sees the row only once it is whole.
  InitializeRowsAt(*table, new_slots, new_logical);
  return out;
}

std::vector<std::vector<int64_t>> EmbeddingStorage::HashedRowPositions(const at::Tensor& rows) const {
  // One pass over the rows, bucketed by table (rows of a dense table are left out).
  std::vector<std::vector<int64_t>> positions(tables_.size());
  const int64_t* r = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < rows.numel(); ++i) {
    auto it = std::upper_bound(tables_.begin(), tables_.end(), r[i],
                               [](int64_t row, const std::unique_ptr<EmbeddingTable>& t) { return row < t->first_row(); });
    TZREC_CHECK(it != tables_.begin(), "storage row ", r[i]);
    const size_t k = static_cast<size_t>(it - tables_.begin()) - 1;
    if (tables_[k]->hashed()) positions[k].push_back(i);
  }
  return positions;
}

void EmbeddingStorage::SlotRowsToIdRows(at::Tensor* rows) const {
  if (!has_hashed_tables()) return;
  *rows = rows->contiguous();
  int64_t* r = rows->data_ptr<int64_t>();
  const std::vector<std::vector<int64_t>> positions = HashedRowPositions(*rows);
  for (size_t k = 0; k < tables_.size(); ++k) {
    if (positions[k].empty()) continue;
    const EmbeddingTable& table = *tables_[k];
    std::lock_guard<std::mutex> lock(table.index_mutex_);
    const std::vector<int64_t>& ids = table.index_->ids();
    for (int64_t i : positions[k]) r[i] = table.first_row() + ids[r[i] - table.first_row()];
  }
}

void EmbeddingStorage::IdRowsToSlotRows(at::Tensor* rows) {
  if (!has_hashed_tables()) return;
  *rows = rows->contiguous();
  int64_t* r = rows->data_ptr<int64_t>();
  const std::vector<std::vector<int64_t>> positions = HashedRowPositions(*rows);
  for (size_t k = 0; k < tables_.size(); ++k) {
    if (positions[k].empty()) continue;
    EmbeddingTable* table = tables_[k].get();
    std::vector<int64_t> ids;
    ids.reserve(positions[k].size());
    for (int64_t i : positions[k]) ids.push_back(r[i] - table->first_row());
    at::Tensor slots = SlotsOf(table, at::from_blob(ids.data(), {static_cast<int64_t>(ids.size())},
                                                    at::TensorOptions().dtype(at::kLong)));
    const int64_t* s = slots.data_ptr<int64_t>();
    for (size_t j = 0; j < positions[k].size(); ++j) r[positions[k][j]] = table->first_row() + s[j];
  }
}

void EmbeddingStorage::SetRowInitSeed(EmbeddingTable* table, uint64_t seed) {
  TZREC_CHECK(table->storage() == this);
  std::lock_guard<std::mutex> lock(table->index_mutex_);
  table->row_init_.seed = seed;
}

void EmbeddingStorage::ReinitializeTable(EmbeddingTable* table) {
  TZREC_CHECK(!table->hashed() && table->storage() == this);
  if (int8_rows_) {
    at::Tensor drawn = at::empty({table->rows(), dim_}, at::kFloat);
    InitializeRowRange(table->row_init_, table->logical_row_offset_, table->logical_row_step_, table->rows(),
                       table->logical_column_begin_, dim_, drawn.data_ptr<float>(), dim_);
    table->stored().copy_(QuantizeTable(drawn, TableDtype::kINT8));
    return;
  }
  InitializeWeights(*table);
  ResetStateRange(table->first_row(), table->rows());
}

void EmbeddingStorage::ClearHashedTable(EmbeddingTable* table) {
  TZREC_CHECK(table->hashed(), "table '", table->name(), "' is not hash-stored");
  std::lock_guard<std::mutex> lock(table->index_mutex_);
  table->index_->Clear();
}

at::Tensor EmbeddingStorage::StoredForm(const at::Tensor& weights) const {
  if (weights.scalar_type() != at::kFloat || weights.dim() != 2 || weights.size(1) != dim_) return weights;
  if (int8_rows_) return QuantizeTable(weights, TableDtype::kINT8);
  if (half_rows()) return weights.to(half_type());
  return weights;
}

int64_t EmbeddingStorage::resident_bytes() const {
  int64_t rows = 0;
  for (const auto& table : tables_) rows += table->resident_rows();
  return rows * (row_bytes() + (optimizer_ ? 4 : 0));
}

int32_t* EmbeddingStorage::slots() {
  if (!slots_.defined()) slots_ = RowMemory({total_rows_}, at::kInt).fill_(-1);
  return slots_.data_ptr<int32_t>();
}

}  // namespace tzrec
