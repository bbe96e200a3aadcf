#include "tzrec/batch/batch.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <memory>
#include <random>
#include <set>

#include "tzrec/common/error.h"

namespace tzrec {
namespace {

template <typename T>
at::Tensor Borrow(const std::shared_ptr<ParsedBatch>& owner, std::vector<T>& data,
                  at::IntArrayRef sizes, at::ScalarType type) {
  if (data.empty()) return at::zeros(sizes, at::TensorOptions().dtype(type));
  return at::from_blob(
      data.data(), sizes, [owner](void*) {}, at::TensorOptions().dtype(type));
}

at::Tensor Offsets(const std::vector<int32_t>& lengths) {
  const int64_t n = static_cast<int64_t>(lengths.size());
  at::Tensor offsets = at::empty({n + 1}, at::TensorOptions().dtype(at::kLong));
  int64_t* o = offsets.data_ptr<int64_t>();
  o[0] = 0;
  for (int64_t i = 0; i < n; ++i) o[i + 1] = o[i] + lengths[i];
  return offsets;
}

}  // namespace

const DataGroupBatch& Batch::group(const std::string& name) const {
  auto it = data_groups.find(name);
  if (it == data_groups.end()) Fail("batch has no data group '", name, "'");
  return it->second;
}

const JaggedIds& Batch::Sparse(const std::string& name, const std::string& data_group) const {
  const DataGroupBatch& g = group(data_group);
  auto it = g.sparse.find(name);
  if (it == g.sparse.end()) Fail("batch lacks sparse feature '", name, "' (data group ", data_group, ")");
  return it->second;
}

const at::Tensor& Batch::Dense(const std::string& name, const std::string& data_group) const {
  const DataGroupBatch& g = group(data_group);
  auto it = g.dense.find(name);
  if (it == g.dense.end()) Fail("batch lacks dense feature '", name, "' (data group ", data_group, ")");
  return it->second;
}

const SequenceIds& Batch::Sequence(const std::string& name, const std::string& data_group) const {
  const DataGroupBatch& g = group(data_group);
  auto it = g.sequences.find(name);
  if (it == g.sequences.end()) Fail("batch lacks sequence feature '", name, "' (data group ", data_group, ")");
  return it->second;
}

const DenseSequence& Batch::DenseSeq(const std::string& name, const std::string& data_group) const {
  const DataGroupBatch& g = group(data_group);
  auto it = g.dense_sequences.find(name);
  if (it == g.dense_sequences.end()) {
    Fail("batch lacks dense sequence feature '", name, "' (data group ", data_group, ")");
  }
  return it->second;
}

const at::Tensor& Batch::Label(const std::string& name) const {
  auto it = labels.find(name);
  if (it == labels.end()) Fail("batch has no label '", name, "' (data_config.label_fields)");
  return it->second;
}

const at::Tensor& Batch::SampleWeight(const std::string& name) const {
  auto it = sample_weights.find(name);
  if (it == sample_weights.end()) {
    Fail("batch has no sample weight '", name, "' (data_config.sample_weight_fields)");
  }
  return it->second;
}

Batch ToBatch(ParsedBatch&& parsed) {
  auto owner = std::make_shared<ParsedBatch>(std::move(parsed));
  Batch batch;
  const int64_t b = owner->size;
  batch.size = b;
  DataGroupBatch& base = batch.data_groups[kBaseDataGroup];
  base.size = b;
  // Sampled features (negative sampler) hold the batch's rows and then the sampled ones, in
  // their own data group, or in __BASE__ (force_base_data_group: every feature is padded).
  const std::set<std::string> sampled(owner->sampled_features.begin(), owner->sampled_features.end());
  auto group_of = [&](const std::string& name) -> std::pair<DataGroupBatch*, int64_t> {
    if (!sampled.count(name)) return {&base, b};
    DataGroupBatch& group = batch.data_groups[owner->sampled_group];
    group.size = b + owner->sampled_rows;
    return {&group, group.size};
  };
  for (auto& kv : owner->sparse) {
    SparseValues& sv = kv.second;
    auto [group, rows] = group_of(kv.first);
    at::Tensor values = Borrow(owner, sv.values, {static_cast<int64_t>(sv.values.size())}, at::kLong);
    at::Tensor weights;
    if (!sv.weights.empty()) {
      weights = Borrow(owner, sv.weights, {static_cast<int64_t>(sv.weights.size())}, at::kFloat);
    }
    if (sv.sequence) {
      SequenceIds seq;
      seq.values = values;
      seq.weights = weights;
      seq.step_lengths = Borrow(owner, sv.lengths, {rows}, at::kInt);
      seq.key_lengths = Borrow(owner, sv.key_lengths, {static_cast<int64_t>(sv.key_lengths.size())}, at::kInt);
      seq.key_offsets = Offsets(sv.key_lengths);
      group->sequences.emplace(kv.first, std::move(seq));
      continue;
    }
    JaggedIds ids;
    ids.values = values;
    ids.weights = weights;
    ids.lengths = Borrow(owner, sv.lengths, {rows}, at::kInt);
    ids.offsets = Offsets(sv.lengths);
    group->sparse.emplace(kv.first, std::move(ids));
  }
  for (auto& kv : owner->dense) {
    DenseValues& dv = kv.second;
    auto [group, rows] = group_of(kv.first);
    if (dv.sequence) {
      const int64_t steps = dv.dim > 0 ? static_cast<int64_t>(dv.values.size()) / dv.dim : 0;
      group->dense_sequences.emplace(
          kv.first, DenseSequence{Borrow(owner, dv.values, {steps, dv.dim}, at::kFloat),
                                  Borrow(owner, dv.lengths, {rows}, at::kInt)});
      continue;
    }
    group->dense.emplace(kv.first, Borrow(owner, dv.values, {rows, dv.dim}, at::kFloat));
  }
  if (!owner->hard_neg_indices.empty()) {
    const int64_t n = static_cast<int64_t>(owner->hard_neg_indices.size() / 2);
    batch.hard_neg_indices = Borrow(owner, owner->hard_neg_indices, {n, 2}, at::kInt).to(at::kLong);
  }
  for (auto& kv : owner->labels) batch.labels.emplace(kv.first, Borrow(owner, kv.second, {b}, at::kFloat));
  for (auto& kv : owner->sample_weights) {
    batch.sample_weights.emplace(kv.first, Borrow(owner, kv.second, {b}, at::kFloat));
  }
  batch.reserved = std::move(owner->reserved);
  batch.positions = std::move(owner->positions);
  return batch;
}

at::Tensor FirstIdPerRow(const JaggedIds& ids) {
  const int64_t rows = ids.lengths.numel();
  at::Tensor out = at::zeros({rows}, at::TensorOptions().dtype(at::kLong));
  const at::Tensor offsets = ids.offsets.contiguous();
  const at::Tensor values = ids.values.contiguous();
  const int64_t* o = offsets.data_ptr<int64_t>();
  const int64_t* v = values.data_ptr<int64_t>();
  int64_t* first = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < rows; ++i) first[i] = o[i + 1] > o[i] ? v[o[i]] : 0;
  return out;
}

