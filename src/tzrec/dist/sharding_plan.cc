#include "tzrec/dist/sharding_plan.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/features/feature.h"
#include "tzrec/fg/feature_info.h"

namespace tzrec {
namespace {

const std::vector<std::string> kKnownShardingTypes = {
    "data_parallel", "table_wise", "column_wise", "row_wise", "table_row_wise",
    "table_column_wise", "grid_shard"};
const std::vector<std::string> kKnownKernels = {"dense", "fused", "fused_uvm", "fused_uvm_caching",
                                                "key_value"};

void CheckConstraints(const protos::ParameterConstraints& c, const std::string& where) {
  for (const auto& type : c.sharding_types()) {
    if (std::find(kKnownShardingTypes.begin(), kKnownShardingTypes.end(), type) ==
        kKnownShardingTypes.end()) {
      Fail(where, ".sharding_types: unknown sharding type '", type, "'; known: ",
           Join(kKnownShardingTypes, ", "));
    }
  }
  if (c.sharding_types_size() > 0 &&
      std::find(c.sharding_types().begin(), c.sharding_types().end(), "data_parallel") ==
          c.sharding_types().end()) {
    Fail(where, ".sharding_types: [", Join({c.sharding_types().begin(), c.sharding_types().end()}, ", "),
         "]: not supported yet (only data_parallel is implemented; table_wise, row_wise and "
         "column_wise sharding are planned)");
  }
  for (const auto& kernel : c.compute_kernels()) {
    if (std::find(kKnownKernels.begin(), kKnownKernels.end(), kernel) == kKnownKernels.end()) {
      Fail(where, ".compute_kernels: unknown compute kernel '", kernel, "'; known: ",
           Join(kKnownKernels, ", "));
    }
  }
  if (c.compute_kernels_size() > 0 &&
      std::find(c.compute_kernels().begin(), c.compute_kernels().end(), "fused") ==
          c.compute_kernels().end()) {
    Fail(where, ".compute_kernels: [", Join({c.compute_kernels().begin(), c.compute_kernels().end()}, ", "),
         "]: not supported yet (tables use the fused CPU kernel)");
  }
}

}  // namespace

std::vector<TablePlan> PlanSharding(const protos::EasyRecConfig& config,
                                    const std::vector<const Feature*>& features, int world_size) {
  if (config.train_config().has_global_embedding_constraints()) {
    CheckConstraints(config.train_config().global_embedding_constraints(),
                     "train_config.global_embedding_constraints");
  }
  // Per-feature constraints, by feature name.
  for (const fg::FeatureInfo& info :
       fg::DescribeFeatures(config.feature_configs(), config.data_config().fg_mode())) {
    const auto* field = info.config->GetDescriptor()->FindFieldByName("embedding_constraints");
    if (!field || !info.config->GetReflection()->HasField(*info.config, field)) continue;
    const auto& constraints = static_cast<const protos::ParameterConstraints&>(
        info.config->GetReflection()->GetMessage(*info.config, field));
    CheckConstraints(constraints, info.config_path + ".embedding_constraints");
  }
  std::map<std::string, TablePlan> tables;
  for (const Feature* f : features) {
    if (!f->is_sparse()) continue;
    TablePlan& plan = tables[f->embedding_name()];
    plan.table = f->embedding_name();
    plan.rows = f->num_embeddings();
    plan.dim = f->embedding_dim();
  }
  std::vector<TablePlan> out;
  for (auto& kv : tables) {
    for (int r = 0; r < world_size; ++r) kv.second.ranks.push_back(r);
    out.push_back(kv.second);
  }
  return out;
}

std::string PlanToJson(const std::vector<TablePlan>& plan) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const TablePlan& t : plan) {
    json[t.table] = {{"sharding_type", t.sharding_type}, {"compute_kernel", t.compute_kernel},
                     {"rows", t.rows}, {"dim", t.dim}, {"ranks", t.ranks}};
  }
  return json.dump(2) + "\n";
}

}  // namespace tzrec
