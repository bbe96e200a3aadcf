// Fused embedding storage: all tables of one embedding dim in one buffer, optimizer state
// beside each row.
//
// Row r of the storage is [weight(dim) | optimizer state(StateWidth(dim))], so the backward
// update of a row touches one contiguous block (one cache-miss chain instead of two). Tables
// are row ranges; EmbeddingTable is a named handle onto its range, whose weight and state
// are strided views (for checkpoints and tests).
//
// Row formats: fp32 (the default); FP16 and BF16 (`data_type: FP16` / `BF16` tables: the
// weights as IEEE halves or bfloat16s packed into the first HalfWeightFloats(dim) floats of
// the row, the optimizer state fp32 after them, so a row of dim 16 with row-wise Adagrad is
// 36 bytes instead of 68); INT8 row-wise (inference only, table_quantization.h).
//
// A hash-stored table (tables bigger than memory) keeps its declared row range but hands its
// rows out in order of first touch through an id -> row map (HashRowIndex): lookups translate
// ids to rows first (SlotsOf), so the kernels are the same, and a storage holding one is a
// lazily-zeroed mapping whose untouched rows take no memory. Initial values come from
// row_init.h, so a hash-stored table trains exactly as a dense one on the same ids.
//
// A managed table (dynamicemb) also lives in lazily-zeroed memory, but its owner maps ids to
// rows and hands them out: it initialises rows as it admits ids (InitializeRows, FillRows)
// and tells the storage how many are in use (SetResidentRows).
//
// Thread safety: one model uses a storage at a time (kernels parallelise internally), except
// SlotsOf, which may run concurrently (inference workers).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/embedding/hash_row_index.h"
#include "tzrec/embedding/row_init.h"
#include "tzrec/embedding/sparse_optimizer.h"
#include "tzrec/kernels/cpu_kernels.h"

namespace tzrec {

class EmbeddingStorage;

class EmbeddingTable {
 public:
  EmbeddingTable(EmbeddingStorage* storage, std::string name, int64_t first_row, int64_t rows,
                 bool trainable, bool hashed, bool managed = false)
      : storage_(storage), name_(std::move(name)), first_row_(first_row), rows_(rows),
        trainable_(trainable), managed_(managed),
        index_(hashed ? std::make_unique<HashRowIndex>() : nullptr) {}
  const std::string& name() const { return name_; }
  // Declared rows (ids are in [0, rows)); a hash-stored table holds resident_rows() of them.
  int64_t rows() const { return rows_; }
  bool hashed() const { return index_ != nullptr; }
  // Rows handed out by the table's owner (dynamicemb): [0, resident_rows()) are in use.
  bool managed() const { return managed_; }
  int64_t resident_rows() const;
  // Hash-stored tables: the id of each resident row, in row order (a copy, taken locked).
  std::vector<int64_t> resident_ids() const;
  // How the table's rows are initialised, and where this table sits in its logical table
  // (a shard's rows and first column, table_shard.h); set by EmbeddingStorage::InitializeTable.
  const RowInit& row_init() const { return row_init_; }
  // Row `row` of this table is logical row logical_row_offset() + row * logical_row_step().
  int64_t logical_row_offset() const { return logical_row_offset_; }
  int64_t logical_row_step() const { return logical_row_step_; }
  int64_t LogicalRow(int64_t row) const { return logical_row_offset_ + row * logical_row_step_; }
  int logical_column_begin() const { return logical_column_begin_; }
  int64_t first_row() const { return first_row_; }
  int dim() const;
  bool trainable() const { return trainable_; }
  EmbeddingStorage* storage() const { return storage_; }
  // [rows, dim] fp32 weights: a writable view for fp32 storages, a copy for FP16 / BF16 ones
  // (not for INT8 ones). Hash-stored tables: the resident rows, [resident_rows(), dim] in row order
  // (ids: resident_ids()).
  at::Tensor weight() const;
  // The weights as stored (writable view): weight() for fp32 storages, half / bfloat16
  // [rows, dim] for FP16 / BF16 ones, uint8 [rows, dim + 4] for INT8 ones.
  at::Tensor stored() const;
  // Named optimizer state views, e.g. {"sum": [rows, dim]} for adagrad.
  std::vector<std::pair<std::string, at::Tensor>> optimizer_state() const;

