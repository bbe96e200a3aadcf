// `mean_absolute_error` (torchmetrics MeanAbsoluteError, on the regression output "y"): the mean of
// |y - label| over all rows; NaN before any row. kSum. Not thread-safe.
#include <cmath>
#include <memory>

#include "tzrec/metrics/metric_util.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {
namespace {

MetricSpec MakeMeanAbsoluteError(const MetricContext& ctx) {
  metrics_internal::ConfigAs<protos::MeanAbsoluteError>(ctx);
  metrics_internal::RequireRegression(ctx, "mean_absolute_error");
  MetricSpec spec;
  spec.prediction = "y";
  spec.metric = std::make_unique<metrics_internal::MeanRowError>(
      "mean_absolute_error", [](double diff) { return std::fabs(diff); });
  return spec;
}

}  // namespace

TZREC_REGISTER(MetricRegistry(), "mean_absolute_error", MakeMeanAbsoluteError);
TZREC_REGISTER(TrainMetricRegistry(), "mean_absolute_error", MakeMeanAbsoluteError);

}  // namespace tzrec
