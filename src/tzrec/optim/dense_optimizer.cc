#include "tzrec/optim/dense_optimizer.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <regex>

#include "tzrec/common/error.h"
#include "tzrec/config/supported_fields.h"
#include "tzrec/config/oneof.h"
#include "tzrec/optim/adadelta.h"
#include "tzrec/optim/fused_adam.h"

namespace tzrec {
namespace {

using google::protobuf::Message;
using OptimizerPtr = std::unique_ptr<torch::optim::Optimizer>;

OptimizerPtr MakeSgd(const Message& msg, std::vector<at::Tensor> parameters) {
  const auto& c = static_cast<const protos::SGDOptimizer&>(msg);
  return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(c.lr())
                                                             .momentum(c.momentum())
                                                             .dampening(c.dampening())
                                                             .weight_decay(c.weight_decay())
                                                             .nesterov(c.nesterov()));
}

// torch.optim.Adagrad: sum += g^2; w -= lr * g / (sqrt(sum) + eps), L2 weight decay added to g.
OptimizerPtr MakeAdagrad(const Message& msg, std::vector<at::Tensor> parameters) {
  const auto& c = static_cast<const protos::AdagradOptimizer&>(msg);
  return std::make_unique<torch::optim::Adagrad>(
      parameters, torch::optim::AdagradOptions(c.lr())
                      .weight_decay(c.weight_decay())
                      .initial_accumulator_value(c.initial_accumulator_value())
                      .eps(c.eps()));
}

OptimizerPtr MakeAdam(const Message& msg, std::vector<at::Tensor> parameters) {
  const auto& c = static_cast<const protos::AdamOptimizer&>(msg);
  return std::make_unique<FusedAdam>(parameters, torch::optim::AdamOptions(c.lr())
                                                              .betas({c.beta1(), c.beta2()})
                                                              .eps(c.eps())
                                                              .weight_decay(c.weight_decay())
                                                              .amsgrad(c.amsgrad()));
}

OptimizerPtr MakeAdamW(const Message& msg, std::vector<at::Tensor> parameters) {
  const auto& c = static_cast<const protos::AdamWOptimizer&>(msg);
  return std::make_unique<FusedAdamW>(parameters, torch::optim::AdamWOptions(c.lr())
                                                               .betas({c.beta1(), c.beta2()})
                                                               .eps(c.eps())
                                                               .weight_decay(c.weight_decay())
                                                               .amsgrad(c.amsgrad()));
}

// torch.optim.Adadelta (ours: LibTorch 1.13 has none).
OptimizerPtr MakeAdadelta(const Message& msg, std::vector<at::Tensor> parameters) {
  const auto& c = static_cast<const protos::AdadeltaOptimizer&>(msg);
  return std::make_unique<Adadelta>(
      parameters, AdadeltaOptions(c.lr()).rho(c.rho()).eps(c.eps()).weight_decay(c.weight_decay()));
}

// torch.optim.RMSprop without momentum or centering (TorchEasyRec passes neither):
// sq = alpha*sq + (1-alpha) g^2;  w -= lr * g / (sqrt(sq) + eps).
OptimizerPtr MakeRmsprop(const Message& msg, std::vector<at::Tensor> parameters) {
  const auto& c = static_cast<const protos::RMSpropOptimizer&>(msg);
  return std::make_unique<torch::optim::RMSprop>(
      parameters,
      torch::optim::RMSpropOptions(c.lr()).alpha(c.alpha()).eps(c.eps()).weight_decay(c.weight_decay()));
}

const bool kPartOptimizerFields =
    HonourMessageFields("tzrec.protos.DenseOptimizer", {"part_optimizers"}) &&
    HonourMessageFields("tzrec.protos.PartOptimizer", {"regex_pattern"});

}  // namespace

Registry<DenseOptimizerFactory>& DenseOptimizerRegistry() {
  static Registry<DenseOptimizerFactory> registry(
      "dense optimizer", {ConfigSlot{"tzrec.protos.DenseOptimizer", "optimizer"},
                          ConfigSlot{"tzrec.protos.PartOptimizer", "optimizer"}});
  return registry;
}

// `fused` selects torch's fused CUDA kernels; the math is the same on CPU.
TZREC_REGISTER(DenseOptimizerRegistry(), "sgd_optimizer", MakeSgd, "lr", "momentum",
               "weight_decay", "dampening", "nesterov", "fused");
TZREC_REGISTER(DenseOptimizerRegistry(), "adagrad_optimizer", MakeAdagrad, "lr", "weight_decay",
               "initial_accumulator_value", "eps", "fused");
TZREC_REGISTER(DenseOptimizerRegistry(), "adam_optimizer", MakeAdam, "lr", "beta1", "beta2",
               "weight_decay", "eps", "amsgrad", "fused");
TZREC_REGISTER(DenseOptimizerRegistry(), "adamw_optimizer", MakeAdamW, "lr", "beta1", "beta2",
               "weight_decay", "eps", "amsgrad", "fused");
TZREC_REGISTER(DenseOptimizerRegistry(), "adadelta_optimizer", MakeAdadelta, "lr", "rho", "eps",
               "weight_decay");
TZREC_REGISTER(DenseOptimizerRegistry(), "rmsprop_optimizer", MakeRmsprop, "lr", "alpha", "eps",
               "weight_decay");

std::unique_ptr<torch::optim::Optimizer> CreateDenseOptimizer(
    const protos::DenseOptimizer& config, std::vector<at::Tensor> parameters) {
  return CreateDenseOptimizer(config, std::move(parameters), "train_config.dense_optimizer");
}

std::unique_ptr<torch::optim::Optimizer> CreateDenseOptimizer(const google::protobuf::Message& config,
                                                              std::vector<at::Tensor> parameters,
                                                              const std::string& where) {
  const auto* which = RegisteredOneofMember(config, "optimizer", DenseOptimizerRegistry(), where);
  return DenseOptimizerRegistry().Get(which->name())(config.GetReflection()->GetMessage(config, which),
                                                     std::move(parameters));
}

std::vector<std::vector<std::string>> GroupParametersByPattern(const std::vector<std::string>& names,
                                                               const protos::DenseOptimizer& config) {
  std::vector<std::regex> patterns;
  for (int i = 0; i < config.part_optimizers_size(); ++i) {
    const std::string& pattern = config.part_optimizers(i).regex_pattern();
    try {
      patterns.emplace_back(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      Fail("train_config.dense_optimizer.part_optimizers[", i, "].regex_pattern: '", pattern,
           "' is not a regular expression (", e.what(), ")");
    }
  }
  std::vector<std::vector<std::string>> groups(patterns.size() + 1);
  for (const std::string& name : names) {
    size_t group = patterns.size();
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (std::regex_match(name, patterns[i])) {
        group = i;
        break;
      }
    }
    groups[group].push_back(name);
  }
  return groups;
}

double DenseLearningRate(torch::optim::Optimizer& optimizer) {
  if (optimizer.param_groups().empty()) return 0.0;
  return optimizer.param_groups()[0].options().get_lr();
}

void SetDenseLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace tzrec
