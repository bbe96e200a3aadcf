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
    case Kind::kLarsSgd: return dim;
    case Kind::kLamb: return 2 * dim;
    case Kind::kPartialRowwiseLamb: return dim + 1;
    case Kind::kPartialRowwiseAdam: return dim + 1;
    case Kind::kAdadelta: return 2 * dim;
    case Kind::kRmsprop: return dim;
  }
  return 0;
}

std::vector<SparseOptimizerSpec::StateSlice> SparseOptimizerSpec::StateSlices(int dim) const {
  switch (kind) {
    case Kind::kSgd: return {};
    case Kind::kAdagrad: return {{"sum", 0, dim}};
    case Kind::kRowwiseAdagrad: return {{"sum", 0, 1}};
    case Kind::kAdam: return {{"exp_avg", 0, dim}, {"exp_avg_sq", dim, dim}};
    case Kind::kLarsSgd: return {{"momentum_buffer", 0, dim}};
    case Kind::kLamb: return {{"exp_avg", 0, dim}, {"exp_avg_sq", dim, dim}};
    case Kind::kPartialRowwiseLamb: return {{"exp_avg", 0, dim}, {"exp_avg_sq", dim, 1}};
    case Kind::kPartialRowwiseAdam: return {{"exp_avg", 0, dim}, {"exp_avg_sq", dim, 1}};
    case Kind::kAdadelta: return {{"square_avg", 0, dim}, {"acc_delta", dim, dim}};
    case Kind::kRmsprop: return {{"square_avg", 0, dim}};
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
    case Kind::kLarsSgd: return "lars_sgd_optimizer";
    case Kind::kLamb: return "lamb_optimizer";
    case Kind::kPartialRowwiseLamb: return "partial_rowwise_lamb_optimizer";
    case Kind::kPartialRowwiseAdam: return "partial_rowwise_adam_optimizer";
    case Kind::kAdadelta: return "adadelta_optimizer";
    case Kind::kRmsprop: return "rmsprop_optimizer";
  }
  return "";
}

