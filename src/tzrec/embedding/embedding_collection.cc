#include "tzrec/embedding/embedding_collection.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>
#include <unistd.h>

#include <ATen/ops/_unique.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <cstdlib>
#include <tuple>
#include <cstring>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/embedding/sharded_lookup.h"
#include "tzrec/embedding/table_quantization.h"
#include "tzrec/kernels/cpu_kernels.h"

namespace tzrec {

namespace {

RowFormat RowFormatOf(TableDataType type) {
  switch (type) {
    case TableDataType::kFP16: return RowFormat::kFloat16;
    case TableDataType::kBF16: return RowFormat::kBFloat16;
    case TableDataType::kFP32: break;
  }
  return RowFormat::kFloat32;
}

}  // namespace

int64_t EmbeddingCollection::TableBytes(const EmbeddingTableSpec& spec,
                                        const SparseOptimizerSpec* optimizer) {
  const int64_t state = optimizer ? optimizer->StateWidth(spec.dim) : 0;
  const int64_t weight = spec.data_type != TableDataType::kFP32 ? HalfWeightFloats(spec.dim) : spec.dim;
  return spec.rows * ((weight + state) * 4 + 4);
}

int EmbeddingCollection::AddTable(const std::string& name, int64_t rows, int dim, bool trainable,
                                  const std::string& feature, const std::string& where,
                                  bool sequence, const fg::ZchSpec* zch,
                                  const fg::DynamicEmbSpec* dynamicemb, TableDataType data_type) {
  TZREC_CHECK(!materialized_, "table '", name, "' added after Materialize");
  for (size_t i = 0; i < specs_.size(); ++i) {
    EmbeddingTableSpec& spec = specs_[i];
    if (spec.name != name) continue;
    if (spec.sequence != sequence) {
      Fail(where, ": embedding table name '", name, "' is used both by a pooled table and by a ",
           "sequence group's table; rename one embedding_name");
    }
    if (spec.rows != rows || spec.dim != dim) {
      Fail(where, ": embedding '", name, "' is shared with shape [", spec.rows, ", ", spec.dim,
           "] but this feature needs [", rows, ", ", dim, "]");
    }
    if (spec.trainable != trainable) {
      Fail(where, ": embedding '", name, "' is shared by trainable and frozen features");
    }
    if (spec.zch.has_value() != (zch != nullptr) || (zch && !(*spec.zch == *zch))) {
      Fail(where, ": embedding '", name, "' is shared by features with different zch settings (",
           spec.zch ? spec.zch->Describe() : "none", " vs ", zch ? zch->Describe() : "none", ")");
    }
    if (spec.dynamicemb.has_value() != (dynamicemb != nullptr) || (dynamicemb && !(*spec.dynamicemb == *dynamicemb))) {
      Fail(where, ": embedding '", name, "' is shared by features with different dynamicemb settings (",
           spec.dynamicemb ? spec.dynamicemb->Describe() : "none", " vs ",
           dynamicemb ? dynamicemb->Describe() : "none", ")");
    }
    if (spec.data_type != data_type) {
      Fail(where, ": embedding '", name, "' is shared by features with data_type ", TableDataTypeName(spec.data_type),
           " and ", TableDataTypeName(data_type));
    }
    if (std::find(spec.features.begin(), spec.features.end(), feature) == spec.features.end()) {
      spec.features.push_back(feature);
    }
    return static_cast<int>(i);
  }
  specs_.push_back({name, rows, dim, trainable, {feature}, sequence,
                    zch ? std::optional<fg::ZchSpec>(*zch) : std::nullopt,
                    dynamicemb ? std::optional<fg::DynamicEmbSpec>(*dynamicemb) : std::nullopt, data_type});
  return static_cast<int>(specs_.size() - 1);
}

int EmbeddingCollection::AddLookup(const Feature* feature, int table) {
  TZREC_CHECK(!materialized_, "lookup added after Materialize");
  for (size_t i = 0; i < lookups_.size(); ++i) {
    if (lookups_[i].feature == feature && lookups_[i].table == table) return static_cast<int>(i);
  }
  lookups_.push_back({feature, table});
  return static_cast<int>(lookups_.size() - 1);
}

int EmbeddingCollection::AddSequenceLookup(const Feature* feature, int table) {
  TZREC_CHECK(!materialized_, "lookup added after Materialize");
  TZREC_CHECK(feature->is_sequence(), "feature '", feature->name(), "' is not a sequence");
  for (size_t i = 0; i < sequence_lookups_.size(); ++i) {
    if (sequence_lookups_[i].feature == feature && sequence_lookups_[i].table == table) {
      return static_cast<int>(i);
    }
  }
  sequence_lookups_.push_back({feature, table});
  return static_cast<int>(sequence_lookups_.size() - 1);
}

std::set<std::string> EmbeddingCollection::ChooseHashedTables(const MaterializeOptions& options) const {
  std::set<std::string> hashed;
  const char* env = std::getenv("TZREC_EMBEDDING_STORAGE");
  const std::string policy = env && *env ? env : "auto";
  if (policy != "auto" && policy != "dense" && policy != "hash") {
    Fail("TZREC_EMBEDDING_STORAGE='", policy, "': expected auto, dense or hash");
  }
  auto shardable = [&](const EmbeddingTableSpec& spec) {
    auto it = options.shards.find(spec.name);
    return it == options.shards.end() || !it->second.sharded();
  };
  for (const EmbeddingTableSpec& spec : specs_) {
    const bool forced = options.hash_tables.count(spec.name) > 0;
    if (forced && !shardable(spec)) Fail("hash-stored table '", spec.name, "' cannot be sharded");
    if (forced && spec.zch) Fail("zch table '", spec.name, "' cannot be hash-stored");
    if (forced && spec.dynamicemb) Fail("dynamicemb table '", spec.name, "' cannot be hash-stored");
    if (spec.zch || spec.dynamicemb) continue;  // zch: all rows in use; dynamicemb: its own rows
    if (forced || (policy == "hash" && shardable(spec))) hashed.insert(spec.name);
  }
  if (policy == "auto") {
    const int64_t memory = UsableMemoryBytes();
    std::vector<std::pair<int64_t, const EmbeddingTableSpec*>> dense;
    int64_t total = 0;
    for (const EmbeddingTableSpec& spec : specs_) {
      if (hashed.count(spec.name) || !shardable(spec) || spec.zch || spec.dynamicemb) continue;
      const int64_t bytes = options.int8_tables.count(spec.name) ? spec.rows * (spec.dim + 4)
                                                                 : TableBytes(spec, optimizer_ ? &optimizer_->spec() : nullptr);
      dense.emplace_back(bytes, &spec);
      total += bytes;
    }
    std::stable_sort(dense.begin(), dense.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [bytes, spec] : dense) {
      if (memory <= 0 || total <= memory / 4) break;
      hashed.insert(spec->name);
      total -= bytes;
      LOG_INFO << "embedding table '" << spec->name << "' (" << spec->rows << " rows, " << (bytes >> 20)
               << " MiB dense) allocates its rows on first touch: the dense tables would need more than "
                  "a quarter of the "
               << (memory >> 20) << " MiB of usable memory";
    }
  }
  return hashed;
}

int64_t EmbeddingCollection::table_bytes() const {
  int64_t bytes = 0;
  for (const auto& storage : storages_) bytes += storage->resident_bytes();
  return bytes;
}

std::set<std::string> EmbeddingCollection::hashed_tables() const {
  std::set<std::string> names;
  for (const EmbeddingTable* table : tables_) {
    if (table->hashed()) names.insert(table->name());
  }
  return names;
}

void EmbeddingCollection::Materialize(MaterializeOptions options) {
  TZREC_CHECK(!materialized_, "embedding collection materialized twice");
  optimizer_ = options.optimizer;
  exchange_ = std::move(options.exchange);
  comm_ = options.comm;
  // A fused storage looks its tables up in one call with one bag count, so tables read from
  // different data groups (sampled item features have more rows) get storages of their own.
  std::map<std::tuple<int, int, std::string>, size_t> storage_of_dim;
  std::vector<size_t> storage_of_table;
  std::vector<std::string> group_of_table(specs_.size());
  for (const auto* lookups : {&lookups_, &sequence_lookups_}) {
    for (const LookupSpec& lookup : *lookups) {
      std::string& group = group_of_table[lookup.table];
      const std::string& mine = lookup.feature->data_group();
      if (!group.empty() && group != mine) {
        Fail("embedding table '", specs_[lookup.table].name, "' is read by features of data groups ", group,
             " and ", mine, " (e.g. '", lookup.feature->name(), "'); a shared table needs one data group ",
             "(data_config.force_base_data_group: true puts every feature in __BASE__)");
      }
      group = mine;
    }
  }
  const std::set<std::string> hashed = ChooseHashedTables(options);
  tables_.clear();
  for (size_t t = 0; t < specs_.size(); ++t) {
    const EmbeddingTableSpec& spec = specs_[t];
    auto sharded = options.shards.find(spec.name);
    if (sharded != options.shards.end() && sharded->second.sharded()) {
      if (spec.dynamicemb) Fail("dynamicemb table '", spec.name, "' cannot be sharded: every rank holds it whole");
      TZREC_CHECK(comm_ != nullptr, "sharded table '", spec.name, "' without a process group");
      const TableShard& shard = sharded->second;
      storages_.push_back(std::make_unique<EmbeddingStorage>(
          shard.local_dim(shard.rank), optimizer_, RowFormatOf(spec.data_type)));
      storage_shards_.push_back(shard);
      storage_out_dims_.push_back(spec.dim);
      storage_of_table.push_back(storages_.size() - 1);
      tables_.push_back(storages_.back()->AddTable(spec.name, shard.local_rows(shard.rank), spec.trainable));
      continue;
    }
    // INT8 tables (inference), FP16 and BF16 tables share storages of their own.
    const bool int8 = options.int8_tables.count(spec.name) > 0;
    TZREC_CHECK(!int8 || !optimizer_, "INT8 table '", spec.name, "' with an optimizer");
    const RowFormat format = int8 ? RowFormat::kInt8 : RowFormatOf(spec.data_type);
    const std::tuple<int, int, std::string> key(spec.dim, static_cast<int>(format), group_of_table[t]);
    auto it = storage_of_dim.find(key);
    if (it == storage_of_dim.end()) {
      storages_.push_back(std::make_unique<EmbeddingStorage>(spec.dim, optimizer_, format));
      storage_shards_.push_back(TableShard{});
      storage_out_dims_.push_back(spec.dim);
      it = storage_of_dim.emplace(key, storages_.size() - 1).first;
    }
    storage_of_table.push_back(it->second);
    // dynamicemb: max_capacity rows for ids plus the two shared rows (dynamic_row_index.h).
    tables_.push_back(storages_[it->second]->AddTable(spec.name, spec.dynamicemb ? spec.rows + 2 : spec.rows,
                                                      spec.trainable, hashed.count(spec.name) > 0,
                                                      /*managed=*/spec.dynamicemb.has_value()));
  }
  // Fail clearly before the allocator does ("can't allocate memory: you tried to allocate
  // 26135627264 bytes" names no table). Hash-stored and dynamicemb tables start empty.
  int64_t bytes = 0;
  for (auto& storage : storages_) {
    for (const auto& table : storage->tables()) {
      if (!table->hashed() && !table->managed()) bytes += table->rows() * (storage->row_bytes() + 4);
    }
  }
  const int64_t memory = UsableMemoryBytes();
  if (memory > 0 && bytes > memory) {
    const EmbeddingTableSpec* largest = &specs_[0];
    for (const EmbeddingTableSpec& spec : specs_) {
      if (spec.rows * spec.dim > largest->rows * largest->dim) largest = &spec;
    }
    Fail("embedding tables need ", bytes >> 20, " MiB",
         optimizer_ ? " with the " + optimizer_->name() + " state" : std::string(),
         ", more than the ", memory >> 20, " MiB of memory this machine (or its cgroup limit) allows (largest: '", largest->name,
         "' with ", largest->rows, " rows of dim ", largest->dim,
         "); let big tables allocate rows on first touch (TZREC_EMBEDDING_STORAGE=auto or hash), ",
         "or reduce num_buckets / hash_bucket_size, e.g. --edit_config_json='{\"feature_configs[",
         "id_feature.num_buckets>1000000].id_feature.num_buckets\": 1000000}'");
  }
  for (auto& storage : storages_) storage->Allocate(/*initialize=*/false);
  // Initialise in the order one process would (tables grouped by dim in order of first
  // appearance), so every rank, sharded or not, draws the same random values.
  std::vector<int> dims;
  for (const EmbeddingTableSpec& spec : specs_) {
    if (std::find(dims.begin(), dims.end(), spec.dim) == dims.end()) dims.push_back(spec.dim);
  }
  for (int dim : dims) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      const EmbeddingTableSpec& spec = specs_[i];
      if (spec.dim != dim) continue;
      const size_t s = storage_of_table[i];
      const TableShard& shard = storage_shards_[s];
      storages_[s]->InitializeTable(tables_[i], spec.rows, spec.dim,
                                    shard.sharded() ? shard.row_offset(shard.rank) : 0,
                                    shard.sharded() ? shard.row_step() : 1,
                                    shard.sharded() ? shard.column_begin(shard.rank) : 0);
    }
  }
  auto by_storage = [&](const std::vector<LookupSpec>& lookups, std::vector<std::vector<int>>* out) {
    out->assign(storages_.size(), {});
    for (size_t i = 0; i < lookups.size(); ++i) {
      EmbeddingStorage* storage = tables_[lookups[i].table]->storage();
      for (size_t s = 0; s < storages_.size(); ++s) {
        if (storages_[s].get() == storage) (*out)[s].push_back(static_cast<int>(i));
      }
    }
  };
  by_storage(lookups_, &storage_lookups_);
  by_storage(sequence_lookups_, &storage_sequence_lookups_);
  zch_.clear();
  zch_.resize(specs_.size());
  for (size_t t = 0; t < specs_.size(); ++t) {
    if (specs_[t].zch) zch_[t] = std::make_unique<ZchRowIndex>(*specs_[t].zch, specs_[t].name);
  }
  MaterializeDynamicTables();
  PairCompanionStorages();
  materialized_ = true;
}

