// TrainMetric: a metric shown while training, smoothed over steps (TorchEasyRec's
// TrainMetricWrapper, tzrec/metrics/train_metric_wrapper.py).
//
// Every Update() counts one step. On every decay_step-th step: a metric that decays its own
// state (the train `auc`, DecayAUC) folds the steps' counts in with Decay(decay_rate) and the
// value is the AUC of that state summed over ranks; any other metric is combined over ranks,
// computed and reset, and the value becomes that (first time, or while the value is 0) or
// decay_rate * value + (1 - decay_rate) * computed. value() is 0 before the first decay step.
// Collectives run only on decay steps, the same on every rank, so every rank must update its
// train metrics in the same order each step. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "tzrec/common/collectives.h"
#include "tzrec/metrics/metric.h"

namespace tzrec {

class TrainMetric {
 public:
  // `spec` from TrainMetricRegistry(); decay_rate and decay_step are TrainMetricConfig's base
  // fields. `where` names the config in errors (decay_step must be >= 1).
  TrainMetric(MetricSpec spec, double decay_rate, int64_t decay_step,
              const std::string& where = "");

  // `comm` may be null (one process).
  void Update(const MetricInput& input, Collectives* comm);
  double value() const { return value_; }
  const MetricSpec& spec() const { return spec_; }
  int64_t steps() const { return steps_; }

 private:
  MetricSpec spec_;
  double decay_rate_;
  int64_t decay_step_;
  int64_t steps_ = 0;
  double value_ = 0.0;
};

}  // namespace tzrec
