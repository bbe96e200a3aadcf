#include "tzrec/embedding/embedding_group.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>
#include <unistd.h>

#include <algorithm>

#include "tzrec/common/error.h"
#include "tzrec/embedding/fused_lookup.h"
#include "tzrec/embedding/sharded_lookup.h"

namespace tzrec {

EmbeddingGroup::EmbeddingGroup(
    const std::vector<const Feature*>& features,
    const google::protobuf::RepeatedPtrField<protos::FeatureGroupConfig>& groups,
    int wide_embedding_dim) {
  std::map<std::string, const Feature*> by_name;
  for (const Feature* f : features) by_name[f->name()] = f;
  for (int g = 0; g < groups.size(); ++g) {
    const auto& group = groups.Get(g);
    std::string where = StrCat("model_config.feature_groups[", g, "]");
    if (group.group_type() != protos::DEEP && group.group_type() != protos::WIDE) {
      Fail(where, ".group_type: ", protos::FeatureGroupType_Name(group.group_type()),
           " not supported yet (supported: DEEP, WIDE)");
    }
    if (groups_.count(group.group_name())) {
      Fail(where, ".group_name: duplicate group '", group.group_name(), "'");
    }
    if (group.feature_names_size() == 0) Fail(where, ".feature_names is empty");
    const bool wide = group.group_type() == protos::WIDE;
    std::vector<Member> members;
    for (const auto& feature_name : group.feature_names()) {
      auto it = by_name.find(feature_name);
      if (it == by_name.end()) {
        Fail(where, ".feature_names: unknown feature '", feature_name, "'");
      }
      const Feature* feature = it->second;
      if (feature->is_sequence()) {
        Fail(where, ": sequence feature '", feature_name, "' in a ", wide ? "WIDE" : "DEEP",
             " group is not supported yet (sequence groups and encoders are not implemented)");
      }
      Member member;
      member.feature = feature;
      if (feature->is_sparse()) {
        int dim = wide ? wide_embedding_dim : feature->embedding_dim();
        std::string table_name = feature->embedding_name() + (wide ? "_wide" : "");
        int table = GetOrCreateTable(table_name, feature->num_embeddings(), dim,
                                     feature->trainable(), where + " feature '" + feature_name + "'");
        member.lookup = GetOrCreateLookup(feature, table);
        member.dim = dim;
      } else {
        if (wide) {
          Fail(where, ": WIDE groups take sparse features only, '", feature_name, "' is dense");
        }
        member.dim = feature->value_dim();
      }
      members.push_back(member);
    }
    groups_[group.group_name()] = std::move(members);
    group_order_.push_back(group.group_name());
  }
}

int EmbeddingGroup::GetOrCreateTable(const std::string& name, int64_t rows, int dim, bool trainable,
                                     const std::string& where) {
  for (size_t i = 0; i < table_specs_.size(); ++i) {
    const TableSpec& spec = table_specs_[i];
    if (spec.name != name) continue;
    if (spec.rows != rows || spec.dim != dim) {
      Fail(where, ": embedding '", name, "' is shared with shape [", spec.rows, ", ", spec.dim,
           "] but this feature needs [", rows, ", ", dim, "]");
    }
    if (spec.trainable != trainable) {
      Fail(where, ": embedding '", name, "' is shared by trainable and frozen features");
    }
    return static_cast<int>(i);
  }
  table_specs_.push_back({name, rows, dim, trainable});
  return static_cast<int>(table_specs_.size() - 1);
}

int EmbeddingGroup::GetOrCreateLookup(const Feature* feature, int table) {
  for (size_t i = 0; i < lookups_.size(); ++i) {
    if (lookups_[i].feature == feature && lookups_[i].table == table) return static_cast<int>(i);
  }
  lookups_.push_back({feature, table});
  return static_cast<int>(lookups_.size() - 1);
}

void EmbeddingGroup::Materialize(const SparseOptimizer* optimizer,
                                 const std::map<std::string, TableShard>& shards, ShardComm* comm) {
  TZREC_CHECK(storages_.empty(), "embedding group materialized twice");
  comm_ = comm;
  std::map<int, size_t> storage_of_dim;
  std::vector<size_t> storage_of_table;
  tables_.clear();
  for (const TableSpec& spec : table_specs_) {
    auto sharded = shards.find(spec.name);
    if (sharded != shards.end() && sharded->second.sharded()) {
      TZREC_CHECK(comm != nullptr, "sharded table '", spec.name, "' without a process group");
      const TableShard& shard = sharded->second;
      storages_.push_back(std::make_unique<EmbeddingStorage>(shard.local_dim(shard.rank), optimizer));
      storage_shards_.push_back(shard);
      storage_out_dims_.push_back(spec.dim);
      storage_of_table.push_back(storages_.size() - 1);
      tables_.push_back(storages_.back()->AddTable(spec.name, shard.local_rows(shard.rank), spec.trainable));
      continue;
    }
    auto it = storage_of_dim.find(spec.dim);
    if (it == storage_of_dim.end()) {
      storages_.push_back(std::make_unique<EmbeddingStorage>(spec.dim, optimizer));
      storage_shards_.push_back(TableShard{});
      storage_out_dims_.push_back(spec.dim);
      it = storage_of_dim.emplace(spec.dim, storages_.size() - 1).first;
    }
    storage_of_table.push_back(it->second);
    tables_.push_back(storages_[it->second]->AddTable(spec.name, spec.rows, spec.trainable));
  }
  // Fail clearly before the allocator does ("can't allocate memory: you tried to allocate
  // 26135627264 bytes" names no table).
  int64_t bytes = 0;
  for (auto& storage : storages_) {
    // Weights + optimizer state, and the 4-byte backward slot map per row.
    bytes += storage->total_rows() * (storage->row_width() * 4 + 4);
  }
  const int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (memory > 0 && bytes > memory) {
    const TableSpec* largest = &table_specs_[0];
    for (const TableSpec& spec : table_specs_) {
      if (spec.rows * spec.dim > largest->rows * largest->dim) largest = &spec;
    }
    Fail("embedding tables need ", bytes >> 20, " MiB with the ", optimizer->name(),
         " state, more than this machine's ", memory >> 20, " MiB of memory (largest: '",
         largest->name, "' with ", largest->rows, " rows of dim ", largest->dim,
         "); reduce num_buckets / hash_bucket_size, e.g. --edit_config_json='{\"feature_configs[",
         "id_feature.num_buckets>1000000].id_feature.num_buckets\": 1000000}'");
  }
  for (auto& storage : storages_) storage->Allocate(/*initialize=*/false);
  // Initialise in the order one process would (tables grouped by dim in order of first
  // appearance), so every rank, sharded or not, draws the same random values.
  std::vector<int> dims;
  for (const TableSpec& spec : table_specs_) {
    if (std::find(dims.begin(), dims.end(), spec.dim) == dims.end()) dims.push_back(spec.dim);
  }
  for (int dim : dims) {
    for (size_t i = 0; i < table_specs_.size(); ++i) {
      const TableSpec& spec = table_specs_[i];
      if (spec.dim != dim) continue;
      const size_t s = storage_of_table[i];
      const TableShard& shard = storage_shards_[s];
      storages_[s]->InitializeTable(tables_[i], spec.rows, spec.dim,
                                    shard.sharded() ? shard.row_begin(shard.rank) : 0,
                                    shard.sharded() ? shard.column_begin(shard.rank) : 0);
    }
  }
  table_bytes_ = bytes;
  storage_lookups_.assign(storages_.size(), {});
  for (size_t i = 0; i < lookups_.size(); ++i) {
    EmbeddingStorage* storage = tables_[lookups_[i].table]->storage();
    for (size_t s = 0; s < storages_.size(); ++s) {
      if (storages_[s].get() == storage) storage_lookups_[s].push_back(static_cast<int>(i));
    }
  }
}

const std::vector<EmbeddingGroup::Member>& EmbeddingGroup::Members(const std::string& name) const {
  auto it = groups_.find(name);
  if (it == groups_.end()) Fail("model needs feature group '", name, "' which the config lacks");
  return it->second;
}

std::vector<int> EmbeddingGroup::GroupDims(const std::string& name) const {
  std::vector<int> dims;
  for (const auto& m : Members(name)) dims.push_back(m.dim);
  return dims;
}

int EmbeddingGroup::GroupTotalDim(const std::string& name) const {
  int total = 0;
  for (const auto& m : Members(name)) total += m.dim;
  return total;
}

at::Tensor EmbeddingGroup::LocalPart(const TableShard& shard, const at::Tensor& logical, bool columns) {
  at::Tensor rows = logical.narrow(0, shard.row_begin(shard.rank), shard.local_rows(shard.rank));
  if (!columns || shard.type != TableShard::Type::kColumnWise) return rows;
  return rows.narrow(1, shard.column_begin(shard.rank), shard.local_dim(shard.rank));
}

std::map<std::string, std::map<std::string, at::Tensor>> EmbeddingGroup::GatherShardedTables() const {
  std::map<std::string, std::map<std::string, at::Tensor>> out;
  for (EmbeddingTable* table : tables_) {
    const TableShard* shard = ShardOf(table);
    if (!shard) continue;
    const int world = shard->world_size;
    std::vector<std::pair<std::string, at::Tensor>> parts = {{"weight", table->weight()}};
    for (auto& kv : table->optimizer_state()) parts.push_back(kv);
    const auto& spec = table->storage()->optimizer().spec();
    for (auto& [name, local] : parts) {
      // Width of this tensor on rank r: the weight's local dim, or the state slice's width.
      auto width_on = [&](int r) {
        const int local_dim = shard->local_dim(r);
        if (name == "weight") return local_dim;
        for (const auto& slice : spec.StateSlices(std::max(local_dim, 1))) {
          if (slice.name == name) return slice.width;
        }
        return local_dim;
      };
      int64_t max_rows = 0;
      int max_width = 0;
      for (int r = 0; r < world; ++r) {
        max_rows = std::max(max_rows, shard->local_rows(r));
        max_width = std::max(max_width, width_on(r));
      }
      at::Tensor padded = at::zeros({std::max<int64_t>(max_rows, 1), std::max(max_width, 1)}, at::kFloat);
      if (local.size(0) > 0 && local.size(1) > 0) {
        padded.narrow(0, 0, local.size(0)).narrow(1, 0, local.size(1)).copy_(local);
      }
      at::Tensor all = comm_->AllGather(padded);
      const int64_t stride = padded.size(0);
      at::Tensor logical;
      if (shard->type == TableShard::Type::kColumnWise && width_on(0) == shard->local_dim(0)) {
        std::vector<at::Tensor> columns;
        for (int r = 0; r < world; ++r) {
          columns.push_back(all.narrow(0, r * stride, shard->rows).narrow(1, 0, width_on(r)));
        }
        logical = at::cat(columns, 1);
      } else if (shard->type == TableShard::Type::kColumnWise) {
        // Per-row state (row-wise Adagrad) of a column shard: rank 0's stands for the row.
        logical = all.narrow(0, 0, shard->rows).narrow(1, 0, width_on(0)).clone();
      } else {
        std::vector<at::Tensor> blocks;
        for (int r = 0; r < world; ++r) {
          if (shard->local_rows(r) > 0) {
            blocks.push_back(all.narrow(0, r * stride, shard->local_rows(r)).narrow(1, 0, width_on(r)));
          }
        }
        logical = at::cat(blocks, 0);
      }
      out[table->name()][name] = logical.contiguous();
    }
  }
  return out;
}

bool EmbeddingGroup::has_sharded_tables() const {
  for (const TableShard& shard : storage_shards_) {
    if (shard.sharded()) return true;
  }
  return false;
}

void EmbeddingGroup::ForwardEmpty() {
  at::Tensor no_values = at::zeros({0}, at::kLong);
  at::Tensor one_offset = at::zeros({1}, at::kLong);
  for (size_t s = 0; s < storages_.size(); ++s) {
    if (!storage_shards_[s].sharded() || storage_lookups_[s].empty()) continue;
    std::vector<LookupTensors> inputs;
    for (int i : storage_lookups_[s]) {
      inputs.push_back({no_values, one_offset, tables_[lookups_[i].table],
                        lookups_[i].feature->pooling() == "mean",
                        lookups_[i].feature->weighted() ? at::zeros({0}, at::kFloat) : at::Tensor()});
    }
    ShardedPooledLookup(storages_[s].get(), storage_shards_[s], comm_, inputs, 0, /*training=*/false);
  }
}

const TableShard* EmbeddingGroup::ShardOf(const EmbeddingTable* table) const {
  for (size_t s = 0; s < storages_.size(); ++s) {
    if (storages_[s].get() == table->storage()) {
      return storage_shards_[s].sharded() ? &storage_shards_[s] : nullptr;
    }
  }
  return nullptr;
}

std::vector<EmbeddingTable*> EmbeddingGroup::tables() const { return tables_; }


std::map<std::string, at::Tensor> EmbeddingGroup::Forward(const Batch& batch, bool training) {
  TZREC_CHECK(materialized(), "EmbeddingGroup::Materialize was not called");
  // One [B, L*dim] output per storage; lookup i sits at columns of position_in_storage[i].
  std::vector<at::Tensor> storage_out(storages_.size());
  std::vector<int> storage_of(lookups_.size(), -1), position_of(lookups_.size(), -1);
  for (size_t s = 0; s < storages_.size(); ++s) {
    if (storage_lookups_[s].empty()) continue;
    std::vector<LookupTensors> inputs;
    for (size_t k = 0; k < storage_lookups_[s].size(); ++k) {
      const int i = storage_lookups_[s][k];
      const Lookup& lookup = lookups_[i];
      auto it = batch.sparse.find(lookup.feature->name());
      TZREC_CHECK(it != batch.sparse.end(), "batch lacks sparse feature ", lookup.feature->name());
      // Weighted features always carry a (maybe empty) weight tensor: the sharded lookup's
      // collectives must not depend on whether this rank's batch happens to have ids.
      at::Tensor weights;
      if (lookup.feature->weighted()) {
        weights = it->second.weights.defined() ? it->second.weights
                                               : at::zeros({0}, at::TensorOptions().dtype(at::kFloat));
      }
      inputs.push_back({it->second.values, it->second.offsets, tables_[lookup.table],
                        lookup.feature->pooling() == "mean", weights});
      storage_of[i] = static_cast<int>(s);
      position_of[i] = static_cast<int>(k);
    }
    storage_out[s] = storage_shards_[s].sharded()
                         ? ShardedPooledLookup(storages_[s].get(), storage_shards_[s], comm_, inputs,
                                               batch.size, training)
                         : StoragePooledLookup(storages_[s].get(), inputs, batch.size, training);
  }
  std::map<std::string, at::Tensor> out;
  for (const auto& name : group_order_) {
    // Neighbouring features that are neighbours in a storage output become one slice: every
    // slice costs a full-size gradient buffer in backward, so fewer slices is much faster.
    std::vector<at::Tensor> parts;
    int run_storage = -1, run_begin = 0, run_end = 0;
    auto flush = [&]() {
      if (run_storage < 0) return;
      const at::Tensor& full = storage_out[run_storage];
      const int64_t dim = storage_out_dims_[run_storage];
      parts.push_back(run_begin == 0 && run_end * dim == full.size(1)
                          ? full
                          : full.narrow(1, run_begin * dim, (run_end - run_begin) * dim));
      run_storage = -1;
    };
    for (const auto& m : groups_.at(name)) {
      if (m.lookup >= 0) {
        const int s = storage_of[m.lookup], k = position_of[m.lookup];
        if (s == run_storage && k == run_end) {
          ++run_end;
          continue;
        }
        flush();
        run_storage = s;
        run_begin = k;
        run_end = k + 1;
      } else {
        flush();
        auto it = batch.dense.find(m.feature->name());
        TZREC_CHECK(it != batch.dense.end(), "batch lacks dense feature ", m.feature->name());
        parts.push_back(it->second);
      }
    }
    flush();
    out[name] = parts.size() == 1 ? parts[0] : at::cat(parts, 1);
  }
  return out;
}

}  // namespace tzrec
