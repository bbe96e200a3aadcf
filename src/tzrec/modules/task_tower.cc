#include "tzrec/modules/task_tower.h"

namespace tzrec {

TaskTowerImpl::TaskTowerImpl(int64_t in_features, int64_t num_class, const protos::MLP* mlp,
                             const std::string& where) {
  CheckedWidth(num_class, where + ".num_class");
  int64_t linear_in = in_features;
  if (mlp) {
    tower_mlp_ = register_module("tower_mlp", MLP(in_features, *mlp, where + ".mlp"));
    linear_in = tower_mlp_->output_dim();
  }
  linear_ = register_module("linear", torch::nn::Linear(linear_in, num_class));
}

at::Tensor TaskTowerImpl::forward(const at::Tensor& input) {
  return linear_->forward(tower_mlp_ ? tower_mlp_->forward(input) : input);
}

std::string TaskTowerImpl::Script(ScriptWriter& w, const std::string& input, const std::string& name) const {
  const std::string x = tower_mlp_ ? tower_mlp_->Script(w, input, name + "_mlp") : input;
  return ScriptLinear(w, *linear_, x, name + "_linear");
}

}  // namespace tzrec
