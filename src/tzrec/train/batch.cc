#include "tzrec/train/batch.h"

#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>

#include <memory>

namespace tzrec {
namespace {

template <typename T>
at::Tensor Borrow(std::shared_ptr<ParsedBatch> owner, std::vector<T>& data,
                  at::IntArrayRef sizes, at::ScalarType type) {
  if (data.empty()) return at::zeros(sizes, at::TensorOptions().dtype(type));
  return at::from_blob(
      data.data(), sizes, [owner](void*) {}, at::TensorOptions().dtype(type));
}

}  // namespace

Batch ToBatch(ParsedBatch&& parsed) {
  auto owner = std::make_shared<ParsedBatch>(std::move(parsed));
  Batch batch;
  const int64_t b = owner->size;
  batch.size = b;
  for (auto& kv : owner->sparse) {
    SparseValues& sv = kv.second;
    JaggedIds ids;
    ids.values = Borrow(owner, sv.values, {static_cast<int64_t>(sv.values.size())}, at::kLong);
    ids.lengths = Borrow(owner, sv.lengths, {b}, at::kInt);
    ids.offsets = at::zeros({b + 1}, at::TensorOptions().dtype(at::kLong));
    int64_t* offsets = ids.offsets.data_ptr<int64_t>();
    for (int64_t i = 0; i < b; ++i) offsets[i + 1] = offsets[i] + sv.lengths[i];
    if (!sv.weights.empty()) {
      ids.weights = Borrow(owner, sv.weights, {static_cast<int64_t>(sv.weights.size())}, at::kFloat);
    }
    batch.sparse.emplace(kv.first, std::move(ids));
  }
  for (auto& kv : owner->dense) {
    batch.dense.emplace(kv.first, Borrow(owner, kv.second.values, {b, kv.second.dim}, at::kFloat));
  }
  for (auto& kv : owner->labels) {
    batch.labels.emplace(kv.first, Borrow(owner, kv.second, {b}, at::kFloat));
  }
  for (auto& kv : owner->sample_weights) {
    batch.sample_weights.emplace(kv.first, Borrow(owner, kv.second, {b}, at::kFloat));
  }
  return batch;
}

}  // namespace tzrec
