// Dense optimizer (train_config.dense_optimizer) over a model's torch::nn parameters.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "tzrec/protos/optimizer.pb.h"

namespace tzrec {

// sgd_optimizer, adam_optimizer and adamw_optimizer with TorchEasyRec's defaults; others fail
// with "not supported yet".
std::unique_ptr<torch::optim::Optimizer> CreateDenseOptimizer(
    const protos::DenseOptimizer& config, std::vector<at::Tensor> parameters);

double DenseLearningRate(torch::optim::Optimizer& optimizer);

}  // namespace tzrec
