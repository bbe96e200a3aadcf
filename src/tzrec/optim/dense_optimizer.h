// Dense optimizers (train_config.dense_optimizer) over a model's torch::nn parameters, by config
// name (slot DenseOptimizer / optimizer): sgd_optimizer, adagrad_optimizer, adam_optimizer,
// adamw_optimizer, adadelta_optimizer, rmsprop_optimizer with TorchEasyRec's (torch.optim's)
// semantics and defaults. Not thread-safe.
#pragma once

#include <google/protobuf/message.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <vector>

#include "tzrec/common/registry.h"
#include "tzrec/protos/optimizer.pb.h"

namespace tzrec {

using DenseOptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(
    const google::protobuf::Message& config, std::vector<at::Tensor> parameters)>;
Registry<DenseOptimizerFactory>& DenseOptimizerRegistry();

std::unique_ptr<torch::optim::Optimizer> CreateDenseOptimizer(
    const protos::DenseOptimizer& config, std::vector<at::Tensor> parameters);

double DenseLearningRate(torch::optim::Optimizer& optimizer);
void SetDenseLearningRate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace tzrec
