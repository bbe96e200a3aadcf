// Pooled (and sequence) lookups of one model-parallel (table_wise / row_wise / column_wise) table.
//
// Forward: each rank sends, per (lookup, bag), the ids it needs to the ranks holding their rows
// (alltoall); those ranks pool their rows with the fused kernel and send the partial sums back
// (alltoall); row-wise partials are added, column-wise ones placed side by side, mean pooling
// divides by the bag length at the end. Backward sends each (lookup, bag) gradient to the same
// ranks, which run the fused backward + optimizer on their rows: one update per row over the
// whole global batch, as one process would do. Every rank must call this for the same tables
// in the same order (collectives).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/embedding/fused_lookup.h"
#include "tzrec/embedding/table_shard.h"

namespace tzrec {

// `storage` holds only this rank's part of the table (its one table); `lookups` index the
// logical table. Returns [bags, L * shard.dim].
// Pooled and sequence lookups of the table together (see StorageLookup for the outputs), so a
// row reached by both is updated once per step.
std::vector<at::Tensor> ShardedLookup(EmbeddingStorage* storage, const TableShard& shard,
                                      ShardComm* comm, const std::vector<LookupTensors>& pooled,
                                      const std::vector<LookupTensors>& sequences, int64_t bags,
                                      bool training);
at::Tensor ShardedPooledLookup(EmbeddingStorage* storage, const TableShard& shard, ShardComm* comm,
                               const std::vector<LookupTensors>& lookups, int64_t bags,
                               bool training);

}  // namespace tzrec
