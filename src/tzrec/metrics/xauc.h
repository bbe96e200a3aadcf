// Pairwise ordering accuracy for regression (XAUC), shared by `xauc` and `grouped_xauc`: the
// share of row pairs whose predictions order the same way as their labels,
// [(t_i - t_j)(p_i - p_j) > 0], decided by comparing signs (no float product to underflow);
// a pair with a tie or a NaN never counts. Stateless functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tzrec {

// Over all n(n-1)/2 pairs, in O(n log n); NaN when n < 2.
double ExactXauc(const float* preds, const float* labels, size_t n);

// Over `pairs` unordered index pairs drawn uniformly with replacement by a std::mt19937_64
// seeded with `seed` (TorchEasyRec's sampling_xauc, tzrec/metrics/xauc.py); NaN when n < 2 or
// pairs == 0. Deterministic for given arrays: callers sort them with SortXaucRows first so the
// value does not depend on the order rows arrived in.
double SampledXauc(const float* preds, const float* labels, size_t n, uint64_t pairs,
                   uint64_t seed);

// Sorts rows [begin, end) of (preds, labels) by prediction, then label (NaN last).
void SortXaucRows(std::vector<float>* preds, std::vector<float>* labels, size_t begin, size_t end);

}  // namespace tzrec
