#include "tzrec/dist/sharding_plan.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/fg/feature_info.h"

namespace tzrec {
namespace {

const std::vector<std::string> kKnownShardingTypes = {
    "data_parallel", "table_wise", "column_wise", "row_wise", "table_row_wise",
    "table_column_wise", "grid_shard"};
const std::vector<std::string> kKnownKernels = {"dense", "fused", "fused_uvm", "fused_uvm_caching",
                                                "key_value"};

const std::vector<std::string> kImplemented = {"data_parallel", "table_wise", "row_wise",
                                               "column_wise"};

// Checks a constraint and narrows `allowed` (sharding types) to what it permits.
void ApplyConstraints(const protos::ParameterConstraints& c, const std::string& where,
                      std::vector<std::string>* allowed) {
  for (const auto& type : c.sharding_types()) {
    if (std::find(kKnownShardingTypes.begin(), kKnownShardingTypes.end(), type) ==
        kKnownShardingTypes.end()) {
      Fail(where, ".sharding_types: unknown sharding type '", type, "'; known: ",
           Join(kKnownShardingTypes, ", "));
    }
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
  if (c.sharding_types_size() == 0) return;
  std::vector<std::string> kept;
  for (const auto& type : *allowed) {
    if (std::find(c.sharding_types().begin(), c.sharding_types().end(), type) != c.sharding_types().end()) {
      kept.push_back(type);
    }
  }
  if (kept.empty()) {
    Fail(where, ".sharding_types: [", Join({c.sharding_types().begin(), c.sharding_types().end()}, ", "),
         "]: not supported yet (implemented: ", Join(kImplemented, ", "),
         "; the table's other constraints may exclude the rest)");
  }
  *allowed = kept;
}

}  // namespace

std::vector<TablePlan> PlanSharding(const protos::EasyRecConfig& config,
                                    const std::vector<EmbeddingTableSpec>& specs, int world_size,
                                    int64_t memory_budget_bytes) {
  std::vector<std::string> global = kImplemented;
  if (config.train_config().has_global_embedding_constraints()) {
    ApplyConstraints(config.train_config().global_embedding_constraints(),
                     "train_config.global_embedding_constraints", &global);
  }
  // Tables by name, with what their features' constraints allow.
  std::map<std::string, TablePlan> tables;
  std::map<std::string, std::vector<std::string>> allowed;
  std::map<std::string, std::vector<std::string>> tables_of_feature;
  std::map<std::string, const EmbeddingTableSpec*> spec_of;
  for (const EmbeddingTableSpec& spec : specs) {
    TablePlan& plan = tables[spec.name];
    plan.table = spec.name;
    plan.rows = spec.rows;
    plan.dim = spec.dim;
    allowed[spec.name] = global;
    spec_of[spec.name] = &spec;
    for (const std::string& feature : spec.features) tables_of_feature[feature].push_back(spec.name);
  }
  for (const fg::FeatureInfo& info :
       fg::DescribeFeatures(config.feature_configs(), config.data_config().fg_mode())) {
    const auto* field = info.config->GetDescriptor()->FindFieldByName("embedding_constraints");
    if (!field || !info.config->GetReflection()->HasField(*info.config, field)) continue;
    const auto& constraints = static_cast<const protos::ParameterConstraints&>(
        info.config->GetReflection()->GetMessage(*info.config, field));
    // Constraints of features no table uses are still checked.
    std::vector<std::string> scratch = global;
    ApplyConstraints(constraints, info.config_path + ".embedding_constraints", &scratch);
    for (const std::string& table : tables_of_feature[info.name]) {
      ApplyConstraints(constraints, info.config_path + ".embedding_constraints", &allowed[table]);
    }
  }
  // dynamicemb tables are whole on every rank (replicas kept alike by merging the ranks' ids,
  // embedding_collection.h): TorchEasyRec shards them row-wise on GPUs only.
  for (auto& [name, plan] : tables) {
    if (!spec_of.at(name)->dynamicemb) continue;
    if (std::find(allowed[name].begin(), allowed[name].end(), "data_parallel") == allowed[name].end()) {
      Fail("embedding table '", name, "' has dynamicemb: its embedding_constraints must allow data_parallel (",
           "tzrec-cpp keeps dynamicemb tables whole on every rank)");
    }
    allowed[name] = {"data_parallel"};
    plan.compute_kernel = "dynamicemb";
  }
  // Tables nobody constrained may be row-wise sharded to fit memory; whole tables cost
  // (weights + optimizer state + the 4-byte backward slot) per row on every rank.
  if (memory_budget_bytes > 0 && world_size > 1) {
    const SparseOptimizerSpec optimizer = ParseSparseOptimizer(config.train_config().sparse_optimizer());
    auto bytes = [&](const TablePlan& t) {
      return EmbeddingCollection::TableBytes(*spec_of.at(t.table), &optimizer);
    };
    int64_t whole = 0;
    std::vector<TablePlan*> free;
    for (auto& kv : tables) {
      if (allowed[kv.first].front() != "data_parallel" || spec_of.at(kv.first)->dynamicemb) continue;
      whole += bytes(kv.second);
      if (allowed[kv.first] == kImplemented) free.push_back(&kv.second);
    }
    std::stable_sort(free.begin(), free.end(), [&](const TablePlan* a, const TablePlan* b) {
      return bytes(*a) > bytes(*b);
    });
    for (TablePlan* t : free) {
      if (whole <= memory_budget_bytes) break;
      allowed[t->table] = {"row_wise"};
      whole -= bytes(*t) - bytes(*t) / world_size;
    }
  }
  std::vector<TablePlan> out;
  std::vector<int64_t> load(world_size, 0);
  // Largest tables first, so table_wise ones spread evenly.
  std::vector<TablePlan*> order;
  for (auto& kv : tables) order.push_back(&kv.second);
  std::stable_sort(order.begin(), order.end(), [](const TablePlan* a, const TablePlan* b) {
    return a->rows * a->dim > b->rows * b->dim;
  });
  for (TablePlan* plan : order) {
    const std::vector<std::string>& types = allowed[plan->table];
    plan->sharding_type = world_size == 1 ? "data_parallel" : types.front();
    if (plan->sharding_type == "column_wise" && plan->dim < world_size) {
      Fail("embedding table '", plan->table, "': column_wise needs embedding_dim >= the number of "
           "ranks (", plan->dim, " < ", world_size, ")");
    }
    if (plan->sharding_type == "table_wise") {
      const int owner = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      load[owner] += plan->rows * plan->dim;
      plan->ranks = {owner};
    } else {
      for (int r = 0; r < world_size; ++r) plan->ranks.push_back(r);
    }
  }
  for (auto& kv : tables) out.push_back(kv.second);
  return out;
}

std::map<std::string, TableShard> ShardsForRank(const std::vector<TablePlan>& plan, int rank,
                                                int world_size) {
  std::map<std::string, TableShard> shards;
  for (const TablePlan& t : plan) {
    TableShard shard;
    shard.type = TableShard::ParseType(t.sharding_type);
    if (!shard.sharded()) continue;
    shard.rows = t.rows;
    shard.dim = t.dim;
    shard.world_size = world_size;
    shard.rank = rank;
    shard.owner = t.ranks.empty() ? 0 : t.ranks.front();
    shards[t.table] = shard;
  }
  return shards;
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
