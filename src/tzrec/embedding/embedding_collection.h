// EmbeddingCollection: the one owner of a model's embedding tables and their lookups (pooled,
// and unpooled for sequence groups).
//
// Views (EmbeddingGroup, one per tower where a model needs its own) register the tables and
// lookups their feature groups need; features naming the same embedding_name share one table
// (rows, dim and trainable must agree), and a feature looked up in the same table by several
// groups is looked up once. Table names are what the sharding planner plans, checkpoints save
// and the memory model counts (TableBytes), so WIDE tables (`<embedding_name>_wide`) are
// planned like any other, and features no group uses get no table.
//
// Materialize() allocates the tables once the sparse optimizer is known: with it, its state sits
// beside each row (training); without (evaluation, predict, serving) rows hold weights only and
// lookups cannot train. Tables of one dim share a fused EmbeddingStorage unless the plan makes
// them model-parallel (then each holds this rank's part and looks up through `comm`).
// Lookup() runs every lookup of a batch (one fused call per storage); LookupEmpty() takes part in
// the collectives of a Lookup without a batch (rank lockstep). VisitTableStates() /
// RestoreTables() are the state dict: logical (unsharded) tensors, with the collectives for
// sharded tables inside (every rank calls them).
//
// Thread safety: one thread at a time (the model's).
#pragma once

#include <ATen/core/Tensor.h>

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tzrec/batch/batch.h"
#include "tzrec/embedding/dynamic_row_index.h"
#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/embedding/fused_lookup.h"
#include "tzrec/embedding/table_shard.h"
#include "tzrec/embedding/zch_row_index.h"
#include "tzrec/features/feature.h"

namespace tzrec {

struct EmbeddingTableSpec {
  std::string name;
  int64_t rows = 0;
  int dim = 0;
  bool trainable = true;
  std::vector<std::string> features;  // features looked up in it (their constraints apply)
  // A table of the sequence groups (TorchEasyRec's EmbeddingCollection), separate from the
  // pooled table of the same embedding_name (its EmbeddingBagCollection).
  bool sequence = false;
  // Zero-collision hashing: the features' raw ids reach rows through a ZchRowIndex.
  std::optional<fg::ZchSpec> zch;
  // dynamicemb: the features' raw ids reach rows through a DynamicRowIndex (rows: its capacity).
  std::optional<fg::DynamicEmbSpec> dynamicemb;
  // `data_type`: FP16 / BF16 weights are stored in 2 bytes (RowFormat::kFloat16 / kBFloat16).
  TableDataType data_type = TableDataType::kFP32;
};

// One forward of all lookups: per storage a [B, L*dim] output, and where each lookup sits.
struct LookupOutputs {
  std::vector<at::Tensor> storage_out;
  std::vector<int> storage_dim;  // per storage: columns per lookup
  std::vector<int> storage_of;   // per lookup
  std::vector<int> position_of;  // per lookup: index among its storage's lookups
  std::vector<at::Tensor> sequence_out;  // per sequence lookup: [steps, dim]
  // [B, dim] of lookup `i`.
  at::Tensor Of(int i) const {
    return storage_out[storage_of[i]].narrow(1, static_cast<int64_t>(position_of[i]) * storage_dim[storage_of[i]],
                                             storage_dim[storage_of[i]]);
  }
};

class EmbeddingCollection {
 public:
  // Bytes a whole table needs: weights, optimizer state (none with a null spec) and the 4-byte
  // backward slot of every row. The planner and Materialize's memory check both use it.
  static int64_t TableBytes(const EmbeddingTableSpec& spec, const SparseOptimizerSpec* optimizer);

  // Registers (or finds) table `name`; `where` names the config path in errors. `sequence`:
  // a table of sequence groups (a pooled table of the same name is an error: callers name the
  // two kinds apart). `zch` / `dynamicemb`: the feature's managed ids (features sharing a table
  // must agree on them).
  int AddTable(const std::string& name, int64_t rows, int dim, bool trainable,
               const std::string& feature, const std::string& where, bool sequence = false,
               const fg::ZchSpec* zch = nullptr, const fg::DynamicEmbSpec* dynamicemb = nullptr,
               TableDataType data_type = TableDataType::kFP32);
  // Registers (or finds) the pooled lookup of `feature`'s ids in `table`.
  int AddLookup(const Feature* feature, int table);
  // Registers (or finds) the unpooled lookup of sequence feature `feature` in `table`: one
  // [steps, dim] output per batch (LookupOutputs::sequence_out), steps pooled over their ids.
  int AddSequenceLookup(const Feature* feature, int table);
  const std::vector<EmbeddingTableSpec>& table_specs() const { return specs_; }

