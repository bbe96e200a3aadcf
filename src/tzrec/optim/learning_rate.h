// Learning-rate schedules (the `learning_rate` oneof of SparseOptimizer and DenseOptimizer), by
// config name. The trainer asks the schedule for each step's rate; today only
// constant_learning_rate is registered (the others are rejected by the config check).
// Immutable; thread-safe.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "tzrec/common/registry.h"

namespace tzrec {

class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  // Rate for training step `step` (0-based) in epoch `epoch`, from the optimizer's base rate.
  virtual double Rate(double base_lr, int64_t step, int64_t epoch) const = 0;
};

using LearningRateFactory =
    std::function<std::unique_ptr<LearningRateSchedule>(const google::protobuf::Message& config)>;
Registry<LearningRateFactory>& LearningRateRegistry();

// The schedule of an optimizer message's `learning_rate` oneof (constant when unset); `where`
// names the optimizer in errors.
std::unique_ptr<LearningRateSchedule> CreateLearningRateSchedule(const google::protobuf::Message& optimizer,
                                                                 const std::string& where);

}  // namespace tzrec
