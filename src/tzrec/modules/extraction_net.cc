#include "tzrec/modules/extraction_net.h"

#include <ATen/ops/stack.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/modules/mmoe.h"

namespace tzrec {

ExtractionNetImpl::ExtractionNetImpl(const std::vector<int64_t>& task_input_dims,
                                     int64_t shared_input_dim,
                                     const protos::ExtractionNetwork& config, bool final_layer,
                                     const std::string& where)
    : final_layer_(final_layer) {
  const int per_task = static_cast<int>(
      CheckedCount(config.expert_num_per_task(), 0, kMaxModuleCount, where + ".expert_num_per_task"));
  const int shared = static_cast<int>(CheckedCount(config.share_num(), 0, kMaxModuleCount, where + ".share_num"));
  if (per_task + shared < 1) Fail(where, ": expert_num_per_task + share_num must be >= 1");
  for (int i = 0; i < shared; ++i) {
    MLP expert(shared_input_dim, config.share_expert_net(), where + ".share_expert_net");
    shared_output_dim_ = expert->output_dim();
    shared_layers_->push_back(expert);
  }
  if (shared > 0 && !config.has_share_expert_net()) Fail(where, ".share_expert_net is required with share_num > 0");
  register_module("_shared_layers", shared_layers_);
  const int64_t num_tasks = static_cast<int64_t>(task_input_dims.size());
  if (!final_layer_) {
    shared_gate_ = register_module("_shared_gate",
                                   torch::nn::Linear(shared_input_dim, num_tasks * per_task + shared));
  }
  for (int64_t in : task_input_dims) {
    torch::nn::ModuleList experts;
    for (int i = 0; i < per_task; ++i) {
      MLP expert(in, config.task_expert_net(), where + ".task_expert_net");
      task_output_dim_ = expert->output_dim();
      experts->push_back(expert);
    }
    task_layers_->push_back(experts);
    task_gates_->push_back(torch::nn::Linear(in, per_task + shared));
  }
  if (per_task == 0) task_output_dim_ = shared_output_dim_;
  // Without shared experts the shared gate mixes task experts only.
  if (shared == 0) shared_output_dim_ = task_output_dim_;
  register_module("_task_layers", task_layers_);
  register_module("_task_gates", task_gates_);
}

std::pair<std::vector<at::Tensor>, at::Tensor> ExtractionNetImpl::forward(
    const std::vector<at::Tensor>& task_inputs, const at::Tensor& shared_input) {
  std::vector<at::Tensor> shared;
  for (const auto& expert : *shared_layers_) shared.push_back(expert->as<MLPImpl>()->forward(shared_input));
  std::vector<at::Tensor> all_task_experts;
  std::vector<at::Tensor> outputs;
  for (size_t t = 0; t < task_inputs.size(); ++t) {
    std::vector<at::Tensor> experts;
    for (const auto& expert : *task_layers_[t]->as<torch::nn::ModuleListImpl>()) {
      experts.push_back(expert->as<MLPImpl>()->forward(task_inputs[t]));
    }
    all_task_experts.insert(all_task_experts.end(), experts.begin(), experts.end());
    experts.insert(experts.end(), shared.begin(), shared.end());
    at::Tensor gate = task_gates_[t]->as<torch::nn::LinearImpl>()->forward(task_inputs[t]);
    outputs.push_back(MixExperts(gate, at::stack(experts, 1)));
  }
  at::Tensor shared_out;
  if (!final_layer_) {
    all_task_experts.insert(all_task_experts.end(), shared.begin(), shared.end());
    shared_out = MixExperts(shared_gate_->forward(shared_input), at::stack(all_task_experts, 1));
  }
  return {outputs, shared_out};
}

}  // namespace tzrec

namespace tzrec {

std::pair<std::vector<std::string>, std::string> ExtractionNetImpl::Script(
    ScriptWriter& w, const std::vector<std::string>& task_inputs, const std::string& shared_input,
    const std::string& name) const {
  auto mix = [&](const std::string& gate, const std::vector<std::string>& experts) {
    std::string list;
    for (const std::string& e : experts) list += (list.empty() ? "" : ", ") + e;
    return w.Let("mixed", "torch.matmul(torch.softmax(" + gate + ", 1).unsqueeze(1), torch.stack([" + list +
                              "], 1)).squeeze(1)");
  };
  std::vector<std::string> shared;
  for (size_t e = 0; e < shared_layers_->size(); ++e) {
    shared.push_back(shared_layers_->ptr(e)->as<MLPImpl>()->Script(w, shared_input, StrCat(name, "_shared_", e)));
  }
  std::vector<std::string> all_task_experts, outputs;
  for (size_t t = 0; t < task_inputs.size(); ++t) {
    std::vector<std::string> experts;
    const auto& layer = *task_layers_->ptr(t)->as<torch::nn::ModuleListImpl>();
    for (size_t e = 0; e < layer.size(); ++e) {
      experts.push_back(layer.ptr(e)->as<MLPImpl>()->Script(w, task_inputs[t], StrCat(name, "_task_", t, "_", e)));
    }
    all_task_experts.insert(all_task_experts.end(), experts.begin(), experts.end());
    experts.insert(experts.end(), shared.begin(), shared.end());
    const std::string gate =
        ScriptLinear(w, *task_gates_->ptr(t)->as<torch::nn::LinearImpl>(), task_inputs[t], StrCat(name, "_task_gate_", t));
    outputs.push_back(mix(gate, experts));
  }
  std::string shared_out;
  if (!final_layer_) {
    all_task_experts.insert(all_task_experts.end(), shared.begin(), shared.end());
    shared_out = mix(ScriptLinear(w, *shared_gate_, shared_input, name + "_shared_gate"), all_task_experts);
  }
  return {outputs, shared_out};
}

}  // namespace tzrec
