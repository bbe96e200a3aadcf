#include "tzrec/modules/mmoe.h"

#include <ATen/ops/matmul.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/stack.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"

namespace tzrec {

at::Tensor MixExperts(const at::Tensor& gate_logits, const at::Tensor& experts) {
  return at::matmul(at::softmax(gate_logits, 1).unsqueeze(1), experts).squeeze(1);
}

MMoEImpl::MMoEImpl(int64_t in_features, const protos::MLP& expert_mlp, int num_expert,
                   int num_task, const protos::MLP* gate_mlp, const std::string& where)
    : num_expert_(num_expert), num_task_(num_task) {
  CheckedCount(num_expert, 1, kMaxModuleCount, where + ".num_expert");
  if (num_task < 1) Fail(where, ".task_towers: at least one task tower is required");
  for (int i = 0; i < num_expert; ++i) {
    MLP expert(in_features, expert_mlp, where + ".expert_mlp");
    output_dim_ = expert->output_dim();
    expert_mlps_->push_back(expert);
  }
  register_module("expert_mlps", expert_mlps_);
  int64_t gate_in = in_features;
  if (gate_mlp) {
    gate_mlps_ = torch::nn::ModuleList();
    for (int t = 0; t < num_task; ++t) {
      MLP gate(in_features, *gate_mlp, where + ".gate_mlp");
      gate_in = gate->output_dim();
      gate_mlps_->push_back(gate);
    }
    register_module("gate_mlps", gate_mlps_);
  }
  for (int t = 0; t < num_task; ++t) gate_finals_->push_back(torch::nn::Linear(gate_in, num_expert));
  register_module("gate_finals", gate_finals_);
}

std::vector<at::Tensor> MMoEImpl::forward(const at::Tensor& input) {
  std::vector<at::Tensor> experts;
  for (const auto& expert : *expert_mlps_) experts.push_back(expert->as<MLPImpl>()->forward(input));
  at::Tensor stacked = at::stack(experts, 1);
  std::vector<at::Tensor> out;
  for (int t = 0; t < num_task_; ++t) {
    at::Tensor gate = gate_mlps_ ? gate_mlps_->ptr(t)->as<MLPImpl>()->forward(input) : input;
    out.push_back(MixExperts(gate_finals_[t]->as<torch::nn::LinearImpl>()->forward(gate), stacked));
  }
  return out;
}

std::vector<std::string> MMoEImpl::Script(ScriptWriter& w, const std::string& input,
                                          const std::string& name) const {
  std::string experts;
  for (size_t e = 0; e < expert_mlps_->size(); ++e) {
    experts += (e ? ", " : "") + expert_mlps_->ptr(e)->as<MLPImpl>()->Script(w, input, name + "_expert_" + std::to_string(e));
  }
  const std::string stacked = w.Let("experts", "torch.stack([" + experts + "], 1)");
  std::vector<std::string> out;
  for (int t = 0; t < num_task_; ++t) {
    const std::string task = name + "_gate_" + std::to_string(t);
    const std::string gate = gate_mlps_ ? gate_mlps_->ptr(t)->as<MLPImpl>()->Script(w, input, task + "_mlp") : input;
    const std::string logits = ScriptLinear(w, *gate_finals_->ptr(t)->as<torch::nn::LinearImpl>(), gate, task);
    out.push_back(w.Let("task_input", "torch.matmul(torch.softmax(" + logits + ", 1).unsqueeze(1), " +
                                          stacked + ").squeeze(1)"));
  }
  return out;
}

}  // namespace tzrec