void EmbeddingCollection::PairCompanionStorages() {
  const size_t n = storages_.size();
  storage_companion_.assign(n, -1);
  storage_rides_.assign(n, false);
  companion_lookup_.assign(n, {});
  for (size_t s = 0; s < n; ++s) companion_lookup_[s].assign(storage_lookups_[s].size(), -1);
  if (std::getenv("TZREC_PAIRED_LOOKUPS") && std::strcmp(std::getenv("TZREC_PAIRED_LOOKUPS"), "0") == 0) return;
  // A storage takes part when it is whole here, holds fp32 rows and reads plain tables (ids
  // are rows: no hash-stored, zch or dynamicemb ones).
  auto plain = [&](size_t s) {
    if (storage_shards_[s].sharded() || storages_[s]->row_format() != RowFormat::kFloat32 ||
        storages_[s]->int8_rows()) {
      return false;
    }
    for (int i : storage_lookups_[s]) {
      const int t = lookups_[i].table;
      if (tables_[t]->hashed() || tables_[t]->managed() || specs_[t].zch || specs_[t].dynamicemb) return false;
    }
    return true;
  };
  for (size_t c = 0; c < n; ++c) {
    if (storage_lookups_[c].empty() || !storage_sequence_lookups_[c].empty() || !plain(c)) continue;
    // Each of the companion's tables is read by one lookup.
    std::set<int> companion_tables;
    bool one_lookup_per_table = true;
    for (int i : storage_lookups_[c]) one_lookup_per_table &= companion_tables.insert(lookups_[i].table).second;
    if (!one_lookup_per_table) continue;
    for (size_t p = 0; p < n; ++p) {
      if (p == c || storage_rides_[p] || storage_companion_[p] >= 0 || storage_rides_[c] ||
          storage_companion_[c] >= 0 || !plain(p)) {
        continue;
      }
      // Every companion lookup rides with the one lookup of the same feature in p, whose table
      // has the same rows and trains alike, and is ridden by no other companion lookup.
      std::vector<int> riding(storage_lookups_[p].size(), -1);
      std::set<int> ridden_tables;
      bool all = true;
      for (int i : storage_lookups_[c]) {
        int match = -1, matches = 0;
        for (size_t k = 0; k < storage_lookups_[p].size(); ++k) {
          if (lookups_[storage_lookups_[p][k]].feature == lookups_[i].feature) {
            match = static_cast<int>(k);
            ++matches;
          }
        }
        if (matches != 1) {
          all = false;
          break;
        }
        const int pt = lookups_[storage_lookups_[p][match]].table, ct = lookups_[i].table;
        if (specs_[pt].rows != specs_[ct].rows || specs_[pt].trainable != specs_[ct].trainable ||
            !ridden_tables.insert(pt).second) {
          all = false;
          break;
        }
        riding[match] = i;
      }
      if (!all) continue;
      storage_companion_[p] = static_cast<int>(c);
      storage_rides_[c] = true;
      companion_lookup_[p] = std::move(riding);
      LOG_DEBUG << "embedding lookups: the " << storage_lookups_[c].size() << " lookups of dim "
                << storages_[c]->dim() << " ride with those of dim " << storages_[p]->dim()
                << " (same features: one pass over their ids)";
      break;
    }
  }
}