namespace {

using google::protobuf::Message;

// The fields every sparse optimizer message has.
template <typename Config>
SparseOptimizerSpec BaseSpec(SparseOptimizerSpec::Kind kind, const Config& c) {
  SparseOptimizerSpec spec;
  spec.kind = kind;
  spec.lr = c.lr();
  spec.gradient_clipping = c.gradient_clipping();
  spec.max_gradient = c.max_gradient();
  return spec;
}

SparseOptimizerSpec MakeSgd(const Message& msg) {
  return BaseSpec(SparseOptimizerSpec::Kind::kSgd, static_cast<const protos::FusedSGDOptimizer&>(msg));
}

SparseOptimizerSpec MakeAdagrad(const Message& msg) {
  const auto& c = static_cast<const protos::FusedAdagradOptimizer&>(msg);
  SparseOptimizerSpec spec = BaseSpec(SparseOptimizerSpec::Kind::kAdagrad, c);
  spec.initial_accumulator = c.initial_accumulator_value();
  return spec;
}

SparseOptimizerSpec MakeRowwiseAdagrad(const Message& msg) {
  const auto& c = static_cast<const protos::FusedRowWiseAdagradOptimizer&>(msg);
  SparseOptimizerSpec spec = BaseSpec(SparseOptimizerSpec::Kind::kRowwiseAdagrad, c);
  spec.weight_decay = c.weight_decay();
  switch (c.weight_decay_mode()) {
    case protos::WeightDecayMode::NONE: spec.weight_decay_mode = SparseOptimizerSpec::WeightDecayMode::kNone; break;
    case protos::WeightDecayMode::L2: spec.weight_decay_mode = SparseOptimizerSpec::WeightDecayMode::kL2; break;
    case protos::WeightDecayMode::DECOUPLE: spec.weight_decay_mode = SparseOptimizerSpec::WeightDecayMode::kDecouple; break;
    default: Fail("train_config.sparse_optimizer.rowwise_adagrad_optimizer.weight_decay_mode: not supported yet");
  }
  return spec;
}

// adam, lamb, partial_rowwise_lamb and partial_rowwise_adam share their fields.
template <typename Config, SparseOptimizerSpec::Kind kKind>
SparseOptimizerSpec MakeAdamLike(const Message& msg) {
  const auto& c = static_cast<const Config&>(msg);
  SparseOptimizerSpec spec = BaseSpec(kKind, c);
  spec.beta1 = c.beta1();
  spec.beta2 = c.beta2();
  spec.weight_decay = c.weight_decay();
  return spec;
}

SparseOptimizerSpec MakeLarsSgd(const Message& msg) {
  const auto& c = static_cast<const protos::FusedLarsSGDOptimizer&>(msg);
  SparseOptimizerSpec spec = BaseSpec(SparseOptimizerSpec::Kind::kLarsSgd, c);
  spec.momentum = c.momentum();
  spec.weight_decay = c.weight_decay();
  return spec;
}

SparseOptimizerSpec MakeAdadelta(const Message& msg) {
  const auto& c = static_cast<const protos::FusedAdadeltaOptimizer&>(msg);
  SparseOptimizerSpec spec = BaseSpec(SparseOptimizerSpec::Kind::kAdadelta, c);
  spec.rho = c.rho();
  spec.eps = c.eps();
  spec.weight_decay = c.weight_decay();
  return spec;
}

SparseOptimizerSpec MakeRmsprop(const Message& msg) {
  const auto& c = static_cast<const protos::FusedRMSpropOptimizer&>(msg);
  SparseOptimizerSpec spec = BaseSpec(SparseOptimizerSpec::Kind::kRmsprop, c);
  spec.alpha = c.alpha();
  spec.eps = c.eps();
  spec.weight_decay = c.weight_decay();
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
TZREC_REGISTER(SparseOptimizerRegistry(), "adam_optimizer",
               (MakeAdamLike<protos::FusedAdamOptimizer, SparseOptimizerSpec::Kind::kAdam>), "lr", "beta1",
               "beta2", "weight_decay", "gradient_clipping", "max_gradient");
TZREC_REGISTER(SparseOptimizerRegistry(), "lars_sgd_optimizer", MakeLarsSgd, "lr", "momentum",
               "weight_decay", "gradient_clipping", "max_gradient");
TZREC_REGISTER(SparseOptimizerRegistry(), "lamb_optimizer",
               (MakeAdamLike<protos::FusedLAMBOptimizer, SparseOptimizerSpec::Kind::kLamb>), "lr",
               "beta1", "beta2", "weight_decay", "gradient_clipping", "max_gradient");
TZREC_REGISTER(SparseOptimizerRegistry(), "partial_rowwise_lamb_optimizer",
               (MakeAdamLike<protos::FusedPartialRowWiseLAMBOptimizer, SparseOptimizerSpec::Kind::kPartialRowwiseLamb>),
               "lr", "beta1", "beta2", "weight_decay", "gradient_clipping", "max_gradient");
TZREC_REGISTER(SparseOptimizerRegistry(), "partial_rowwise_adam_optimizer",
               (MakeAdamLike<protos::FusedPartialRowWiseAdamOptimizer, SparseOptimizerSpec::Kind::kPartialRowwiseAdam>),
               "lr", "beta1", "beta2", "weight_decay", "gradient_clipping", "max_gradient");
TZREC_REGISTER(SparseOptimizerRegistry(), "adadelta_optimizer", MakeAdadelta, "lr", "rho", "eps",
               "weight_decay", "gradient_clipping", "max_gradient");
TZREC_REGISTER(SparseOptimizerRegistry(), "rmsprop_optimizer", MakeRmsprop, "lr", "alpha", "eps",
               "weight_decay", "gradient_clipping", "max_gradient");

SparseOptimizerSpec ParseSparseOptimizer(const protos::SparseOptimizer& config) {
  const auto* which = RegisteredOneofMember(config, "optimizer", SparseOptimizerRegistry(),
                                            "train_config.sparse_optimizer");
  return SparseOptimizerRegistry().Get(which->name())(config.GetReflection()->GetMessage(config, which));
}

}  // namespace tzrec
