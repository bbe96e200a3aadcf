#include "tzrec/metrics/auc.h"

#include <algorithm>
#include <numeric>

#include "tzrec/common/error.h"

namespace tzrec {

BinnedAuc::BinnedAuc(int num_thresholds) {
  if (num_thresholds < 2) Fail("auc.thresholds must be >= 2, got ", num_thresholds);
  thresholds_.resize(num_thresholds);
  for (int k = 0; k < num_thresholds; ++k) {
    thresholds_[k] = static_cast<float>(static_cast<double>(k) / (num_thresholds - 1));
  }
  Reset();
}

void BinnedAuc::Reset() {
  positive_hist_.assign(thresholds_.size() + 1, 0);
  negative_hist_.assign(thresholds_.size() + 1, 0);
}

void BinnedAuc::Merge(const BinnedAuc& other) {
  TZREC_CHECK(other.thresholds_.size() == thresholds_.size());
  for (size_t i = 0; i < positive_hist_.size(); ++i) {
    positive_hist_[i] += other.positive_hist_[i];
    negative_hist_[i] += other.negative_hist_[i];
  }
}

void BinnedAuc::Update(const float* probs, const float* labels, int64_t n) {
  const float* begin = thresholds_.data();
  const float* end = begin + thresholds_.size();
  for (int64_t i = 0; i < n; ++i) {
    // A sample is predicted positive at threshold t iff prob >= t.
    size_t bin = static_cast<size_t>(std::upper_bound(begin, end, probs[i]) - begin);
    if (labels[i] > 0.5f) {
      ++positive_hist_[bin];
    } else {
      ++negative_hist_[bin];
    }
  }
}

double BinnedAuc::Compute() const {
  const size_t num = thresholds_.size();
  int64_t positives = std::accumulate(positive_hist_.begin(), positive_hist_.end(), int64_t{0});
  int64_t negatives = std::accumulate(negative_hist_.begin(), negative_hist_.end(), int64_t{0});
  // tp[k] = positives with prob >= thresholds[k] = those in bins k+1..num.
  std::vector<double> tpr(num), fpr(num);
  int64_t tp = 0, fp = 0;
  for (size_t k = num; k-- > 0;) {
    tp += positive_hist_[k + 1];
    fp += negative_hist_[k + 1];
    tpr[k] = positives > 0 ? static_cast<double>(tp) / positives : 0.0;
    fpr[k] = negatives > 0 ? static_cast<double>(fp) / negatives : 0.0;
  }
  // ROC from the highest threshold to the lowest; trapezoid rule over fpr.
  double area = 0.0;
  for (size_t k = num - 1; k > 0; --k) {
    area += (fpr[k - 1] - fpr[k]) * (tpr[k - 1] + tpr[k]) * 0.5;
  }
  return area;
}

double ExactAuc(const std::vector<float>& probs, const std::vector<float>& labels) {
  TZREC_CHECK(probs.size() == labels.size());
  std::vector<size_t> order(probs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probs[a] < probs[b]; });
  // Mann-Whitney U with average ranks for ties.
  double rank_sum_pos = 0.0;
  int64_t positives = 0, negatives = 0;
  size_t i = 0;
  while (i < order.size()) {
    size_t j = i;
    while (j < order.size() && probs[order[j]] == probs[order[i]]) ++j;
    double average_rank = (static_cast<double>(i) + static_cast<double>(j - 1)) / 2.0 + 1.0;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum_pos += average_rank;
        ++positives;
      } else {
        ++negatives;
      }
    }
    i = j;
  }
  if (positives == 0 || negatives == 0) return 0.0;
  double u = rank_sum_pos - static_cast<double>(positives) * (positives + 1) / 2.0;
  return u / (static_cast<double>(positives) * negatives);
}

void BinnedAuc::AppendState(std::vector<double>* state) const {
  for (int64_t v : positive_hist_) state->push_back(static_cast<double>(v));
  for (int64_t v : negative_hist_) state->push_back(static_cast<double>(v));
}

void BinnedAuc::LoadState(const std::vector<double>& state, size_t* offset) {
  for (int64_t& v : positive_hist_) v = static_cast<int64_t>(state.at((*offset)++));
  for (int64_t& v : negative_hist_) v = static_cast<int64_t>(state.at((*offset)++));
}

}  // namespace tzrec
