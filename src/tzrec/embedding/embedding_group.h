// EmbeddingGroup: turns a Batch into one tensor per feature group of the model config.
//
// DEEP groups concatenate, in feature_names order, the pooled embedding of each sparse
// feature and the raw values of each dense feature -> [B, total_dim]. WIDE groups hold sparse
// features only, each looked up in its own "<embedding_name>_wide" table of
// `wide_embedding_dim` columns. Features naming the same embedding_name share one table
// (rows and dims must agree); a feature used by several groups is looked up once per table.
// Models never touch tables: they see {group_name: Tensor}. Tables of one dim live in one
// fused EmbeddingStorage; Materialize() allocates them once the sparse optimizer is known
// (its state sits beside each row). Not thread-safe (one per model).
#pragma once

#include <deque>

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/embedding/table_shard.h"
#include "tzrec/features/feature.h"
#include "tzrec/protos/model.pb.h"
#include "tzrec/train/batch.h"

namespace tzrec {

class EmbeddingGroup {
 public:
  EmbeddingGroup(const std::vector<const Feature*>& features,
                 const google::protobuf::RepeatedPtrField<protos::FeatureGroupConfig>& groups,
                 int wide_embedding_dim);

  bool HasGroup(const std::string& name) const { return groups_.count(name) > 0; }
  // Output width of each feature of a group, in order.
  std::vector<int> GroupDims(const std::string& name) const;
  int GroupTotalDim(const std::string& name) const;
  const std::vector<std::string>& group_names() const { return group_order_; }

  // Allocates and initialises all tables with room for `optimizer`'s state. Tables named in
  // `shards` with a model-parallel type hold only this rank's part and look up through
  // `comm` (sharded_lookup.h); the others are whole on every rank.
  void Materialize(const SparseOptimizer* optimizer,
                   const std::map<std::string, TableShard>& shards = {}, ShardComm* comm = nullptr);
  bool materialized() const { return !storages_.empty() || table_specs_.empty(); }
  // Bytes of all tables with their optimizer state and backward slot maps (after Materialize).
  int64_t table_bytes() const { return table_bytes_; }

  // `training`: record the backward that updates the tables with the sparse optimizer.
  std::map<std::string, at::Tensor> Forward(const Batch& batch, bool training);

  // All tables, in creation order (after Materialize).
  std::vector<EmbeddingTable*> tables() const;
  // The model-parallel placement of `table`, or nullptr when the table is whole here.
  const TableShard* ShardOf(const EmbeddingTable* table) const;
  ShardComm* shard_comm() const { return comm_; }
  // Takes part in the collectives of one Forward without a batch (a rank whose evaluation
  // data ended while others still have batches).
  void ForwardEmpty();
  // True when some table is model-parallel (its lookups are collectives).
  bool has_sharded_tables() const;
  // Collective (every rank calls it): the logical (unsharded) weight and optimizer state of
  // every sharded table, by table name then "weight" / state name, on every rank.
  std::map<std::string, std::map<std::string, at::Tensor>> GatherShardedTables() const;
  // This rank's part of logical `tensor` (a table's weight or state) for `table`.
  static at::Tensor LocalPart(const TableShard& shard, const at::Tensor& logical, bool columns);

 private:
  struct TableSpec {
    std::string name;
    int64_t rows;
    int dim;
    bool trainable;
  };
  struct Lookup {
    const Feature* feature;
    int table;  // index into table_specs_ / tables_
  };
  struct Member {
    const Feature* feature;
    int lookup = -1;  // index into lookups_, -1 for dense features
    int dim = 0;
  };
  int GetOrCreateTable(const std::string& name, int64_t rows, int dim, bool trainable,
                       const std::string& where);
  int GetOrCreateLookup(const Feature* feature, int table);
  const std::vector<Member>& Members(const std::string& name) const;

  std::vector<TableSpec> table_specs_;
  std::vector<Lookup> lookups_;
  // After Materialize: one storage per dim, the tables, and each storage's lookups in order.
  std::vector<std::unique_ptr<EmbeddingStorage>> storages_;
  std::vector<EmbeddingTable*> tables_;
  int64_t table_bytes_ = 0;
  std::vector<std::vector<int>> storage_lookups_;
  // Per storage: its placement (kDataParallel for fused storages of whole tables; a deque so
  // pointers handed to autograd stay valid) and the logical dim of its lookups' outputs.
  std::deque<TableShard> storage_shards_;
  std::vector<int> storage_out_dims_;
  ShardComm* comm_ = nullptr;
  std::map<std::string, std::vector<Member>> groups_;
  std::vector<std::string> group_order_;
};

}  // namespace tzrec
