// The managed-id part of EmbeddingCollection (embedding_collection.h): tables whose raw ids
// reach rows through an index of their own. zch: recording training ids in each table's
// ZchRowIndex, admitting / evicting at round ends (ranks merge their histories first).
// dynamicemb: admitting / evicting each training batch's ids in the table's DynamicRowIndex
// (ranks merge their ids first). Both: mapping ids to rows and the index's saved state.
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/embedding/embedding_collection.h"
#include "tzrec/embedding/row_init.h"
#include "tzrec/embedding/table_quantization.h"

namespace tzrec {
namespace {

// Every rank's rows of int64 `columns` (equal lengths; this rank's rows), as columns per rank:
// out[r][c] is rank r's column c. Two all-gathers (the row counts, then the rows padded to the
// longest rank's), in the same order on every rank.
std::vector<std::vector<std::vector<int64_t>>> GatherInt64Rows(ShardComm* comm,
                                                               const std::vector<const std::vector<int64_t>*>& columns) {
  const int64_t width = static_cast<int64_t>(columns.size());
  const int64_t n = static_cast<int64_t>(columns.front()->size());
  const at::Tensor sizes = comm->AllGather(at::full({1}, n, at::kLong));
  const int64_t most = std::max<int64_t>(sizes.max().item<int64_t>(), 1);
  at::Tensor mine = at::zeros({most, width}, at::kLong);
  int64_t* m = mine.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < width; ++c) m[i * width + c] = (*columns[c])[i];
  }
  const at::Tensor all = comm->AllGather(mine);
  std::vector<std::vector<std::vector<int64_t>>> out(comm->world_size(), std::vector<std::vector<int64_t>>(width));
  for (int r = 0; r < comm->world_size(); ++r) {
    const int64_t* a = all.data_ptr<int64_t>() + r * most * width;
    for (int64_t i = 0; i < sizes[r].item<int64_t>(); ++i) {
      for (int64_t c = 0; c < width; ++c) out[r][c].push_back(a[i * width + c]);
    }
  }
  return out;
}

}  // namespace

const ZchRowIndex* EmbeddingCollection::zch_index(const std::string& table) const {
  for (size_t t = 0; t < specs_.size() && t < zch_.size(); ++t) {
    if (specs_[t].name == table) return zch_[t].get();
  }
  return nullptr;
}

std::vector<std::pair<const int64_t*, int64_t>> EmbeddingCollection::IdsOfTable(int t, const Batch& batch,
                                                                               std::vector<at::Tensor>* held) const {
  std::vector<std::pair<const int64_t*, int64_t>> parts;
  held->clear();
  held->reserve(lookups_.size() + sequence_lookups_.size());
  auto add = [&](const at::Tensor& values) {
    held->push_back(values.contiguous());
    parts.emplace_back(held->back().data_ptr<int64_t>(), held->back().numel());
  };
  for (const LookupSpec& lookup : lookups_) {
    if (lookup.table == t) add(batch.Sparse(lookup.feature->name(), lookup.feature->data_group()).values);
  }
  for (const LookupSpec& lookup : sequence_lookups_) {
    if (lookup.table == t) add(batch.Sequence(lookup.feature->name(), lookup.feature->data_group()).values);
  }
  return parts;
}

void EmbeddingCollection::ProfileZchTables(const Batch& batch) {
  for (size_t t = 0; t < zch_.size(); ++t) {
    ZchRowIndex* index = zch_[t].get();
    if (!index) continue;
    std::vector<at::Tensor> held;
    if (!index->Record(IdsOfTable(static_cast<int>(t), batch, &held))) continue;
    ZchRowIndex::History history = index->TakeHistory();
    if (comm_ && comm_->world_size() > 1) {
      // Every rank admits from the union of the ranks' rounds, so the indexes stay identical.
      auto gathered = GatherInt64Rows(comm_, {&history.ids, &history.counts, &history.last_access});
      std::vector<ZchRowIndex::History> parts_of_ranks(comm_->world_size());
      for (int r = 0; r < comm_->world_size(); ++r) {
        parts_of_ranks[r].ids = std::move(gathered[r][0]);
        parts_of_ranks[r].counts = std::move(gathered[r][1]);
        parts_of_ranks[r].last_access = std::move(gathered[r][2]);
      }
      history = ZchRowIndex::History::Merge(parts_of_ranks);
    }
    const std::vector<int64_t> rows = index->Evict(history);
    if (rows.empty()) continue;
    // TorchRec resets evicted rows to their initial values with fresh optimizer state.
    EmbeddingTable* table = tables_[t];
    std::vector<int64_t> local;
    const TableShard* shard = ShardOf(table);
    for (int64_t row : rows) {
      if (!shard) {
        local.push_back(row);
      } else if (shard->OwnerOfRow(row) == shard->rank) {
        local.push_back(shard->LocalRow(row));
      }
    }
    table->storage()->ResetRows(table, local);
  }
}

