#include "tzrec/metrics/train_metric.h"

#include <utility>
#include <vector>

#include "tzrec/common/error.h"

namespace tzrec {

TrainMetric::TrainMetric(MetricSpec spec, double decay_rate, int64_t decay_step,
                         const std::string& where)
    : spec_(std::move(spec)), decay_rate_(decay_rate), decay_step_(decay_step) {
  TZREC_CHECK(spec_.metric != nullptr);
  if (decay_step_ < 1) {
    Fail(where.empty() ? "train metric" : where, ".decay_step: must be >= 1 (got ", decay_step_,
         ")");
  }
}

void TrainMetric::Update(const MetricInput& input, Collectives* comm) {
  Metric& metric = *spec_.metric;
  metric.Update(input);
  ++steps_;
  if (steps_ % decay_step_ != 0) return;
  if (metric.decays_state()) {
    metric.Decay(decay_rate_);
    if (comm == nullptr || comm->world_size() <= 1) {
      value_ = metric.Compute();
      return;
    }
    // The value reads the global state, but each rank keeps decaying its own (as torchmetrics
    // syncs for compute() and restores the local state after).
    std::vector<double> local;
    metric.AppendState(&local);
    std::vector<double> global = local;
    if (!global.empty()) comm->AllReduceSum(&global);
    size_t offset = 0;
    metric.LoadState(global, &offset);
    value_ = metric.Compute();
    offset = 0;
    metric.LoadState(local, &offset);
    return;
  }
  CombineOverRanks({&metric}, comm);
  const double v = metric.Compute();
  metric.Reset();
  value_ = value_ == 0.0 ? v : decay_rate_ * value_ + (1.0 - decay_rate_) * v;
}

}  // namespace tzrec
