// The zero-collision-hashing part of EmbeddingCollection (embedding_collection.h): recording
// training ids in each zch table's ZchRowIndex, admitting / evicting at round ends (ranks
// merge their histories first), mapping ids to rows, and the index's saved state.
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>

#include <tuple>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/embedding/embedding_collection.h"

namespace tzrec {

const ZchRowIndex* EmbeddingCollection::zch_index(const std::string& table) const {
  for (size_t t = 0; t < specs_.size() && t < zch_.size(); ++t) {
    if (specs_[t].name == table) return zch_[t].get();
  }
  return nullptr;
}

void EmbeddingCollection::ProfileZchTables(const Batch& batch) {
  for (size_t t = 0; t < zch_.size(); ++t) {
    ZchRowIndex* index = zch_[t].get();
    if (!index) continue;
    std::vector<at::Tensor> held;
    std::vector<std::pair<const int64_t*, int64_t>> parts;
    auto add = [&](const at::Tensor& values) {
      held.push_back(values.contiguous());
      parts.emplace_back(held.back().data_ptr<int64_t>(), held.back().numel());
    };
    for (const LookupSpec& lookup : lookups_) {
      if (lookup.table == static_cast<int>(t)) add(batch.Sparse(lookup.feature->name(), lookup.feature->data_group()).values);
    }
    for (const LookupSpec& lookup : sequence_lookups_) {
      if (lookup.table == static_cast<int>(t)) add(batch.Sequence(lookup.feature->name(), lookup.feature->data_group()).values);
    }
    if (!index->Record(parts)) continue;
    ZchRowIndex::History history = index->TakeHistory();
    if (comm_ && comm_->world_size() > 1) {
      // Every rank admits from the union of the ranks' rounds, so the indexes stay identical.
      const int64_t n = static_cast<int64_t>(history.ids.size());
      const at::Tensor sizes = comm_->AllGather(at::full({1}, n, at::kLong));
      const int64_t most = std::max<int64_t>(sizes.max().item<int64_t>(), 1);
      at::Tensor mine = at::zeros({most, 3}, at::kLong);
      int64_t* m = mine.data_ptr<int64_t>();
      for (int64_t i = 0; i < n; ++i) {
        m[i * 3] = history.ids[i];
        m[i * 3 + 1] = history.counts[i];
        m[i * 3 + 2] = history.last_access[i];
      }
      const at::Tensor all = comm_->AllGather(mine);
      std::vector<ZchRowIndex::History> parts_of_ranks(comm_->world_size());
      for (int r = 0; r < comm_->world_size(); ++r) {
        const int64_t* a = all.data_ptr<int64_t>() + r * most * 3;
        for (int64_t i = 0; i < sizes[r].item<int64_t>(); ++i) {
          parts_of_ranks[r].ids.push_back(a[i * 3]);
          parts_of_ranks[r].counts.push_back(a[i * 3 + 1]);
          parts_of_ranks[r].last_access.push_back(a[i * 3 + 2]);
        }
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
      } else if (row >= shard->row_begin(shard->rank) && row < shard->row_end(shard->rank)) {
        local.push_back(row - shard->row_begin(shard->rank));
      }
    }
    table->storage()->ResetRows(table, local);
  }
}

at::Tensor EmbeddingCollection::RowsOf(int t, const at::Tensor& ids) {
  EmbeddingTable* table = tables_[t];
  if (!zch_[t]) return table->storage()->SlotsOf(table, ids);
  const at::Tensor in = ids.contiguous();
  at::Tensor rows = at::empty({in.numel()}, at::kLong);
  zch_[t]->Map(in.data_ptr<int64_t>(), in.numel(), rows.data_ptr<int64_t>());
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


}  // namespace tzrec