LookupOutputs EmbeddingCollection::Lookup(const Batch& batch, bool training) {
  TZREC_CHECK(materialized_, "EmbeddingCollection::Materialize was not called");
  TZREC_CHECK(!training || optimizer_ != nullptr, "training lookup without a sparse optimizer");
  if (training) {
    ProfileZchTables(batch);
    TrainDynamicTables(batch);
  }
  LookupOutputs out;
  out.storage_out.resize(storages_.size());
  out.storage_dim = storage_out_dims_;
  out.storage_of.assign(lookups_.size(), -1);
  out.position_of.assign(lookups_.size(), -1);
  out.sequence_out.resize(sequence_lookups_.size());
  auto place = [&](size_t s, const std::vector<at::Tensor>& outputs) {
    out.storage_out[s] = outputs[0];
    for (size_t j = 0; j < storage_sequence_lookups_[s].size(); ++j) {
      out.sequence_out[storage_sequence_lookups_[s][j]] = outputs[1 + j];
    }
  };
  std::vector<ShardedStorageLookups> sharded;
  std::vector<size_t> sharded_storages;
  for (size_t s = 0; s < storages_.size(); ++s) {
    if (storage_lookups_[s].empty() && storage_sequence_lookups_[s].empty()) continue;
    if (storage_rides_[s]) continue;  // looked up with the storage it rides with
    std::vector<LookupTensors> pooled, sequences;
    int64_t bags = -1;
    for (size_t k = 0; k < storage_lookups_[s].size(); ++k) {
      const int i = storage_lookups_[s][k];
      const LookupSpec& lookup = lookups_[i];
      const Feature* feature = lookup.feature;
      const DataGroupBatch& group = batch.group(feature->data_group());
      TZREC_CHECK(bags < 0 || bags == group.size, "one storage's lookups span data groups of different sizes");
      bags = group.size;
      const JaggedIds& ids = batch.Sparse(feature->name(), feature->data_group());
      // Weighted features always carry a (maybe empty) weight tensor: the sharded lookup's
      // collectives must not depend on whether this rank's batch happens to have ids.
      at::Tensor weights;
      if (feature->weighted()) {
        weights = ids.weights.defined() ? ids.weights : at::zeros({0}, at::TensorOptions().dtype(at::kFloat));
      }
      EmbeddingTable* table = tables_[lookup.table];
      pooled.push_back({RowsOf(lookup.table, ids.values, training), ids.offsets, table,
                        feature->pooling() == "mean", weights});
      out.storage_of[i] = static_cast<int>(s);
      out.position_of[i] = static_cast<int>(k);
    }
    for (int i : storage_sequence_lookups_[s]) {
      const LookupSpec& lookup = sequence_lookups_[i];
      const Feature* feature = lookup.feature;
      const SequenceIds& ids = batch.Sequence(feature->name(), feature->data_group());
      at::Tensor weights;
      if (feature->weighted()) {
        weights = ids.weights.defined() ? ids.weights : at::zeros({0}, at::TensorOptions().dtype(at::kFloat));
      }
      EmbeddingTable* table = tables_[lookup.table];
      sequences.push_back({RowsOf(lookup.table, ids.values, training), ids.key_offsets, table,
                           feature->pooling() == "mean", weights});
      if (bags < 0) bags = batch.group(feature->data_group()).size;
    }
    if (storage_shards_[s].sharded()) {
      // Looked up below, all sharded storages in one exchange.
      sharded.push_back({storages_[s].get(), &storage_shards_[s], std::move(pooled), std::move(sequences), bags});
      sharded_storages.push_back(s);
      continue;
    }
    const int c = storage_companion_[s];
    if (c < 0) {
      place(s, StorageLookup(storages_[s].get(), pooled, sequences, bags, training, exchange_ ? &exchange_ : nullptr));
      continue;
    }
    CompanionLookups companion;
    companion.storage = storages_[c].get();
    companion.count = static_cast<int64_t>(storage_lookups_[c].size());
    for (size_t k = 0; k < storage_lookups_[s].size(); ++k) {
      const int riding = companion_lookup_[s][k];
      int position = -1;
      for (size_t j = 0; riding >= 0 && j < storage_lookups_[c].size(); ++j) {
        if (storage_lookups_[c][j] == riding) position = static_cast<int>(j);
      }
      companion.tables.push_back(riding >= 0 ? tables_[lookups_[riding].table] : nullptr);
      companion.positions.push_back(position);
      if (riding >= 0) {
        out.storage_of[riding] = c;
        out.position_of[riding] = position;
      }
    }
    std::vector<at::Tensor> outputs =
        StorageLookup(storages_[s].get(), pooled, sequences, bags, training, exchange_ ? &exchange_ : nullptr, &companion);
    out.storage_out[c] = outputs.back();
    outputs.pop_back();
    place(s, outputs);
  }
  if (!sharded.empty()) {
    std::vector<std::vector<at::Tensor>> outputs = ShardedLookups(comm_, sharded, training);
    for (size_t j = 0; j < sharded.size(); ++j) place(sharded_storages[j], outputs[j]);
  }
  return out;
}