Batch WithEmptyFeatures(const Batch& batch, const std::vector<const Feature*>& features) {
  Batch out = batch;
  const int64_t rows = batch.size;
  const auto int_options = at::TensorOptions().dtype(at::kInt);
  const auto long_options = at::TensorOptions().dtype(at::kLong);
  for (const Feature* feature : features) {
    auto [it, created] = out.data_groups.try_emplace(feature->data_group());
    DataGroupBatch& group = it->second;
    if (created) group.size = rows;
    const std::string& name = feature->name();
    if (group.sparse.count(name) || group.dense.count(name) || group.sequences.count(name) ||
        group.dense_sequences.count(name)) {
      continue;
    }
    const at::Tensor no_ids = at::zeros({0}, long_options);
    const at::Tensor weights = feature->weighted() ? at::zeros({0}, at::TensorOptions().dtype(at::kFloat)) : at::Tensor();
    if (feature->is_sparse() && feature->is_sequence()) {
      group.sequences[name] = {no_ids, at::zeros({group.size}, int_options), at::zeros({0}, int_options),
                               at::zeros({1}, long_options), weights};
    } else if (feature->is_sparse()) {
      group.sparse[name] = {no_ids, at::zeros({group.size}, int_options), at::zeros({group.size + 1}, long_options),
                            weights};
    } else if (feature->is_sequence()) {
      group.dense_sequences[name] = {at::zeros({0, feature->value_dim()}), at::zeros({group.size}, int_options)};
    } else {
      group.dense[name] = at::zeros({group.size, feature->value_dim()});
    }
  }
  return out;
}

Batch SyntheticBatch(const std::vector<const Feature*>& features, int64_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  ParsedBatch parsed;
  parsed.size = rows;
  for (const Feature* feature : features) {
    // Item features a sampler fills too live in their own data group (here without samples).
    if (feature->data_group() != kBaseDataGroup) {
      parsed.sampled_group = feature->data_group();
      parsed.sampled_features.push_back(feature->name());
    }
    if (feature->is_sparse()) {
      SparseValues& sparse = parsed.sparse[feature->name()];
      sparse.sequence = feature->is_sequence();
      const int64_t ids = std::max<int64_t>(feature->num_embeddings(), 1);
      for (int64_t r = 0; r < rows; ++r) {
        const int count = static_cast<int>(rng() % 4);
        sparse.lengths.push_back(count);
        if (sparse.sequence) {
          for (int s = 0; s < count; ++s) sparse.key_lengths.push_back(1);
        }
        for (int i = 0; i < count; ++i) {
          sparse.values.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(ids)));
          if (feature->weighted()) sparse.weights.push_back(static_cast<float>(rng() % 1000) / 500.0f);
        }
      }
    } else {
      DenseValues& dense = parsed.dense[feature->name()];
      dense.dim = feature->value_dim();
      dense.sequence = feature->is_sequence();
      if (dense.sequence) dense.lengths.assign(rows, 1);  // one step per row
      for (int64_t i = 0; i < rows * dense.dim; ++i) {
        dense.values.push_back(static_cast<float>(rng() % 2001) / 1000.0f - 1.0f);
      }
    }
  }
  return ToBatch(std::move(parsed));
}

}  // namespace tzrec