at::Tensor EmbeddingCollection::RowsOf(int t, const at::Tensor& ids, bool training) {
  EmbeddingTable* table = tables_[t];
  if (!zch_[t] && !dynamic_[t]) return table->storage()->SlotsOf(table, ids);
  const at::Tensor in = ids.contiguous();
  at::Tensor rows = at::empty({in.numel()}, at::kLong);
  if (zch_[t]) {
    zch_[t]->Map(in.data_ptr<int64_t>(), in.numel(), rows.data_ptr<int64_t>());
  } else {
    const DynamicRowIndex& index = *dynamic_[t];
    index.Map(in.data_ptr<int64_t>(), in.numel(), training ? index.unadmitted_row() : index.missing_row(),
              rows.data_ptr<int64_t>());
  }
  return rows;
}


namespace {

at::Tensor LongTensor(const std::vector<int64_t>& values) {
  at::Tensor out = at::empty({static_cast<int64_t>(values.size())}, at::kLong);
  std::copy(values.begin(), values.end(), out.data_ptr<int64_t>());
  return out;
}

std::vector<int64_t> LongVector(const at::Tensor& tensor, const std::string& what) {
  if (tensor.scalar_type() != at::kLong || tensor.dim() > 1) {
    Fail(what, " is ", tensor.scalar_type(), " ", tensor.sizes(), ", not int64 [n]");
  }
  const at::Tensor flat = tensor.contiguous().reshape({-1});
  return std::vector<int64_t>(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
}

}  // namespace

void EmbeddingCollection::AddZchState(int t, std::map<std::string, at::Tensor>* tensors) const {
  if (t >= static_cast<int>(zch_.size()) || !zch_[t]) return;
  ZchRowIndex::State state = zch_[t]->SaveState();
  (*tensors)["zch_ids"] = LongTensor(state.sorted_ids);
  (*tensors)["zch_rows"] = LongTensor(state.rows);
  if (!state.counts.empty()) (*tensors)["zch_counts"] = LongTensor(state.counts);
  if (!state.last_access.empty()) (*tensors)["zch_last_access_iter"] = LongTensor(state.last_access);
  (*tensors)["zch_step"] = at::scalar_tensor(state.step, at::kLong);
  (*tensors)["zch_history_capacity"] = at::scalar_tensor(state.history_capacity, at::kLong);
}

int EmbeddingCollection::RestoreZchState(int t, const std::map<std::string, at::Tensor>* saved,
                                         const std::string& source,
                                         const std::function<void(const std::string&)>& missing) {
  ZchRowIndex* index = zch_[t].get();
  const std::string& name = specs_[t].name;
  if (!saved || !saved->count("zch_ids") || !saved->count("zch_rows") || !saved->count("zch_step")) {
    missing(name + " zch state");
    return 0;
  }
  const bool counts = index->spec().policy != fg::ZchSpec::Policy::kLru;
  const bool last = index->spec().policy != fg::ZchSpec::Policy::kLfu;
  ZchRowIndex::State state;
  const std::string what = source + ": table " + name;
  state.sorted_ids = LongVector(saved->at("zch_ids"), what + " zch_ids");
  state.rows = LongVector(saved->at("zch_rows"), what + " zch_rows");
  const std::vector<int64_t> step = LongVector(saved->at("zch_step"), what + " zch_step");
  if (step.size() != 1) Fail(what, " zch_step is not one int64");
  state.step = step[0];
  auto capacity = saved->find("zch_history_capacity");
  if (capacity != saved->end()) {
    const std::vector<int64_t> value = LongVector(capacity->second, what + " zch_history_capacity");
    if (value.size() != 1) Fail(what, " zch_history_capacity is not one int64");
    state.history_capacity = value[0];
  }
  const std::tuple<const char*, bool, std::vector<int64_t>*> metadata[] = {
      {"zch_counts", counts, &state.counts}, {"zch_last_access_iter", last, &state.last_access}};
  for (const auto& [key, wanted, out] : metadata) {
    if (!wanted) continue;
    auto it = saved->find(key);
    if (it == saved->end()) {
      // Saved under another policy: the slots keep their ids, this policy's metadata starts over.
      LOG_WARNING << what << " has no " << key << " (saved with another eviction policy): starting it at 0";
      out->assign(index->size(), 0);
    } else {
      *out = LongVector(it->second, what + " " + key);
    }
  }
  index->RestoreState(std::move(state), what);
  return 1;
}

const DynamicRowIndex* EmbeddingCollection::dynamic_index(const std::string& table) const {
  for (size_t t = 0; t < specs_.size() && t < dynamic_.size(); ++t) {
    if (specs_[t].name == table) return dynamic_[t].get();
  }
  return nullptr;
}

namespace {

// A dynamicemb table's initial values as row_init.h draws them, keyed by raw id.
RowInit DynamicRowInit(const std::string& table, const fg::DynamicEmbInit& init, int dim) {
  RowInit out;
  out.seed = TableInitSeed(table);
  out.mean = init.mean;
  out.std_dev = init.std_dev > 0 ? init.std_dev : 1.0 / std::sqrt(static_cast<double>(dim));
  out.low = init.lower;
  out.high = init.upper;
  out.value = init.value;
  switch (init.mode) {
    case fg::DynamicEmbInit::Mode::kUniform: out.mode = RowInit::Mode::kUniform; break;
    case fg::DynamicEmbInit::Mode::kNormal: out.mode = RowInit::Mode::kNormal; break;
    case fg::DynamicEmbInit::Mode::kTruncatedNormal: out.mode = RowInit::Mode::kTruncatedNormal; break;
    case fg::DynamicEmbInit::Mode::kConstant: out.mode = RowInit::Mode::kConstant; break;
  }
  return out;
}

}  // namespace

void EmbeddingCollection::MaterializeDynamicTables() {
  dynamic_.clear();
  dynamic_.resize(specs_.size());
  for (size_t t = 0; t < specs_.size(); ++t) {
    if (!specs_[t].dynamicemb) continue;
    const fg::DynamicEmbSpec& spec = *specs_[t].dynamicemb;
    dynamic_[t] = std::make_unique<DynamicRowIndex>(spec, specs_[t].name);
    EmbeddingTable* table = tables_[t];
    EmbeddingStorage* storage = table->storage();
    storage->SetRowInit(table, DynamicRowInit(specs_[t].name, spec.init, specs_[t].dim));
    storage->FillRows(table, {dynamic_[t]->unadmitted_row()}, static_cast<float>(spec.unadmitted_value));
    storage->FillRows(table, {dynamic_[t]->missing_row()}, static_cast<float>(spec.eval_value));
    LOG_INFO << "dynamicemb table '" << specs_[t].name << "': " << spec.Describe()
             << ", rows allocated as ids are admitted";
  }
}

void EmbeddingCollection::TrainDynamicTables(const Batch& batch) {
  for (size_t t = 0; t < dynamic_.size(); ++t) {
    DynamicRowIndex* index = dynamic_[t].get();
    if (!index) continue;
    std::vector<at::Tensor> held;
    std::vector<int64_t> all;
    for (const auto& [ids, n] : IdsOfTable(static_cast<int>(t), batch, &held)) all.insert(all.end(), ids, ids + n);
    std::sort(all.begin(), all.end());
    // (id, occurrences) of this step; in a distributed run the ranks' pairs are merged, so every
    // replica admits and evicts alike and rows stay the same on every rank.
    std::vector<int64_t> unique, counts;
    for (size_t i = 0; i < all.size();) {
      size_t j = i;
      while (j < all.size() && all[j] == all[i]) ++j;
      unique.push_back(all[i]);
      counts.push_back(static_cast<int64_t>(j - i));
      i = j;
    }
    if (comm_ && comm_->world_size() > 1) {
      const auto gathered = GatherInt64Rows(comm_, {&unique, &counts});
      std::vector<std::pair<int64_t, int64_t>> pairs;
      for (const auto& rank : gathered) {
        for (size_t i = 0; i < rank[0].size(); ++i) pairs.emplace_back(rank[0][i], rank[1][i]);
      }
      std::sort(pairs.begin(), pairs.end());
      unique.clear();
      counts.clear();
      for (const auto& [id, count] : pairs) {
        if (!unique.empty() && unique.back() == id) {
          counts.back() += count;
        } else {
          unique.push_back(id);
          counts.push_back(count);
        }
      }
    }
    const DynamicRowIndex::Admitted admitted = index->Train(unique, counts);
    EmbeddingTable* table = tables_[t];
    EmbeddingStorage* storage = table->storage();
    storage->SetResidentRows(table, index->size());
    // New ids start from their initial values with fresh optimizer state (also rows taken from
    // evicted ids); the shared row of ids without one drops what the last backward wrote to it.
    storage->InitializeRows(table, admitted.rows, admitted.ids);
    storage->FillRows(table, {index->unadmitted_row()}, static_cast<float>(index->spec().unadmitted_value));
  }
}

std::map<std::string, at::Tensor> EmbeddingCollection::DynamicTableState(int t, bool with_optimizer_state) const {
  const DynamicRowIndex& index = *dynamic_[t];
  const EmbeddingTable* table = tables_[t];
  const DynamicRowIndex::State state = index.SaveState();
  at::Tensor rows = at::empty({static_cast<int64_t>(state.ids.size())}, at::kLong);
  index.Map(state.ids.data(), static_cast<int64_t>(state.ids.size()), -1, rows.data_ptr<int64_t>());
  std::map<std::string, at::Tensor> tensors;
  tensors["weight"] = (table->storage()->int8_rows()
                           ? DequantizeTable(table->stored(), TableDtype::kINT8, table->dim(), table->name())
                           : table->weight())
                          .index_select(0, rows);
  if (with_optimizer_state) {
    for (auto& [name, tensor] : table->optimizer_state()) tensors[name] = tensor.index_select(0, rows);
  }
  tensors["dynamicemb_ids"] = LongTensor(state.ids);
  tensors["dynamicemb_scores"] = LongTensor(state.scores);
  tensors["dynamicemb_step"] = at::scalar_tensor(state.step, at::kLong);
  tensors["dynamicemb_counter_ids"] = LongTensor(state.counter_ids);
  tensors["dynamicemb_counter_counts"] = LongTensor(state.counter_counts);
  return tensors;
}

int EmbeddingCollection::RestoreDynamicTable(int t, const std::map<std::string, at::Tensor>* saved,
                                             bool with_optimizer_state, const std::string& source,
                                             const std::function<void(const std::string&)>& missing) {
  DynamicRowIndex& index = *dynamic_[t];
  EmbeddingTable* table = tables_[t];
  EmbeddingStorage* storage = table->storage();
  const std::string& name = specs_[t].name;
  const std::string what = source + ": table " + name;
  if (!saved) {
    missing(name);
    return 0;
  }
  for (const char* key : {"weight", "dynamicemb_ids", "dynamicemb_scores", "dynamicemb_step"}) {
    if (!saved->count(key)) {
      missing(name + (std::string(key) == "weight" ? "" : std::string(" ") + key));
      return 0;
    }
  }
  DynamicRowIndex::State state;
  state.ids = LongVector(saved->at("dynamicemb_ids"), what + " dynamicemb_ids");
  state.scores = LongVector(saved->at("dynamicemb_scores"), what + " dynamicemb_scores");
  const std::vector<int64_t> step = LongVector(saved->at("dynamicemb_step"), what + " dynamicemb_step");
  if (step.size() != 1) Fail(what, " dynamicemb_step is not one int64");
  state.step = step[0];
  if (saved->count("dynamicemb_counter_ids") && saved->count("dynamicemb_counter_counts")) {
    state.counter_ids = LongVector(saved->at("dynamicemb_counter_ids"), what + " dynamicemb_counter_ids");
    state.counter_counts = LongVector(saved->at("dynamicemb_counter_counts"), what + " dynamicemb_counter_counts");
  }
  index.RestoreState(state, what);
  const int64_t n = index.size();
  storage->SetResidentRows(table, n);
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) rows[r] = r;
  storage->InitializeRows(table, rows, state.ids);  // fresh optimizer state unless restored below
  std::vector<std::pair<std::string, at::Tensor>> targets = {{"weight", table->stored()}};
  if (with_optimizer_state) {
    for (auto& kv : table->optimizer_state()) targets.push_back(kv);
  }
  int restored = 1;
  for (auto& [key, target] : targets) {
    auto it = saved->find(key);
    if (it == saved->end()) {
      missing(name + " " + key);
      continue;
    }
    at::Tensor part = it->second;
    if (key == "weight") part = storage->StoredForm(part);
    if (part.dim() != 2 || part.size(0) != n || part.size(1) != target.size(1) ||
        part.scalar_type() != target.scalar_type()) {
      Fail(what, " ", key, " is ", part.scalar_type(), " ", part.sizes(), " for ", n, " ids but the model needs ",
           target.scalar_type(), " rows of width ", target.size(1));
    }
    target.copy_(part);
    ++restored;
  }
  return restored;
}

}  // namespace tzrec