void EmbeddingCollection::LookupEmpty() {
  at::Tensor no_values = at::zeros({0}, at::kLong);
  at::Tensor one_offset = at::zeros({1}, at::kLong);
  std::vector<ShardedStorageLookups> sharded;
  for (size_t s = 0; s < storages_.size(); ++s) {
    if (!storage_shards_[s].sharded()) continue;
    if (storage_lookups_[s].empty() && storage_sequence_lookups_[s].empty()) continue;
    auto empty = [&](const LookupSpec& lookup) {
      return LookupTensors{no_values, one_offset, tables_[lookup.table],
                           lookup.feature->pooling() == "mean",
                           lookup.feature->weighted() ? at::zeros({0}, at::kFloat) : at::Tensor()};
    };
    ShardedStorageLookups table{storages_[s].get(), &storage_shards_[s], {}, {}, 0};
    for (int i : storage_lookups_[s]) table.pooled.push_back(empty(lookups_[i]));
    for (int i : storage_sequence_lookups_[s]) table.sequences.push_back(empty(sequence_lookups_[i]));
    sharded.push_back(std::move(table));
  }
  if (!sharded.empty()) ShardedLookups(comm_, sharded, /*training=*/false);
}

void EmbeddingCollection::ApplyDeferredGradients(float factor) {
  for (auto& storage : storages_) ApplyDeferredRowGradients(storage.get(), factor);
}

