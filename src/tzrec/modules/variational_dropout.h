// VariationalDropout: TorchEasyRec's feature-level variational (concrete) dropout over one
// DEEP / WIDE group's vector, used to rank features (tzrec feature_selection).
//
// Each feature of the group has a learnt logit p; in training every row multiplies the
// feature's slice by 1 - z with z a concrete relaxation of Bernoulli(sigmoid(p)) (temperature
// 0.1, uniform noise), in evaluation by 1 - sigmoid(p). The group's
// "<group>_feature_p_loss" is regularization_lambda / batch_size * sum(1 - sigmoid(p)): it
// pushes dropout up, so features the task does not need end with a high dropout ratio.
// One thread at a time (a module of the model).
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

namespace tzrec {

class VariationalDropoutImpl : public torch::nn::Module {
 public:
  // `features`: (name, width) of each slice of the group's vector, in order.
  VariationalDropoutImpl(std::vector<std::pair<std::string, int>> features, double regularization_lambda);
  // The group's vector with its dropout applied, and the group's loss.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& group);
  // Each feature's dropout ratio sigmoid(p), in order.
  std::vector<std::pair<std::string, double>> DropoutRatios() const;
  // The same as TorchScript (script/script_writer.h), inference form: `group` * (1 - ratio).
  std::string Script(class ScriptWriter& w, const std::string& group, const std::string& name) const;

 private:
  std::vector<std::pair<std::string, int>> features_;
  double lambda_;
  at::Tensor repeats_;  // int64 [features]: each feature's width
  at::Tensor feature_p_;
};
TORCH_MODULE(VariationalDropout);

}  // namespace tzrec
