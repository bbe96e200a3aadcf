// Per-row sums of embedding gradients: the rows a step touched, each with its gradient summed
// over the lookups (fused_lookup.cc), over accumulated steps, or over ranks (dist's sparse
// gradient exchange). Rows keep first-touch order so every rank that adds the same gradients in
// the same order gets the identical result. Not thread-safe: one per caller.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "tzrec/embedding/hash_row_index.h"

namespace tzrec {

class RowGradientSum {
 public:
  // `expected_rows`: a guess of the distinct rows (at most the rows added), to size the map once.
  explicit RowGradientSum(int dim, int64_t expected_rows = 0) : dim_(dim) {
    slot_of_.Reserve(expected_rows);
    sums_.reserve(static_cast<size_t>(expected_rows * dim));
  }
  void Add(int64_t row, const float* grad, float factor) {
    bool inserted = false;
    const int64_t slot = slot_of_.FindOrInsert(row, &inserted);
    if (inserted) sums_.resize(sums_.size() + dim_, 0.0f);
    float* s = sums_.data() + slot * dim_;
    for (int d = 0; d < dim_; ++d) s[d] += grad[d] * factor;
  }
  // rows int64 [n] in first-touch order, sums float [n, dim] times `scale` (after summing, so
  // scaling does not change how the sums round).
  std::pair<at::Tensor, at::Tensor> Tensors(float scale = 1.0f) const {
    const std::vector<int64_t>& rows = slot_of_.ids();
    const int64_t n = static_cast<int64_t>(rows.size());
    at::Tensor row_tensor = at::empty({n}, at::TensorOptions().dtype(at::kLong));
    at::Tensor grad_tensor = at::empty({n, dim_}, at::TensorOptions().dtype(at::kFloat));
    std::copy(rows.begin(), rows.end(), row_tensor.data_ptr<int64_t>());
    float* out = grad_tensor.data_ptr<float>();
    if (scale == 1.0f) {
      std::copy(sums_.begin(), sums_.end(), out);
    } else {
      for (size_t i = 0; i < sums_.size(); ++i) out[i] = sums_[i] * scale;
    }
    return {row_tensor, grad_tensor};
  }

 private:
  int dim_;
  HashRowIndex slot_of_;  // open addressing: std::unordered_map's node per row cost more than the sums
  std::vector<float> sums_;
};

}  // namespace tzrec
