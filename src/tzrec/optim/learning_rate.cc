#include "tzrec/optim/learning_rate.h"

#include "tzrec/common/error.h"

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
  const auto* oneof = optimizer.GetDescriptor()->FindOneofByName("learning_rate");
  const auto* which = oneof ? optimizer.GetReflection()->GetOneofFieldDescriptor(optimizer, oneof) : nullptr;
  if (!which) return std::make_unique<ConstantLearningRate>();
  if (!LearningRateRegistry().Has(which->name())) {
    Fail(where, ".", which->name(), ": not supported yet (supported: ", LearningRateRegistry().JoinNames(), ")");
  }
  return LearningRateRegistry().Get(which->name())(optimizer.GetReflection()->GetMessage(optimizer, which));
}

}  // namespace tzrec
