// Pooled (and sequence) lookups of the model-parallel (table_wise / row_wise / column_wise)
// tables, all of them in one exchange per direction.
//
// Forward: each rank sends, per (table, lookup, bag), the ids it needs to the ranks holding
// their rows; those ranks pool their rows with the fused kernel and send the partial sums back;
// row-wise partials are added, column-wise ones placed side by side, mean pooling divides by
// the bag length at the end. Backward sends each (table, lookup, bag) gradient to the same
// ranks, which run the fused backward + optimizer on their rows: one update per row over the
// whole global batch, as one process would do. The tables travel together, as TorchRec's
// sharding groups do: one all-to-all of the counts, one of the ids and bag lengths (and one of
// the weights when a table is weighted) and one of the partial sums forward, one of the
// gradients backward, however many tables there are (per-table exchanges made about six
// collectives per table per step). Every rank must pass the same tables in the same order.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/embedding/fused_lookup.h"
#include "tzrec/embedding/table_shard.h"

namespace tzrec {

// One sharded storage's lookups. `storage` holds only this rank's part of the table (its one
// table); the lookups index the logical table.
struct ShardedStorageLookups {
  EmbeddingStorage* storage = nullptr;
  const TableShard* shard = nullptr;
  std::vector<LookupTensors> pooled;
  std::vector<LookupTensors> sequences;
  int64_t bags = 0;
};

// Per entry of `tables`, as StorageLookup returns them: [bags, Lp * shard.dim] of the pooled
// lookups, then one [steps, dim] per sequence lookup. Pooled and sequence lookups of a table
// go together, so a row reached by both is updated once per step.
std::vector<std::vector<at::Tensor>> ShardedLookups(ShardComm* comm,
                                                    const std::vector<ShardedStorageLookups>& tables,
                                                    bool training);

}  // namespace tzrec
