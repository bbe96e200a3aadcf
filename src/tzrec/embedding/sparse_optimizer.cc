#include "tzrec/embedding/sparse_optimizer.h"

#include "tzrec/common/error.h"
#include "tzrec/config/oneof.h"

namespace tzrec {

int SparseOptimizerSpec::StateWidth(int dim) const {
  switch (kind) {
    case Kind::kSgd: return 0;
    case Kind::kAdagrad: return dim;
    case Kind::kRowwiseAdagrad: return 1;
    case Kind::kAdam: return 2 * dim;
  }
  return 0;
}

std::vector<SparseOptimizerSpec::StateSlice> SparseOptimizerSpec::StateSlices(int dim) const {
  switch (kind) {
    case Kind::kSgd: return {};
    case Kind::kAdagrad: return {{"sum", 0, dim}};
    case Kind::kRowwiseAdagrad: return {{"sum", 0, 1}};
    case Kind::kAdam: return {{"exp_avg", 0, dim}, {"exp_avg_sq", dim, dim}};
  }
  return {};
}

float SparseOptimizerSpec::InitialState() const {
  return kind == Kind::kAdagrad || kind == Kind::kRowwiseAdagrad ? initial_accumulator : 0.0f;
}

std::string SparseOptimizerSpec::Name() const {
  switch (kind) {
    case Kind::kSgd: return "sgd_optimizer";
    case Kind::kAdagrad: return "adagrad_optimizer";
    case Kind::kRowwiseAdagrad: return "rowwise_adagrad_optimizer";
    case Kind::kAdam: return "adam_optimizer";
  }
  return "";
}

namespace {

using google::protobuf::Message;

SparseOptimizerSpec MakeSgd(const Message& msg) {
  const auto& c = static_cast<const protos::FusedSGDOptimizer&>(msg);
  SparseOptimizerSpec spec;
  spec.kind = SparseOptimizerSpec::Kind::kSgd;
  spec.lr = c.lr();
  spec.gradient_clipping = c.gradient_clipping();
  spec.max_gradient = c.max_gradient();
  return spec;
}

SparseOptimizerSpec MakeAdagrad(const Message& msg) {
  const auto& c = static_cast<const protos::FusedAdagradOptimizer&>(msg);
  SparseOptimizerSpec spec;
  spec.kind = SparseOptimizerSpec::Kind::kAdagrad;
  spec.lr = c.lr();
  spec.initial_accumulator = c.initial_accumulator_value();
  spec.gradient_clipping = c.gradient_clipping();
  spec.max_gradient = c.max_gradient();
  return spec;
}

SparseOptimizerSpec MakeRowwiseAdagrad(const Message& msg) {
  const auto& c = static_cast<const protos::FusedRowWiseAdagradOptimizer&>(msg);
  SparseOptimizerSpec spec;
  spec.kind = SparseOptimizerSpec::Kind::kRowwiseAdagrad;
  spec.lr = c.lr();
  spec.weight_decay = c.weight_decay();
  switch (c.weight_decay_mode()) {
    case protos::WeightDecayMode::NONE: spec.weight_decay_mode = SparseOptimizerSpec::WeightDecayMode::kNone; break;
    case protos::WeightDecayMode::L2: spec.weight_decay_mode = SparseOptimizerSpec::WeightDecayMode::kL2; break;
    case protos::WeightDecayMode::DECOUPLE: spec.weight_decay_mode = SparseOptimizerSpec::WeightDecayMode::kDecouple; break;
    default: Fail("train_config.sparse_optimizer.rowwise_adagrad_optimizer.weight_decay_mode: not supported yet");
  }
  spec.gradient_clipping = c.gradient_clipping();
  spec.max_gradient = c.max_gradient();
  return spec;
}

SparseOptimizerSpec MakeAdam(const Message& msg) {
  const auto& c = static_cast<const protos::FusedAdamOptimizer&>(msg);
  SparseOptimizerSpec spec;
  spec.kind = SparseOptimizerSpec::Kind::kAdam;
  spec.lr = c.lr();
  spec.beta1 = c.beta1();
  spec.beta2 = c.beta2();
  spec.weight_decay = c.weight_decay();
  spec.gradient_clipping = c.gradient_clipping();
  spec.max_gradient = c.max_gradient();
  return spec;
}

}  // namespace

Registry<SparseOptimizerFactory>& SparseOptimizerRegistry() {
  static Registry<SparseOptimizerFactory> registry(
      "sparse optimizer", {ConfigSlot{"tzrec.protos.SparseOptimizer", "optimizer"}});
  return registry;
}

TZREC_REGISTER(SparseOptimizerRegistry(), "sgd_optimizer", MakeSgd, "lr", "gradient_clipping",
               "max_gradient");
TZREC_REGISTER(SparseOptimizerRegistry(), "adagrad_optimizer", MakeAdagrad, "lr",
               "gradient_clipping", "max_gradient", "initial_accumulator_value");
TZREC_REGISTER(SparseOptimizerRegistry(), "rowwise_adagrad_optimizer", MakeRowwiseAdagrad, "lr",
               "weight_decay", "weight_decay_mode", "gradient_clipping", "max_gradient");
TZREC_REGISTER(SparseOptimizerRegistry(), "adam_optimizer", MakeAdam, "lr", "beta1", "beta2",
               "weight_decay", "gradient_clipping", "max_gradient");

SparseOptimizerSpec ParseSparseOptimizer(const protos::SparseOptimizer& config) {
  const auto* which = RegisteredOneofMember(config, "optimizer", SparseOptimizerRegistry(),
                                            "train_config.sparse_optimizer");
  return SparseOptimizerRegistry().Get(which->name())(config.GetReflection()->GetMessage(config, which));
}

}  // namespace tzrec