bool EmbeddingCollection::DeferredGradientsFinite() const {
  for (const auto& storage : storages_) {
    for (const auto& [rows, grads] : storage->deferred_gradients()) {
      const at::Tensor g = grads.contiguous();
      if (FirstNonFinite(g.data_ptr<float>(), g.numel()) >= 0) return false;
    }
  }
  return true;
}

void EmbeddingCollection::DiscardDeferredGradients() {
  for (auto& storage : storages_) storage->deferred_gradients().clear();
}

bool EmbeddingCollection::has_sharded_tables() const {
  for (const TableShard& shard : storage_shards_) {
    if (shard.sharded()) return true;
  }
  return false;
}

const TableShard* EmbeddingCollection::ShardOf(const EmbeddingTable* table) const {
  for (size_t s = 0; s < storages_.size(); ++s) {
    if (storages_[s].get() == table->storage()) {
      return storage_shards_[s].sharded() ? &storage_shards_[s] : nullptr;
    }
  }
  return nullptr;
}

at::Tensor EmbeddingCollection::LocalPart(const TableShard& shard, const at::Tensor& logical, bool columns) {
  at::Tensor rows = shard.RowsOf(shard.rank, logical);
  if (!columns || shard.type != TableShard::Type::kColumnWise) return rows;
  return rows.narrow(1, shard.column_begin(shard.rank), shard.local_dim(shard.rank));
}