 private:
  EmbeddingStorage* storage_;
  std::string name_;
  int64_t first_row_;
  int64_t rows_;
  bool trainable_;
  bool managed_;
  int64_t managed_rows_ = 0;
  RowInit row_init_;
  int64_t logical_row_offset_ = 0;
  int64_t logical_row_step_ = 1;
  int logical_column_begin_ = 0;
  std::unique_ptr<HashRowIndex> index_;  // hash-stored tables only
  mutable std::mutex index_mutex_;
  friend class EmbeddingStorage;
};

enum class RowFormat { kFloat32, kFloat16, kBFloat16, kInt8 };

class EmbeddingStorage {
 public:
  // `optimizer` may be null (inference): rows then hold weights only. kFloat16 / kBFloat16:
  // 2-byte weights, fp32 state (see above). kInt8 (inference only): rows are INT8 row-wise
  // (table_quantization.h: dim codes, fp16 scale, fp16 bias), a third of the fp32 bytes;
  // lookups dequantise on the fly.
  EmbeddingStorage(int dim, const SparseOptimizer* optimizer, RowFormat format = RowFormat::kFloat32);

  // Adds a table before Allocate(); rows are initialised uniform in +-sqrt(1/rows)
  // (TorchRec's default bound) by row_init.h. `hashed`: rows allocated on first touch.
  // `managed`: rows handed out by the caller (dynamicemb), initialised through InitializeRows.
  EmbeddingTable* AddTable(const std::string& name, int64_t rows, bool trainable, bool hashed = false,
                           bool managed = false);
  // With `initialize`, every table is initialised here (in table order).
  void Allocate(bool initialize = true);
  // Initialises `table` as rows row_offset, row_offset + row_step, ... x columns
  // [column_begin, +dim) of a logical table of logical_rows x logical_dim (a shard: the same
  // values one process holds). A hash-stored table only records how: its rows are initialised
  // when first touched.
  void InitializeTable(EmbeddingTable* table, int64_t logical_rows, int logical_dim, int64_t row_offset,
                       int64_t row_step, int column_begin);

  // Re-initialises rows `rows` (this storage's rows of dense `table`) as new ones: initial
  // weights, fresh optimizer state (zch rows that changed ids).
  void ResetRows(EmbeddingTable* table, const std::vector<int64_t>& rows);
  // Managed tables: replaces how rows are initialised (before any InitializeRows).
  void SetRowInit(EmbeddingTable* table, const RowInit& init);
  // Managed tables: rows `rows` get the initial values of logical rows `keys` (their ids) and
  // fresh optimizer state; FillRows writes `value` everywhere in the rows instead.
  void InitializeRows(EmbeddingTable* table, const std::vector<int64_t>& rows, const std::vector<int64_t>& keys);
  void FillRows(EmbeddingTable* table, const std::vector<int64_t>& rows, float value);
  // Managed tables: rows [0, n) are in use (weight(), checkpoints and memory counts see them).
  void SetResidentRows(EmbeddingTable* table, int64_t n);

  bool has_hashed_tables() const { return hashed_tables_ > 0; }
  // Rows of `ids` (int64, local to the table) for the kernels: the ids themselves for a dense
  // table; for a hash-stored one its rows, an unseen id getting a new, initialised row. An id
  // outside [0, rows) is an error naming the table. Thread-safe.
  at::Tensor SlotsOf(EmbeddingTable* table, const at::Tensor& ids);
  // Storage rows (first_row + row) <-> logical rows (first_row + id) of hash-stored tables,
  // in place; rows of dense tables are both already. For exchanges between ranks, whose
  // hash-stored tables hand out rows in different orders. IdRowsToSlotRows inserts unseen ids.
  void SlotRowsToIdRows(at::Tensor* rows) const;
  void IdRowsToSlotRows(at::Tensor* rows);
  // Replaces the seed of `table`'s initial values (an export records the seed training used,
  // so serving gives never-trained ids the values a dense table would have held).
  void SetRowInitSeed(EmbeddingTable* table, uint64_t seed);
  // Initialises a dense `table` again from its RowInit (after SetRowInitSeed); optimizer
  // state back to its initial value.
  void ReinitializeTable(EmbeddingTable* table);
  // Forgets every row of hash-stored `table` (a restore refills it through SlotsOf).
  void ClearHashedTable(EmbeddingTable* table);
  // Saved weights in the form stored() holds: fp32 [n, dim] weights are quantised for an
  // INT8 storage and rounded to nearest (even) for an FP16 / BF16 one; anything else is
  // returned as is.
  at::Tensor StoredForm(const at::Tensor& weights) const;
  // Bytes the tables use now: all rows of dense tables, resident rows of hash-stored ones
  // (with optimizer state and the backward's 4-byte slot).
  int64_t resident_bytes() const;

