// Where each embedding table lives in a distributed job (the sharding plan), decided from
// table sizes and the `embedding_constraints` of features / train_config's
// `global_embedding_constraints` (sharding_types, compute_kernels), as TorchRec's planner
// does for TorchEasyRec. No LibTorch.
//
// Sharding types: data_parallel (every rank holds the whole table; gradients merged over ranks,
// data_parallel.h), table_wise (one rank, tables spread by size), row_wise (row blocks) and
// column_wise (column slices), see embedding/table_shard.h. Without constraints a table is
// data_parallel; with them, the first allowed type in that order (TorchRec's planner would
// cost them; this rule is predictable). table_row_wise / table_column_wise / grid_shard fail
// with "not supported yet". The plan is logged at start and saved as `plan.json`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tzrec/embedding/embedding_collection.h"
#include "tzrec/embedding/table_shard.h"
#include "tzrec/protos/pipeline.pb.h"

namespace tzrec {


struct TablePlan {
  std::string table;
  int64_t rows = 0;
  int dim = 0;
  std::string sharding_type = "data_parallel";
  std::string compute_kernel = "fused";
  std::vector<int> ranks;  // ranks holding (a part of) the table
};

// `tables` are the model's tables (EmbeddingCollection::table_specs: DEEP and WIDE tables of the
// features its groups use); a table takes the constraints of the features looked up in it.
// When whole (data_parallel) tables would need more than `memory_budget_bytes` per rank (0: no
// limit; EmbeddingCollection::TableBytes with the sparse optimizer's state), the largest tables
// without constraints become row_wise until the rest fits.
std::vector<TablePlan> PlanSharding(const protos::EasyRecConfig& config,
                                    const std::vector<EmbeddingTableSpec>& tables, int world_size,
                                    int64_t memory_budget_bytes = 0);

std::string PlanToJson(const std::vector<TablePlan>& plan);

// This rank's placement of every model-parallel table of `plan` (data_parallel ones omitted).
std::map<std::string, TableShard> ShardsForRank(const std::vector<TablePlan>& plan, int rank,
                                                int world_size);

}  // namespace tzrec