std::map<std::string, at::Tensor> EmbeddingCollection::GatherTable(const EmbeddingTable* table,
                                                                  const TableShard& shard,
                                                                  bool with_optimizer_state) const {
  std::map<std::string, at::Tensor> out;
  const int world = shard.world_size;
  std::vector<std::pair<std::string, at::Tensor>> parts = {{"weight", table->weight()}};
  if (with_optimizer_state) {
    for (auto& kv : table->optimizer_state()) parts.push_back(kv);
  }
  for (auto& [name, local] : parts) {
    // Width of this tensor on rank r: the weight's local dim, or the state slice's width.
    auto width_on = [&, name = name](int r) {
      const int local_dim = shard.local_dim(r);
      if (name == "weight") return local_dim;
      for (const auto& slice : table->storage()->optimizer().spec().StateSlices(std::max(local_dim, 1))) {
        if (slice.name == name) return slice.width;
      }
      return local_dim;
    };
    int64_t max_rows = 0;
    int max_width = 0;
    for (int r = 0; r < world; ++r) {
      max_rows = std::max(max_rows, shard.local_rows(r));
      max_width = std::max(max_width, width_on(r));
    }
    at::Tensor padded = at::zeros({std::max<int64_t>(max_rows, 1), std::max(max_width, 1)}, at::kFloat);
    if (local.size(0) > 0 && local.size(1) > 0) {
      padded.narrow(0, 0, local.size(0)).narrow(1, 0, local.size(1)).copy_(local);
    }
    at::Tensor all = comm_->AllGather(padded);
    const int64_t stride = padded.size(0);
    at::Tensor logical;
    if (shard.type == TableShard::Type::kColumnWise && width_on(0) == shard.local_dim(0)) {
      std::vector<at::Tensor> columns;
      for (int r = 0; r < world; ++r) {
        columns.push_back(all.narrow(0, r * stride, shard.rows).narrow(1, 0, width_on(r)));
      }
      logical = at::cat(columns, 1);
    } else if (shard.type == TableShard::Type::kColumnWise) {
      // Per-row state (row-wise Adagrad) of a column shard: rank 0's stands for the row.
      logical = all.narrow(0, 0, shard.rows).narrow(1, 0, width_on(0)).clone();
    } else {
      // Every logical row is on exactly one rank: rank r's local rows go to its logical rows.
      logical = at::empty({shard.rows, width_on(shard.rank)}, at::kFloat);
      for (int r = 0; r < world; ++r) {
        const int64_t n = shard.local_rows(r);
        if (n == 0) continue;
        shard.RowsOf(r, logical).copy_(all.narrow(0, r * stride, n).narrow(1, 0, width_on(r)));
      }
    }
    out[name] = logical.contiguous();
  }
  return out;
}

