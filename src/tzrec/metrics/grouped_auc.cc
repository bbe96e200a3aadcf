// `grouped_auc` (TorchEasyRec tzrec/metrics/grouped_auc.py): the exact AUC (ties one half) of
// each group key's rows, averaged without weights over the groups that have both a positive
// (label > 0.5) and a negative row; NaN when there is none. kGather: every rank contributes
// its (key, prob, label) rows and computes over all of them, so the value is exact and the
// same as one process (TorchEasyRec shuffles groups to ranks by key instead; same value).
// Not thread-safe.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "tzrec/metrics/auc.h"
#include "tzrec/metrics/metric_util.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {
namespace {

class GroupedAuc : public Metric {
 public:
  void Update(const MetricInput& input) override {
    metrics_internal::CheckInput(input, 1, 1, "grouped_auc");
    TZREC_CHECK(input.rows == 0 || input.group_keys != nullptr, "grouped_auc needs group keys");
    keys_.insert(keys_.end(), input.group_keys, input.group_keys + input.rows);
    probs_.insert(probs_.end(), input.preds, input.preds + input.rows);
    labels_.insert(labels_.end(), input.labels, input.labels + input.rows);
  }

  double Compute() const override {
    const size_t n = keys_.size();
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys_[a] < keys_[b]; });
    std::vector<float> probs, labels;
    double sum = 0.0;
    int64_t groups = 0;
    for (size_t begin = 0; begin < n;) {
      size_t end = begin;
      probs.clear();
      labels.clear();
      bool positive = false, negative = false;
      for (; end < n && keys_[order[end]] == keys_[order[begin]]; ++end) {
        probs.push_back(probs_[order[end]]);
        labels.push_back(labels_[order[end]]);
        (labels.back() > 0.5f ? positive : negative) = true;
      }
      if (positive && negative) {
        sum += ExactAuc(probs.data(), labels.data(), probs.size());
        ++groups;
      }
      begin = end;
    }
    return groups > 0 ? sum / static_cast<double>(groups) : std::nan("");
  }

  void Reset() override {
    keys_.clear();
    probs_.clear();
    labels_.clear();
  }
  MetricCombine combine() const override { return MetricCombine::kGather; }

  std::string SerializeValues() const override {
    std::string bytes;
    metrics_internal::AppendPod<uint64_t>(keys_.size(), &bytes);
    metrics_internal::AppendPods(keys_.data(), keys_.size(), &bytes);
    metrics_internal::AppendPods(probs_.data(), probs_.size(), &bytes);
    metrics_internal::AppendPods(labels_.data(), labels_.size(), &bytes);
    return bytes;
  }
  void LoadGathered(const std::vector<std::string>& per_rank) override {
    Reset();
    for (const std::string& bytes : per_rank) {
      size_t pos = 0;
      const uint64_t n = metrics_internal::ReadPod<uint64_t>(bytes, &pos);
      metrics_internal::ReadPods(bytes, &pos, n, &keys_);
      metrics_internal::ReadPods(bytes, &pos, n, &probs_);
      metrics_internal::ReadPods(bytes, &pos, n, &labels_);
      TZREC_CHECK(pos == bytes.size(), "grouped_auc: trailing gathered bytes");
    }
  }

 private:
  std::vector<int64_t> keys_;
  std::vector<float> probs_;
  std::vector<float> labels_;
};

MetricSpec MakeGroupedAuc(const MetricContext& ctx) {
  const auto& config = metrics_internal::ConfigAs<protos::GroupedAUC>(ctx);
  MetricSpec spec;
  spec.prediction = metrics_internal::BinaryPrediction(ctx, "grouped_auc");
  if (config.grouping_key().empty()) {
    Fail(metrics_internal::ConfigPath(ctx, "grouped_auc", "grouping_key"),
         ": must name a sparse feature");
  }
  spec.grouping_key = config.grouping_key();
  spec.metric = std::make_unique<GroupedAuc>();
  return spec;
}

}  // namespace

TZREC_REGISTER(MetricRegistry(), "grouped_auc", MakeGroupedAuc, "grouping_key");

}  // namespace tzrec
