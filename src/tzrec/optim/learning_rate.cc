#include "tzrec/optim/learning_rate.h"

#include "tzrec/common/error.h"
#include "tzrec/config/oneof.h"

namespace tzrec {
namespace {

class ConstantLearningRate : public LearningRateSchedule {
 public:
  double Rate(double base_lr, int64_t, int64_t) const override { return base_lr; }
};

std::unique_ptr<LearningRateSchedule> MakeConstant(const google::protobuf::Message&) {
  return std::make_unique<ConstantLearningRate>();
}

}  // namespace

Registry<LearningRateFactory>& LearningRateRegistry() {
  static Registry<LearningRateFactory> registry(
      "learning rate schedule", {ConfigSlot{"tzrec.protos.SparseOptimizer", "learning_rate"},
                                 ConfigSlot{"tzrec.protos.DenseOptimizer", "learning_rate"}});
  return registry;
}

TZREC_REGISTER(LearningRateRegistry(), "constant_learning_rate", MakeConstant);

std::unique_ptr<LearningRateSchedule> CreateLearningRateSchedule(const google::protobuf::Message& optimizer,
                                                                 const std::string& where) {
  const auto* which = RegisteredOneofMember(optimizer, "learning_rate", LearningRateRegistry(), where,
                                            /*required=*/false);
  if (!which) return std::make_unique<ConstantLearningRate>();
  return LearningRateRegistry().Get(which->name())(optimizer.GetReflection()->GetMessage(optimizer, which));
}

}  // namespace tzrec