int EmbeddingCollection::RestoreRows(EmbeddingTable* table, const std::map<std::string, at::Tensor>& saved,
                                     bool with_optimizer_state, const std::string& source,
                                     const std::function<void(const std::string&)>& missing) {
  EmbeddingStorage* storage = table->storage();
  auto saved_weight = saved.find("weight");
  if (saved_weight == saved.end()) {
    missing(table->name());
    return 0;
  }
  // The saved rows: `ids` with their tensors, all [n, width].
  std::map<std::string, at::Tensor> rows;
  at::Tensor ids;
  auto sparse = saved.find("ids");
  if (sparse != saved.end()) {
    ids = sparse->second;
    if (ids.dim() != 1 || ids.scalar_type() != at::kLong) {
      Fail(source, ": table ", table->name(), " ids are ", ids.scalar_type(), " ", ids.sizes(), ", not int64 [n]");
    }
    if (ids.numel() > 0 && (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= table->rows())) {
      Fail(source, ": table ", table->name(), " has ids outside [0, ", table->rows(), ")");
    }
    if (std::get<0>(at::_unique(ids)).numel() != ids.numel()) {
      Fail(source, ": table ", table->name(), " has repeated ids");
    }
    for (const auto& [name, tensor] : saved) {
      if (name != "ids" && name != "init_seed") rows[name] = tensor;
    }
    auto seed = saved.find("init_seed");
    if (seed != saved.end()) {
      if (seed->second.numel() != 1 || seed->second.scalar_type() != at::kLong) {
        Fail(source, ": table ", table->name(), " init_seed is not one int64");
      }
      // Rows not saved start from training's initial values, whatever this process's seed.
      storage->SetRowInitSeed(table, static_cast<uint64_t>(seed->second.item<int64_t>()));
      if (!table->hashed()) storage->ReinitializeTable(table);
    }
  } else {
    // A dense table into a hash-stored one: only rows trained away from their initial values.
    const at::Tensor weight = saved_weight->second.to(at::kFloat).contiguous();
    if (weight.dim() != 2 || weight.size(0) != table->rows() || weight.size(1) != table->dim()) {
      Fail(source, ": table ", table->name(), " has shape ", weight.sizes(), " but the model's table has ",
           table->rows(), " rows of dim ", table->dim());
    }
    std::vector<int64_t> changed;
    const int64_t chunk = 1 << 16;
    at::Tensor initial = at::empty({chunk, table->dim()}, at::kFloat);
    for (int64_t begin = 0; begin < table->rows(); begin += chunk) {
      const int64_t n = std::min(chunk, table->rows() - begin);
      InitializeRowRange(table->row_init(), table->LogicalRow(begin), table->logical_row_step(), n,
                         table->logical_column_begin(), table->dim(), initial.data_ptr<float>(), table->dim());
      // An FP16 / BF16 table's initial values are the drawn ones rounded to 2 bytes.
      const at::Tensor as_stored = storage->half_rows() ? initial.to(storage->half_type()).to(at::kFloat) : initial;
      const float* saved_rows = weight.data_ptr<float>() + begin * table->dim();
      const float* init_rows = as_stored.data_ptr<float>();
      for (int64_t r = 0; r < n; ++r) {
        if (std::memcmp(saved_rows + r * table->dim(), init_rows + r * table->dim(), 4 * table->dim()) != 0) {
          changed.push_back(begin + r);
        }
      }
    }
    ids = at::empty({static_cast<int64_t>(changed.size())}, at::kLong);
    std::copy(changed.begin(), changed.end(), ids.data_ptr<int64_t>());
    for (const auto& [name, tensor] : saved) rows[name] = tensor.index_select(0, ids);
  }
  at::Tensor target_rows = ids;
  if (table->hashed()) {
    storage->ClearHashedTable(table);
    target_rows = storage->SlotsOf(table, ids);  // new rows, initialised, in id order
  }
  std::vector<std::pair<std::string, at::Tensor>> targets = {{"weight", table->stored()}};
  if (with_optimizer_state) {
    for (auto& kv : table->optimizer_state()) targets.push_back(kv);
  }
  int restored = 0;
  for (auto& [name, target] : targets) {
    const std::string what = table->name() + (name == "weight" ? "" : " " + name);
    auto it = rows.find(name);
    if (it == rows.end()) {
      missing(what);
      continue;
    }
    at::Tensor part = it->second;
    if (name == "weight") part = storage->StoredForm(part);
    if (part.dim() != 2 || part.size(0) != ids.numel() || part.size(1) != target.size(1) ||
        part.scalar_type() != target.scalar_type()) {
      Fail(source, ": table ", what, " is ", part.scalar_type(), " ", part.sizes(), " for ", ids.numel(),
           " ids but the model needs ", target.scalar_type(), " rows of width ", target.size(1));
    }
    target.index_copy_(0, target_rows, part);
    ++restored;
  }
  return restored;
}

