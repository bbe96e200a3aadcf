// Dense Adadelta with torch.optim.Adadelta's update (LibTorch 1.13 has none):
//   g += weight_decay * w;  sq = rho*sq + (1-rho) g^2;
//   delta = sqrt(acc + eps) / sqrt(sq + eps) * g;  acc = rho*acc + (1-rho) delta^2;
//   w -= lr * delta
// A torch::optim::Optimizer, so learning-rate schedules and checkpoints treat it like the
// built-in ones. Not thread-safe (one training thread steps it).
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <memory>
#include <utility>
#include <vector>

namespace tzrec {

struct AdadeltaOptions : public torch::optim::OptimizerCloneableOptions<AdadeltaOptions> {
  explicit AdadeltaOptions(double lr = 1.0) : lr_(lr) {}
  TORCH_ARG(double, lr) = 1.0;
  TORCH_ARG(double, rho) = 0.9;
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct AdadeltaParamState : public torch::optim::OptimizerCloneableParamState<AdadeltaParamState> {
  TORCH_ARG(at::Tensor, square_avg);
  TORCH_ARG(at::Tensor, acc_delta);
  TORCH_ARG(int64_t, step) = 0;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

class Adadelta : public torch::optim::Optimizer {
 public:
  Adadelta(std::vector<at::Tensor> params, AdadeltaOptions defaults);
  at::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace tzrec
