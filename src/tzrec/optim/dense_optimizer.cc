#include "tzrec/optim/dense_optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "tzrec/common/error.h"

namespace tzrec {

std::unique_ptr<torch::optim::Optimizer> CreateDenseOptimizer(
    const protos::DenseOptimizer& config, std::vector<at::Tensor> parameters) {
  if (config.has_adam_optimizer()) {
    const auto& c = config.adam_optimizer();
    return std::make_unique<torch::optim::Adam>(
        parameters, torch::optim::AdamOptions(c.lr())
                        .betas({c.beta1(), c.beta2()})
                        .eps(c.eps())
                        .weight_decay(c.weight_decay())
                        .amsgrad(c.amsgrad()));
  }
  if (config.has_adamw_optimizer()) {
    const auto& c = config.adamw_optimizer();
    return std::make_unique<torch::optim::AdamW>(
        parameters, torch::optim::AdamWOptions(c.lr())
                        .betas({c.beta1(), c.beta2()})
                        .eps(c.eps())
                        .weight_decay(c.weight_decay())
                        .amsgrad(c.amsgrad()));
  }
  if (config.has_sgd_optimizer()) {
    const auto& c = config.sgd_optimizer();
    return std::make_unique<torch::optim::SGD>(
        parameters, torch::optim::SGDOptions(c.lr())
                        .momentum(c.momentum())
                        .dampening(c.dampening())
                        .weight_decay(c.weight_decay())
                        .nesterov(c.nesterov()));
  }
  Fail("train_config.dense_optimizer: no optimizer set or optimizer not supported yet ",
       "(supported: sgd_optimizer, adam_optimizer, adamw_optimizer)");
}

double DenseLearningRate(torch::optim::Optimizer& optimizer) {
  if (optimizer.param_groups().empty()) return 0.0;
  return optimizer.param_groups()[0].options().get_lr();
}

}  // namespace tzrec
