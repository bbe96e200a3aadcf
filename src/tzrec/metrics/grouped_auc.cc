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
  void Update(const MetricInput& input) override { rows_.Add(input, "grouped_auc"); }

  double Compute() const override {
    const metrics_internal::KeyedRows::ByKey rows = rows_.SortedByKey();
    double sum = 0.0;
    int64_t groups = 0;
    for (size_t g = 0; g + 1 < rows.starts.size(); ++g) {
      const size_t begin = rows.starts[g], end = rows.starts[g + 1];
      bool positive = false, negative = false;
      for (size_t i = begin; i < end; ++i) (rows.labels[i] > 0.5f ? positive : negative) = true;
      if (positive && negative) {
        sum += ExactAuc(rows.preds.data() + begin, rows.labels.data() + begin, end - begin);
        ++groups;
      }
    }
    return groups > 0 ? sum / static_cast<double>(groups) : std::nan("");
  }

  void Reset() override { rows_.Clear(); }
  MetricCombine combine() const override { return MetricCombine::kGather; }
  std::string SerializeValues() const override { return rows_.Serialize(); }
  void LoadGathered(const std::vector<std::string>& per_rank) override { rows_.Load(per_rank, "grouped_auc"); }

 private:
  metrics_internal::KeyedRows rows_;
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
