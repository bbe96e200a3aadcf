// Where each embedding table lives in a distributed job (the sharding plan), decided from
// table sizes and the `embedding_constraints` of features / train_config's
// `global_embedding_constraints` (sharding_types, compute_kernels), as TorchRec's planner
// does for TorchEasyRec. No LibTorch.
//
// Implemented sharding: data_parallel (every rank holds the whole table; gradients are merged
// over ranks, see data_parallel.h). table_wise / row_wise / column_wise are planned; a
// constraint that excludes data_parallel fails with "not supported yet" naming the field.
// The plan is logged at start and saved as `plan.json` in every checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tzrec/protos/pipeline.pb.h"

namespace tzrec {

class Feature;

struct TablePlan {
  std::string table;
  int64_t rows = 0;
  int dim = 0;
  std::string sharding_type = "data_parallel";
  std::string compute_kernel = "fused";
  std::vector<int> ranks;  // ranks holding (a part of) the table
};

// `features` are the model's features (their embedding_name picks the table).
std::vector<TablePlan> PlanSharding(const protos::EasyRecConfig& config,
                                    const std::vector<const Feature*>& features, int world_size);

std::string PlanToJson(const std::vector<TablePlan>& plan);

}  // namespace tzrec
