// `mean_absolute_error` (torchmetrics MeanAbsoluteError, on the regression output "y"): the mean of
// |y - label| over all rows; NaN before any row. kSum. Not thread-safe.
#include <cmath>
#include <memory>

#include "tzrec/metrics/metric_util.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {
namespace {

class MeanAbsoluteError : public Metric {
 public:
  void Update(const MetricInput& input) override {
    metrics_internal::CheckInput(input, 1, 1, "mean_absolute_error");
    for (int64_t i = 0; i < input.rows; ++i) {
      const double diff = static_cast<double>(input.preds[i]) - input.labels[i];
      sum_ += std::fabs(diff);
    }
    count_ += static_cast<double>(input.rows);
  }
  double Compute() const override { return count_ > 0.0 ? sum_ / count_ : std::nan(""); }
  void Reset() override { sum_ = count_ = 0.0; }
  MetricCombine combine() const override { return MetricCombine::kSum; }
  void AppendState(std::vector<double>* state) const override {
    state->push_back(sum_);
    state->push_back(count_);
  }
  void LoadState(const std::vector<double>& state, size_t* offset) override {
    sum_ = state.at((*offset)++);
    count_ = state.at((*offset)++);
  }

 private:
  double sum_ = 0.0;
  double count_ = 0.0;
};

MetricSpec MakeMeanAbsoluteError(const MetricContext& ctx) {
  metrics_internal::ConfigAs<protos::MeanAbsoluteError>(ctx);
  metrics_internal::RequireRegression(ctx, "mean_absolute_error");
  MetricSpec spec;
  spec.prediction = "y";
  spec.metric = std::make_unique<MeanAbsoluteError>();
  return spec;
}

}  // namespace

TZREC_REGISTER(MetricRegistry(), "mean_absolute_error", MakeMeanAbsoluteError);
TZREC_REGISTER(TrainMetricRegistry(), "mean_absolute_error", MakeMeanAbsoluteError);

}  // namespace tzrec