  int dim() const { return dim_; }
  // Floats per row (fp32, FP16 and BF16 storages).
  int row_width() const { return row_width_; }
  // Float offset of the optimizer state in a row: dim, or HalfWeightFloats(dim) for 2-byte rows.
  int state_offset() const { return state_offset_; }
  int64_t total_rows() const { return total_rows_; }
  float* data() {
    TZREC_CHECK(!int8_rows_, "float access to an INT8 embedding storage");
    return data_.data_ptr<float>();
  }
  bool int8_rows() const { return int8_rows_; }
  RowFormat row_format() const { return format_; }
  // FP16 or BF16 rows: 2-byte weights of half_type().
  bool half_rows() const { return format_ == RowFormat::kFloat16 || format_ == RowFormat::kBFloat16; }
  at::ScalarType half_type() const { return format_ == RowFormat::kBFloat16 ? at::kBFloat16 : at::kHalf; }
  const uint8_t* int8_data() const { return data_.data_ptr<uint8_t>(); }
  // Bytes per stored row.
  int64_t row_bytes() const { return int8_rows_ ? dim_ + 4 : int64_t{4} * row_width_; }
  const at::Tensor& tensor() const { return data_; }
  // Storages built for inference (evaluation, predict, serving) carry no optimizer state.
  bool has_optimizer() const { return optimizer_ != nullptr; }
  const SparseOptimizer& optimizer() const {
    TZREC_CHECK(optimizer_ != nullptr, "embedding storage without optimizer state");
    return *optimizer_;
  }
  const std::vector<std::unique_ptr<EmbeddingTable>>& tables() const { return tables_; }
  // Scratch map row -> unique slot (-1 when free) used by the backward de-duplication.
  int32_t* slots();
  // Per-partition scratch of the fused backward, kept between steps (see cpu_kernels.h).
  struct BackwardScratch {
    std::vector<int64_t> unique_rows;
    std::vector<float> grad_sums;
    std::vector<PartitionEntry> entries;  // with several partitions
    // Paired backwards (a companion storage's rows updated in the same pass, CompanionRows).
    std::vector<PairedPartitionEntry> paired_entries;
    std::vector<int64_t> companion_rows;
    std::vector<float> companion_sums;
  };
  // Row gradients kept by backwards while the optimizer defers updates (gradient
  // accumulation): (rows int64 [n], summed gradients float [n, dim]) per backward.
  std::vector<std::pair<at::Tensor, at::Tensor>>& deferred_gradients() { return deferred_; }
  const std::vector<std::pair<at::Tensor, at::Tensor>>& deferred_gradients() const { return deferred_; }
  std::vector<BackwardScratch>& backward_scratch(int64_t parts) {
    if (static_cast<int64_t>(backward_scratch_.size()) < parts) backward_scratch_.resize(parts);
    return backward_scratch_;
  }

 private:
  int dim_;
  int row_width_;
  int state_offset_;
  RowFormat format_;
  bool int8_rows_ = false;
  const SparseOptimizer* optimizer_;
  int64_t total_rows_ = 0;
  std::vector<std::unique_ptr<EmbeddingTable>> tables_;
  int hashed_tables_ = 0;
  int managed_tables_ = 0;
  // Per table: the positions in `rows` (storage rows) that fall into it, for hash-stored tables.
  std::vector<std::vector<int64_t>> HashedRowPositions(const at::Tensor& rows) const;
  // Writes the initial weights, optimizer state and free backward slot of table rows
  // [first_row + slots[i]] for logical rows `logical[i]`.
  void InitializeRowsAt(const EmbeddingTable& table, const std::vector<int64_t>& slots,
                        const std::vector<int64_t>& logical, const RowInit* init = nullptr);
  // Initial weights of dense `table` (fp32 or 2-byte rows: rounded to nearest even, as
  // TorchRec's initial values are), as the table's logical rows and columns.
  void InitializeWeights(const EmbeddingTable& table);
  // Fresh optimizer state in `n` rows from first_row.
  void ResetStateRange(int64_t first_row, int64_t n);
  at::Tensor data_;
  // 64-byte aligned (a c10 allocation), so the 16-entry blocks the backward partitions by
  // are whole cache lines (malloc aligns to 16 bytes only, so a block could straddle the
  // line of another thread's block). Measured: no change in the 2-thread backward here.
  at::Tensor slots_;
  std::vector<BackwardScratch> backward_scratch_;
  std::vector<std::pair<at::Tensor, at::Tensor>> deferred_;
};

}  // namespace tzrec
