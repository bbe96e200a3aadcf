// Dense optimizers from config (torch.optim semantics and TorchEasyRec's defaults) and the
// learning-rate schedule registry.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "test_util.h"
#include "tzrec/optim/dense_optimizer.h"
#include "tzrec/optim/learning_rate.h"

namespace tzrec {
namespace {

// Two steps of dense Adagrad on a parameter with a fixed gradient, against its formula:
// g' = g + wd * w; sum += g'^2; w -= lr * g' / (sqrt(sum) + eps).
TEST(DenseOptimizer, AdagradFollowsTorchOptimAdagrad) {
  protos::DenseOptimizer config;
  auto* adagrad = config.mutable_adagrad_optimizer();
  adagrad->set_lr(0.5f);
  adagrad->set_weight_decay(0.125f);
  adagrad->set_initial_accumulator_value(0.25f);
  adagrad->set_eps(0.0625f);
  at::Tensor w = torch::tensor({1.0, -2.0}, torch::kDouble).requires_grad_(true);
  auto optimizer = CreateDenseOptimizer(config, {w});
  double ref[2] = {1.0, -2.0}, sum[2] = {0.25, 0.25};
  const double g[2] = {0.5, 3.0};
  for (int step = 0; step < 2; ++step) {
    w.mutable_grad() = torch::tensor({g[0], g[1]}, torch::kDouble);
    optimizer->step();
    for (int i = 0; i < 2; ++i) {
      double gi = g[i] + 0.125 * ref[i];
      sum[i] += gi * gi;
      ref[i] -= 0.5 * gi / (std::sqrt(sum[i]) + 0.0625);
    }
  }
  EXPECT_NEAR(w[0].item<double>(), ref[0], 1e-12);
  EXPECT_NEAR(w[1].item<double>(), ref[1], 1e-12);
  EXPECT_DOUBLE_EQ(DenseLearningRate(*optimizer), 0.5);
  SetDenseLearningRate(*optimizer, 0.25);
  EXPECT_DOUBLE_EQ(DenseLearningRate(*optimizer), 0.25);
}

TEST(DenseOptimizer, DefaultsAndErrors) {
  protos::DenseOptimizer sgd;
  sgd.mutable_sgd_optimizer()->set_lr(0.1f);
  at::Tensor w = torch::zeros({1}).requires_grad_(true);
  auto optimizer = CreateDenseOptimizer(sgd, {w});
  // TorchEasyRec's dense SGD defaults to momentum 0.9.
  auto& options = static_cast<torch::optim::SGDOptions&>(optimizer->param_groups()[0].options());
  EXPECT_NEAR(options.momentum(), 0.9, 1e-7);
  protos::DenseOptimizer none;
  EXPECT_TZREC_ERROR(CreateDenseOptimizer(none, {w}), "train_config.dense_optimizer: no optimizer set");
  protos::DenseOptimizer rmsprop;
  rmsprop.mutable_rmsprop_optimizer();
  EXPECT_TZREC_ERROR(CreateDenseOptimizer(rmsprop, {w}),
                     "train_config.dense_optimizer.rmsprop_optimizer: not supported yet (supported: "
                     "adagrad_optimizer, adam_optimizer, adamw_optimizer, sgd_optimizer)");
}

TEST(LearningRate, ConstantByDefaultAndUnknownSchedulesAreErrors) {
  protos::DenseOptimizer config;
  config.mutable_adam_optimizer();
  EXPECT_DOUBLE_EQ(CreateLearningRateSchedule(config, "d")->Rate(0.01, 100, 3), 0.01);
  config.mutable_constant_learning_rate();
  EXPECT_DOUBLE_EQ(CreateLearningRateSchedule(config, "d")->Rate(0.02, 0, 0), 0.02);
  config.mutable_exponential_decay_learning_rate();
  EXPECT_TZREC_ERROR(CreateLearningRateSchedule(config, "train_config.dense_optimizer"),
                     "train_config.dense_optimizer.exponential_decay_learning_rate: not supported yet");
}

}  // namespace
}  // namespace tzrec