  struct MaterializeOptions {
    const SparseOptimizer* optimizer = nullptr;  // null: inference, no optimizer state
    std::map<std::string, TableShard> shards;    // model-parallel tables of this rank
    ShardComm* comm = nullptr;                   // required when `shards` has sharded tables
    SparseGradientExchange exchange;             // data-parallel gradient merge (may be empty)
    std::set<std::string> int8_tables;           // inference: tables stored INT8 row-wise
    // Tables hash-stored whatever the policy (an export's hash-stored tables). Others follow
    // TZREC_EMBEDDING_STORAGE: "dense" (never), "hash" (every table not sharded), or "auto"
    // (default): when the dense tables would need more than a quarter of the usable memory, the
    // largest become hash-stored until the rest fit. Sharded tables are always dense.
    std::set<std::string> hash_tables;
  };
  void Materialize(MaterializeOptions options);
  bool materialized() const { return materialized_; }
  bool has_optimizer_state() const { return optimizer_ != nullptr; }
  // Bytes of all tables with their optimizer state and backward slot maps (after Materialize):
  // dense tables whole, hash-stored ones as resident now.
  int64_t table_bytes() const;
  // Names of the hash-stored tables.
  std::set<std::string> hashed_tables() const;

  // `training`: record the backward that updates the tables with the sparse optimizer (and,
  // for zch tables, record the ids and admit / evict at round ends, re-initialising the rows
  // that change hands; for dynamicemb tables, admit / evict this batch's ids; all ranks of a
  // distributed run must call it together).
  LookupOutputs Lookup(const Batch& batch, bool training);
  // The managed-collision index of zch table `table` (null for other tables).
  const ZchRowIndex* zch_index(const std::string& table) const;
  // The dynamic row index of dynamicemb table `table` (null for other tables).
  const DynamicRowIndex* dynamic_index(const std::string& table) const;
  void LookupEmpty();
  bool has_sharded_tables() const;
  // Gradient accumulation: applies the row gradients this rank's storages kept while the
  // sparse optimizer deferred updates (local: the exchanges already ran in the backwards).
  // `factor` multiplies the gradients first (a grad scaler's 1 / scale).
  void ApplyDeferredGradients(float factor = 1.0f);
  // Whether every deferred row gradient is finite (a grad scaler's overflow check).
  bool DeferredGradientsFinite() const;
  // Forgets the deferred gradients without updating any row (a skipped step).
  void DiscardDeferredGradients();

  // Materialised tables, in registration order; the model-parallel placement of one (null when
  // it is whole here).
  const std::vector<EmbeddingTable*>& tables() const { return tables_; }
  const TableShard* ShardOf(const EmbeddingTable* table) const;

  // Calls `fn(table, {"weight": [rows, dim], <state name>: ...})` with logical tensors for every
  // table in order (optimizer state only when asked and present). A hash-stored table gives
  // its resident rows only, ordered by id, with "ids" (int64 [n]) naming them. A zch table adds
  // its index: "zch_ids", "zch_rows", "zch_counts" / "zch_last_access_iter" (as its policy
  // keeps them), all int64 [zch_size], and "zch_step" (int64 scalar). A dynamicemb table gives
  // the rows of its held ids in id order, with "dynamicemb_ids", "dynamicemb_scores",
  // "dynamicemb_counter_ids", "dynamicemb_counter_counts" (int64 [n]) and "dynamicemb_step". Collective for sharded
  // tables: every rank calls it; each table is gathered just before its call, so memory peaks at
  // one logical table.
  void VisitTableStates(bool with_optimizer_state,
                        const std::function<void(const std::string& table,
                                                 const std::map<std::string, at::Tensor>&)>& fn) const;
  // Restores tables from logical tensors by table name then "weight" / state name (slicing this
  // rank's part of sharded tables). Saved tables with "ids" hold those rows only, the others
  // keeping their initial values; either form restores into either storage (a dense table
  // restored into a hash-stored one brings only the rows that differ from their initial values). A table or tensor missing from `saved` calls `missing`
  // with its name; a shape mismatch is an error naming `source`. Returns tensors restored.
  int RestoreTables(const std::map<std::string, std::map<std::string, at::Tensor>>& saved,
                    bool with_optimizer_state, const std::string& source,
                    const std::function<void(const std::string&)>& missing);

