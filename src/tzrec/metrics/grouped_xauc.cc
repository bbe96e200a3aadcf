// `grouped_xauc` (TorchEasyRec tzrec/metrics/grouped_xauc.py), on the regression output "y":
// per group key with at least two rows, the sampled xauc over min(max_pairs_per_group,
// n(n-1)/2) pairs; value = mean of those weighted by group size, NaN when there is none.
// kGather of (key, pred, label): each group's rows are sorted canonically and its pairs drawn
// with a seed derived from its key, so the value does not depend on how rows were split over
// ranks or batches. Not thread-safe.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "tzrec/metrics/metric_util.h"
#include "tzrec/metrics/xauc.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {
namespace {

class GroupedXauc : public Metric {
 public:
  explicit GroupedXauc(uint64_t max_pairs_per_group) : max_pairs_(max_pairs_per_group) {}

  void Update(const MetricInput& input) override {
    metrics_internal::CheckInput(input, 1, 1, "grouped_xauc");
    TZREC_CHECK(input.rows == 0 || input.group_keys != nullptr, "grouped_xauc needs group keys");
    keys_.insert(keys_.end(), input.group_keys, input.group_keys + input.rows);
    preds_.insert(preds_.end(), input.preds, input.preds + input.rows);
    labels_.insert(labels_.end(), input.labels, input.labels + input.rows);
  }

  double Compute() const override {
    const size_t n = keys_.size();
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return keys_[a] < keys_[b]; });
    std::vector<float> preds(n), labels(n);
    for (size_t i = 0; i < n; ++i) {
      preds[i] = preds_[order[i]];
      labels[i] = labels_[order[i]];
    }
    double weighted_sum = 0.0, weight = 0.0;
    for (size_t begin = 0; begin < n;) {
      const int64_t key = keys_[order[begin]];
      size_t end = begin;
      while (end < n && keys_[order[end]] == key) ++end;
      const uint64_t rows = end - begin;
      if (rows >= 2) {
        SortXaucRows(&preds, &labels, begin, end);
        const uint64_t pairs = std::min<uint64_t>(max_pairs_, rows * (rows - 1) / 2);
        const double xauc = SampledXauc(preds.data() + begin, labels.data() + begin, rows, pairs,
                                        metrics_internal::MixSeed(static_cast<uint64_t>(key)));
        weighted_sum += xauc * static_cast<double>(rows);
        weight += static_cast<double>(rows);
      }
      begin = end;
    }
    return weight > 0.0 ? weighted_sum / weight : std::nan("");
  }

  void Reset() override {
    keys_.clear();
    preds_.clear();
    labels_.clear();
  }
  MetricCombine combine() const override { return MetricCombine::kGather; }

  std::string SerializeValues() const override {
    std::string bytes;
    metrics_internal::AppendPod<uint64_t>(keys_.size(), &bytes);
    metrics_internal::AppendPods(keys_.data(), keys_.size(), &bytes);
    metrics_internal::AppendPods(preds_.data(), preds_.size(), &bytes);
    metrics_internal::AppendPods(labels_.data(), labels_.size(), &bytes);
    return bytes;
  }
  void LoadGathered(const std::vector<std::string>& per_rank) override {
    Reset();
    for (const std::string& bytes : per_rank) {
      size_t pos = 0;
      const uint64_t n = metrics_internal::ReadPod<uint64_t>(bytes, &pos);
      metrics_internal::ReadPods(bytes, &pos, n, &keys_);
      metrics_internal::ReadPods(bytes, &pos, n, &preds_);
      metrics_internal::ReadPods(bytes, &pos, n, &labels_);
      TZREC_CHECK(pos == bytes.size(), "grouped_xauc: trailing gathered bytes");
    }
  }

 private:
  uint64_t max_pairs_;
  std::vector<int64_t> keys_;
  std::vector<float> preds_;
  std::vector<float> labels_;
};

MetricSpec MakeGroupedXauc(const MetricContext& ctx) {
  using metrics_internal::ConfigPath;
  const auto& config = metrics_internal::ConfigAs<protos::GroupedXAUC>(ctx);
  metrics_internal::RequireRegression(ctx, "grouped_xauc");
  if (config.grouping_key().empty()) {
    Fail(ConfigPath(ctx, "grouped_xauc", "grouping_key"), ": must name a sparse feature");
  }
  MetricSpec spec;
  spec.prediction = "y";
  spec.grouping_key = config.grouping_key();
  // TorchEasyRec reads 0 as its default, 100 (`int(x) if x else 100`).
  const uint64_t max_pairs = config.max_pairs_per_group() > 0 ? config.max_pairs_per_group() : 100;
  spec.metric = std::make_unique<GroupedXauc>(max_pairs);
  return spec;
}

}  // namespace

TZREC_REGISTER(MetricRegistry(), "grouped_xauc", MakeGroupedXauc, "grouping_key",
               "max_pairs_per_group");

}  // namespace tzrec
