// Dense optimizers (train_config.dense_optimizer) over a model's torch::nn parameters, by config
// name (slot DenseOptimizer / optimizer): sgd_optimizer, adagrad_optimizer, adam_optimizer,
// adamw_optimizer, adadelta_optimizer, rmsprop_optimizer with TorchEasyRec's (torch.optim's)
// semantics and defaults. Not thread-safe.
#pragma once

#include <google/protobuf/message.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tzrec/common/registry.h"
#include "tzrec/protos/optimizer.pb.h"

namespace tzrec {

using DenseOptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(
    const google::protobuf::Message& config, std::vector<at::Tensor> parameters)>;
Registry<DenseOptimizerFactory>& DenseOptimizerRegistry();

std::unique_ptr<torch::optim::Optimizer> CreateDenseOptimizer(
    const protos::DenseOptimizer& config, std::vector<at::Tensor> parameters);
// From any message with the `optimizer` oneof (DenseOptimizer, PartOptimizer); `where` names
// it in errors.
std::unique_ptr<torch::optim::Optimizer> CreateDenseOptimizer(const google::protobuf::Message& config,
                                                              std::vector<at::Tensor> parameters,
                                                              const std::string& where);

// part_optimizers: parameter names grouped by the first part whose regex_pattern matches the
// whole name (as Python's re.fullmatch; ECMAScript syntax), one group per part in config
// order, then the names no pattern matches (the dense optimizer's). A bad pattern fails
// naming its field.
std::vector<std::vector<std::string>> GroupParametersByPattern(const std::vector<std::string>& names,
                                                               const protos::DenseOptimizer& config);

double DenseLearningRate(torch::optim::Optimizer& optimizer);
void SetDenseLearningRate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace tzrec