 private:
  struct LookupSpec {
    const Feature* feature;
    int table;
  };
  // This rank's part of logical `tensor` (a table's weight or state) for `shard`.
  static at::Tensor LocalPart(const TableShard& shard, const at::Tensor& logical, bool columns);
  std::set<std::string> ChooseHashedTables(const MaterializeOptions& options) const;
  // zch tables: records this training batch's ids; at a round's end merges the ranks'
  // histories, admits / evicts and re-initialises the rows that changed hands.
  void ProfileZchTables(const Batch& batch);
  // dynamicemb tables: admits / evicts this training batch's ids (ranks merge theirs first)
  // and initialises the rows handed to new ids.
  void TrainDynamicTables(const Batch& batch);
  // The ids of every lookup of spec `table` in `batch`, as (pointer, count) spans into `held`.
  std::vector<std::pair<const int64_t*, int64_t>> IdsOfTable(int table, const Batch& batch,
                                                             std::vector<at::Tensor>* held) const;
  // `ids` of spec `table` as the kernels read them: rows of zch, dynamicemb and hash-stored
  // tables (`training` picks the row of dynamicemb ids holding none).
  at::Tensor RowsOf(int table, const at::Tensor& ids, bool training);
  // The dynamicemb index of spec `t` into / out of a table's state tensors.
  std::map<std::string, at::Tensor> DynamicTableState(int t, bool with_optimizer_state) const;
  int RestoreDynamicTable(int t, const std::map<std::string, at::Tensor>* saved, bool with_optimizer_state,
                          const std::string& source, const std::function<void(const std::string&)>& missing);
  // Creates the dynamicemb indexes and fills their tables' shared rows (Materialize).
  void MaterializeDynamicTables();
  // The zch index of spec `t` into / out of a table's state tensors (no-op for other tables).
  void AddZchState(int t, std::map<std::string, at::Tensor>* tensors) const;
  int RestoreZchState(int t, const std::map<std::string, at::Tensor>* saved, const std::string& source,
                      const std::function<void(const std::string&)>& missing);
  // RestoreTables for a table saved or held hash-stored.
  int RestoreRows(EmbeddingTable* table, const std::map<std::string, at::Tensor>& saved,
                  bool with_optimizer_state, const std::string& source,
                  const std::function<void(const std::string&)>& missing);
  std::map<std::string, at::Tensor> GatherTable(const EmbeddingTable* table, const TableShard& shard,
                                                bool with_optimizer_state) const;

  std::vector<EmbeddingTableSpec> specs_;
  std::vector<LookupSpec> lookups_;
  std::vector<LookupSpec> sequence_lookups_;
  bool materialized_ = false;
  const SparseOptimizer* optimizer_ = nullptr;
  SparseGradientExchange exchange_;
  ShardComm* comm_ = nullptr;
  std::vector<std::unique_ptr<EmbeddingStorage>> storages_;
  std::vector<EmbeddingTable*> tables_;  // by spec index
  std::vector<std::unique_ptr<ZchRowIndex>> zch_;  // by spec index; null: not zch
  std::vector<std::unique_ptr<DynamicRowIndex>> dynamic_;  // by spec index; null: not dynamicemb
  std::vector<std::vector<int>> storage_lookups_;
  std::vector<std::vector<int>> storage_sequence_lookups_;
  // Per storage: its placement (kDataParallel for fused storages of whole tables; a deque so
  // pointers handed to autograd stay valid) and the logical dim of its lookups' outputs.
  std::deque<TableShard> storage_shards_;
  std::vector<int> storage_out_dims_;
  // Companion storages (fused_lookup.h's CompanionLookups): a storage all of whose lookups read
  // features another storage also looks up - a feature's WIDE table beside its DEEP one - is
  // looked up with that storage in one pass. Per storage: its companion's index (-1: none),
  // whether it rides with another, and per lookup of storage_lookups_ the riding lookup's
  // index in lookups_ (-1: none).
  std::vector<int> storage_companion_;
  std::vector<bool> storage_rides_;
  std::vector<std::vector<int>> companion_lookup_;
  // Chooses the companions (Materialize).
  void PairCompanionStorages();
};

}  // namespace tzrec
