#include "tzrec/metrics/auc.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tzrec/common/error.h"
#include "tzrec/metrics/metric_util.h"
#include "tzrec/protos/metric.pb.h"

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
  positive_hist_.assign(thresholds_.size() + 1, 0.0);
  negative_hist_.assign(thresholds_.size() + 1, 0.0);
}

void BinnedAuc::Merge(const BinnedAuc& other, double scale) {
  TZREC_CHECK(other.thresholds_.size() == thresholds_.size());
  for (size_t i = 0; i < positive_hist_.size(); ++i) {
    positive_hist_[i] += scale * other.positive_hist_[i];
    negative_hist_[i] += scale * other.negative_hist_[i];
  }
}

void BinnedAuc::Scale(double factor) {
  for (double& v : positive_hist_) v *= factor;
  for (double& v : negative_hist_) v *= factor;
}

double BinnedAuc::total() const {
  return std::accumulate(positive_hist_.begin(), positive_hist_.end(), 0.0) +
         std::accumulate(negative_hist_.begin(), negative_hist_.end(), 0.0);
}

double BinnedAuc::positives() const {
  return std::accumulate(positive_hist_.begin(), positive_hist_.end(), 0.0);
}

void BinnedAuc::Update(const float* probs, const float* labels, int64_t n) {
  const float* begin = thresholds_.data();
  const float* end = begin + thresholds_.size();
  for (int64_t i = 0; i < n; ++i) {
    // A sample is predicted positive at threshold t iff prob >= t; NaN at none.
    size_t bin = std::isnan(probs[i])
                     ? 0
                     : static_cast<size_t>(std::upper_bound(begin, end, probs[i]) - begin);
    if (labels[i] > 0.5f) {
      positive_hist_[bin] += 1.0;
    } else {
      negative_hist_[bin] += 1.0;
    }
  }
}

void BinnedAuc::Update(const MetricInput& input) {
  metrics_internal::CheckInput(input, 1, 1, "auc");
  Update(input.preds, input.labels, input.rows);
}

double BinnedAucFromHistograms(const double* positive_hist, const double* negative_hist,
                               int num_thresholds) {
  const size_t num = static_cast<size_t>(num_thresholds);
  double positives = std::accumulate(positive_hist, positive_hist + num + 1, 0.0);
  double negatives = std::accumulate(negative_hist, negative_hist + num + 1, 0.0);
  // tp[k] = positives with prob >= thresholds[k] = those in bins k+1..num.
  std::vector<double> tpr(num), fpr(num);
  double tp = 0.0, fp = 0.0;
  for (size_t k = num; k-- > 0;) {
    tp += positive_hist[k + 1];
    fp += negative_hist[k + 1];
    tpr[k] = positives > 0 ? tp / positives : 0.0;
    fpr[k] = negatives > 0 ? fp / negatives : 0.0;
  }
  // ROC from the highest threshold to the lowest; trapezoid rule over fpr.
  double area = 0.0;
  for (size_t k = num - 1; k > 0; --k) {
    area += (fpr[k - 1] - fpr[k]) * (tpr[k - 1] + tpr[k]) * 0.5;
  }
  return area;
}

double BinnedAuc::Compute() const {
  return BinnedAucFromHistograms(positive_hist_.data(), negative_hist_.data(), num_thresholds());
}

double ExactAuc(const float* probs, const float* labels, size_t n) {
  // NaN never compares equal, so it would break both the sort and the tie runs below.
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(probs[i])) return std::nan("");
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probs[a] < probs[b]; });
  // Mann-Whitney U with average ranks for ties.
  double rank_sum_pos = 0.0;
  int64_t positives = 0, negatives = 0;
  size_t i = 0;
  while (i < n) {
    size_t j = i + 1;
    while (j < n && probs[order[j]] == probs[order[i]]) ++j;
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

double ExactAuc(const std::vector<float>& probs, const std::vector<float>& labels) {
  TZREC_CHECK(probs.size() == labels.size());
  return ExactAuc(probs.data(), labels.data(), probs.size());
}

void BinnedAuc::AppendState(std::vector<double>* state) const {
  state->insert(state->end(), positive_hist_.begin(), positive_hist_.end());
  state->insert(state->end(), negative_hist_.begin(), negative_hist_.end());
}

void BinnedAuc::LoadState(const std::vector<double>& state, size_t* offset) {
  TZREC_CHECK(*offset + positive_hist_.size() + negative_hist_.size() <= state.size());
  for (double& v : positive_hist_) v = state[(*offset)++];
  for (double& v : negative_hist_) v = state[(*offset)++];
}

namespace {

MetricSpec MakeAuc(const MetricContext& ctx) {
  const auto& config = metrics_internal::ConfigAs<protos::AUC>(ctx);
  MetricSpec spec;
  spec.prediction = metrics_internal::BinaryPrediction(ctx, "auc");
  spec.metric = std::make_unique<BinnedAuc>(metrics_internal::CheckedThresholds(ctx, "auc", config.thresholds()));
  return spec;
}

}  // namespace

TZREC_REGISTER(MetricRegistry(), "auc", MakeAuc, "thresholds");

}  // namespace tzrec
