// AUC metrics (no LibTorch).
//
// BinnedAuc reproduces TorchEasyRec's `auc` (torchmetrics BinaryAUROC with `thresholds` evenly
// spaced in [0, 1], default 200): per-threshold confusion counts accumulated over batches, ROC
// points at each threshold, trapezoidal area. ExactAuc is the sort-based reference (ties
// count one half), used to test the binned one. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tzrec {

class BinnedAuc {
 public:
  explicit BinnedAuc(int num_thresholds = 200);
  // probs in [0, 1]; labels > 0.5 count as positive.
  void Update(const float* probs, const float* labels, int64_t n);
  double Compute() const;
  void Reset();
  // Adds another accumulator's counts (e.g. from another rank or thread).
  void Merge(const BinnedAuc& other);
  // The counts as numbers (to be summed over ranks) and back.
  void AppendState(std::vector<double>* state) const;
  // Reads what AppendState wrote from `state` at `*offset`, advancing it.
  void LoadState(const std::vector<double>& state, size_t* offset);

 private:
  std::vector<float> thresholds_;
  // Histograms by "number of thresholds <= prob" (0..T), per class.
  std::vector<int64_t> positive_hist_;
  std::vector<int64_t> negative_hist_;
};

double ExactAuc(const std::vector<float>& probs, const std::vector<float>& labels);

}  // namespace tzrec
