// AUC metrics (no LibTorch).
//
// BinnedAuc is TorchEasyRec's `auc` (torchmetrics BinaryAUROC with `thresholds` evenly spaced
// in [0, 1], default 200): per-threshold confusion counts accumulated over batches, ROC points
// at each threshold, trapezoidal area; registered as MetricRegistry()'s "auc" (kSum). ExactAuc
// is the sort-based Mann-Whitney AUC (ties count one half): grouped_auc's per-group AUC and
// the reference the binned one is tested against. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tzrec/metrics/metric.h"

namespace tzrec {

class BinnedAuc : public Metric {
 public:
  explicit BinnedAuc(int num_thresholds = 200);
  // probs in [0, 1]; labels > 0.5 count as positive. A NaN prob is predicted negative at
  // every threshold, as torchmetrics' `prob >= threshold` has it.
  void Update(const float* probs, const float* labels, int64_t n);
  // preds [rows, 1] probabilities, labels [rows, 1].
  void Update(const MetricInput& input) override;
  // 0 when there are no positives or no negatives (torchmetrics divides safely).
  double Compute() const override;
  void Reset() override;
  MetricCombine combine() const override { return MetricCombine::kSum; }
  // The counts as numbers (to be summed over ranks) and back.
  void AppendState(std::vector<double>* state) const override;
  void LoadState(const std::vector<double>& state, size_t* offset) override;

  // Adds another accumulator's counts times `scale` (e.g. from another rank, or the decay of
  // the train auc); Scale multiplies this one's. Counts are doubles so decayed ones stay exact
  // enough, and whole counts are exact up to 2^53.
  void Merge(const BinnedAuc& other, double scale = 1.0);
  void Scale(double factor);
  // Number of rows counted (decayed: their weight), and of positive ones.
  double total() const;
  double positives() const;
  int num_thresholds() const { return static_cast<int>(thresholds_.size()); }

 private:
  std::vector<float> thresholds_;
  // Histograms by "number of thresholds <= prob" (0..T), per class.
  std::vector<double> positive_hist_;
  std::vector<double> negative_hist_;
};

// The binned ROC area of histograms laid out as BinnedAuc's (bin k: k thresholds <= prob),
// each of num_thresholds + 1 entries.
double BinnedAucFromHistograms(const double* positive_hist, const double* negative_hist,
                               int num_thresholds);

// Exact AUC of probs against labels (> 0.5 is positive); 0 when either class is missing, NaN
// when a prob is NaN (there is no order to rank it by).
double ExactAuc(const float* probs, const float* labels, size_t n);
double ExactAuc(const std::vector<float>& probs, const std::vector<float>& labels);

}  // namespace tzrec