void EmbeddingCollection::VisitTableStates(
    bool with_optimizer_state,
    const std::function<void(const std::string&, const std::map<std::string, at::Tensor>&)>& fn) const {
  for (size_t t = 0; t < tables_.size(); ++t) {
    const EmbeddingTable* table = tables_[t];
    if (dynamic_[t]) {
      fn(table->name(), DynamicTableState(static_cast<int>(t), with_optimizer_state));
      continue;
    }
    if (const TableShard* shard = ShardOf(table)) {
      std::map<std::string, at::Tensor> tensors = GatherTable(table, *shard, with_optimizer_state);
      AddZchState(static_cast<int>(t), &tensors);
      fn(table->name(), tensors);
      continue;
    }
    // INT8 inference tables read back as the fp32 values their lookups use.
    std::map<std::string, at::Tensor> tensors = {
        {"weight", table->storage()->int8_rows()
                       ? DequantizeTable(table->stored(), TableDtype::kINT8, table->dim(), table->name())
                       : table->weight()}};
    if (with_optimizer_state) {
      for (auto& kv : table->optimizer_state()) tensors[kv.first] = kv.second;
    }
    if (table->hashed()) {
      // Ordered by id, so the saved form does not depend on the order rows were touched in.
      std::vector<int64_t> ids = table->resident_ids();
      at::Tensor id_tensor = at::empty({static_cast<int64_t>(ids.size())}, at::kLong);
      std::copy(ids.begin(), ids.end(), id_tensor.data_ptr<int64_t>());
      at::Tensor order = std::get<1>(id_tensor.sort());
      for (auto& kv : tensors) kv.second = kv.second.index_select(0, order);
      tensors["ids"] = id_tensor.index_select(0, order);
      // The seed of the initial values of rows not saved (restored with the rows).
      tensors["init_seed"] = at::scalar_tensor(static_cast<int64_t>(table->row_init().seed), at::kLong);
    }
    AddZchState(static_cast<int>(t), &tensors);
    fn(table->name(), tensors);
  }
}

int EmbeddingCollection::RestoreTables(
    const std::map<std::string, std::map<std::string, at::Tensor>>& saved, bool with_optimizer_state,
    const std::string& source, const std::function<void(const std::string&)>& missing) {
  int restored = 0;
  for (size_t t = 0; t < tables_.size(); ++t) {
    EmbeddingTable* table = tables_[t];
    const TableShard* shard = ShardOf(table);
    auto saved_table = saved.find(table->name());
    if (dynamic_[t]) {
      restored += RestoreDynamicTable(static_cast<int>(t), saved_table == saved.end() ? nullptr : &saved_table->second,
                                      with_optimizer_state, source, missing);
      continue;
    }
    if (zch_[t]) {
      restored += RestoreZchState(static_cast<int>(t), saved_table == saved.end() ? nullptr : &saved_table->second,
                                  source, missing);
    }
    if (saved_table != saved.end() && (table->hashed() || saved_table->second.count("ids"))) {
      if (shard) Fail(source, ": table ", table->name(), " was saved hash-stored and cannot restore into a sharded table");
      restored += RestoreRows(table, saved_table->second, with_optimizer_state, source, missing);
      continue;
    }
    std::vector<std::pair<std::string, at::Tensor>> targets = {{"weight", table->stored()}};
    if (with_optimizer_state) {
      for (auto& kv : table->optimizer_state()) targets.push_back(kv);
    }
    for (auto& [name, target] : targets) {
      const std::string what = table->name() + (name == "weight" ? "" : " " + name);
      if (saved_table == saved.end() || !saved_table->second.count(name)) {
        missing(what);
        continue;
      }
      const at::Tensor& logical = saved_table->second.at(name);
      at::Tensor part = logical;
      if (shard) {
        // Checkpoints hold logical tables: keep this rank's part.
        if (logical.dim() != 2 || logical.size(0) != shard->rows) {
          Fail(source, ": table ", what, " has shape ", logical.sizes(), " but the model's table has ",
               shard->rows, " rows");
        }
        part = LocalPart(*shard, logical, logical.size(1) == shard->dim);
      }
      // INT8, FP16 and BF16 tables take their stored form, or fp32 weights they convert.
      if (name == "weight") part = table->storage()->StoredForm(part);
      if (part.sizes() != target.sizes() || part.scalar_type() != target.scalar_type()) {
        Fail(source, ": table ", what, " is ", part.scalar_type(), " ", logical.sizes(),
             " but the model needs ", target.scalar_type(), " ",
             shard ? StrCat("[", shard->rows, ", ", shard->dim, "]") : StrCat(target.sizes()));
      }
      target.copy_(part);
      ++restored;
    }
  }
  return restored;
}

}  // namespace tzrec
