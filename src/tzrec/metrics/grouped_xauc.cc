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

  void Update(const MetricInput& input) override { rows_.Add(input, "grouped_xauc"); }

  double Compute() const override {
    metrics_internal::KeyedRows::ByKey rows = rows_.SortedByKey();
    double weighted_sum = 0.0, weight = 0.0;
    for (size_t g = 0; g + 1 < rows.starts.size(); ++g) {
      const size_t begin = rows.starts[g], end = rows.starts[g + 1];
      const uint64_t n = end - begin;
      if (n < 2) continue;
      SortXaucRows(&rows.preds, &rows.labels, begin, end);
      const uint64_t pairs = std::min<uint64_t>(max_pairs_, n * (n - 1) / 2);
      const double xauc = SampledXauc(rows.preds.data() + begin, rows.labels.data() + begin, n, pairs,
                                      metrics_internal::MixSeed(static_cast<uint64_t>(rows.keys[begin])));
      weighted_sum += xauc * static_cast<double>(n);
      weight += static_cast<double>(n);
    }
    return weight > 0.0 ? weighted_sum / weight : std::nan("");
  }

  void Reset() override { rows_.Clear(); }
  MetricCombine combine() const override { return MetricCombine::kGather; }
  std::string SerializeValues() const override { return rows_.Serialize(); }
  void LoadGathered(const std::vector<std::string>& per_rank) override { rows_.Load(per_rank, "grouped_xauc"); }

 private:
  uint64_t max_pairs_;
  metrics_internal::KeyedRows rows_;
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
