// Model-parallel placement of one embedding table across ranks, and the collectives the
// sharded lookup needs (implemented over c10d in dist/; abstract here so the embedding engine
// does not depend on the process group).
//
//   table_wise   the whole table lives on one rank (`owner`)
//   row_wise     rank r holds rows r, r + world, r + 2 world, ... (local row l is logical row
//                l * world + r). Interleaved rather than TorchRec's contiguous blocks: raw ids
//                are often skewed to small values (num_buckets features), and contiguous blocks
//                then put nearly every hot row, and so most of the pooling and updates, on rank
//                0 while the others wait at the exchanges. Checkpoints hold logical tables, so
//                the layout is not visible outside a running job.
//   column_wise  rank r holds columns [dim * r / world, dim * (r + 1) / world) of every row
// A sharded table is allocated as its local part only (sharded_lookup.h moves ids and pooled
// values between ranks).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tzrec {

class ShardComm {
 public:
  virtual ~ShardComm() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // How many rows each rank sends here, given how many this rank sends to each.
  virtual std::vector<int64_t> ExchangeCounts(const std::vector<int64_t>& send_counts) = 0;
  // Rows of `input` split by `send_counts` go to each rank; returns the received rows.
  virtual at::Tensor AllToAll(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                              const std::vector<int64_t>& recv_counts) = 0;
  // Every rank's `input` (same shape on all ranks) concatenated along dim 0.
  virtual at::Tensor AllGather(const at::Tensor& input) = 0;
};

struct TableShard {
  enum class Type { kDataParallel, kTableWise, kRowWise, kColumnWise };
  Type type = Type::kDataParallel;
  int64_t rows = 0;  // logical
  int dim = 0;       // logical
  int world_size = 1;
  int rank = 0;
  int owner = 0;  // table_wise

  bool sharded() const { return type != Type::kDataParallel; }
  // Rank r's local row l is logical row row_offset(r) + l * row_step(), for l < local_rows(r).
  int64_t row_offset(int r) const;
  int64_t row_step() const { return type == Type::kRowWise ? world_size : 1; }
  int64_t local_rows(int r) const;
  int column_begin(int r) const;
  int column_end(int r) const;
  int local_dim(int r) const { return column_end(r) - column_begin(r); }
  // The rank holding logical row `row` (>= 0; table_wise / row_wise; any rank holds it
  // otherwise), and its row there. Inline, and a mask and shift for a power-of-two world: the
  // sharded exchange calls these for every id of every step.
  int OwnerOfRow(int64_t row) const {
    if (type == Type::kTableWise) return owner;
    if (type != Type::kRowWise) return rank;
    return PowerOfTwoWorld() ? static_cast<int>(row & (world_size - 1)) : static_cast<int>(row % world_size);
  }
  int64_t LocalRow(int64_t row) const {
    if (type != Type::kRowWise) return row;
    return PowerOfTwoWorld() ? row >> __builtin_ctz(static_cast<unsigned>(world_size)) : row / world_size;
  }
  // The rows of a logical table (dim 0 of `logical`) that rank r holds, as a strided view.
  at::Tensor RowsOf(int r, const at::Tensor& logical) const;

  static Type ParseType(const std::string& name);
  bool PowerOfTwoWorld() const { return (world_size & (world_size - 1)) == 0; }
  static const char* TypeName(Type type);
};

}  // namespace tzrec
