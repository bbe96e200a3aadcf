// Learning-rate schedules (the `learning_rate` oneof of SparseOptimizer and DenseOptimizer), by
// config name: constant, exponential_decay, manual_step, cosine_annealing and
// cosine_annealing_warm_restarts with TorchEasyRec's formulas and step counting. The trainer
// asks the schedule for each step's rate from the global step (or epoch), so a continued run
// gets exactly the rates an uninterrupted one would. Immutable; thread-safe.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tzrec/common/registry.h"

namespace tzrec {

class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  // Rate for training step `step` (0-based, counted over the whole run) in epoch `epoch`
  // (0-based), from the optimizer's base rate.
  virtual double Rate(double base_lr, int64_t step, int64_t epoch) const = 0;
};

// `where` names the schedule's config message in errors.
using LearningRateFactory = std::function<std::unique_ptr<LearningRateSchedule>(
    const google::protobuf::Message& config, const std::string& where)>;
Registry<LearningRateFactory>& LearningRateRegistry();

// The schedule of an optimizer message's `learning_rate` oneof (constant when unset); `where`
// names the optimizer in errors.
std::unique_ptr<LearningRateSchedule> CreateLearningRateSchedule(const google::protobuf::Message& optimizer,
                                                                 const std::string& where);

}  // namespace tzrec
