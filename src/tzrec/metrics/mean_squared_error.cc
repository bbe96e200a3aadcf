// `mean_squared_error` (torchmetrics MeanSquaredError, on the regression output "y"): the mean of
// (y - label)^2 over all rows; NaN before any row. kSum. Not thread-safe.
#include <cmath>
#include <memory>

#include "tzrec/metrics/metric_util.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {
namespace {

MetricSpec MakeMeanSquaredError(const MetricContext& ctx) {
  metrics_internal::ConfigAs<protos::MeanSquaredError>(ctx);
  metrics_internal::RequireRegression(ctx, "mean_squared_error");
  MetricSpec spec;
  spec.prediction = "y";
  spec.metric = std::make_unique<metrics_internal::MeanRowError>(
      "mean_squared_error", [](double diff) { return diff * diff; });
  return spec;
}

}  // namespace

TZREC_REGISTER(MetricRegistry(), "mean_squared_error", MakeMeanSquaredError);
TZREC_REGISTER(TrainMetricRegistry(), "mean_squared_error", MakeMeanSquaredError);

}  // namespace tzrec
