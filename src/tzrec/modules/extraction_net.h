// ExtractionNet: one customized-gate-control layer of PLE (TorchEasyRec's
// modules/extraction_net.py). Per task, `expert_num_per_task` copies of `task_expert_net` read
// that task's input and `share_num` copies of `share_expert_net` read the shared input; each
// task's output is softmax(Linear(task input)) over [its experts, shared experts]; except on the
// last layer, the shared output is softmax(Linear(shared input)) over [all task experts, shared
// experts]. Gates are bare Linear layers. Used by one thread at a time.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <vector>

#include "tzrec/modules/mlp.h"
#include "tzrec/protos/module.pb.h"

namespace tzrec {

class ExtractionNetImpl : public torch::nn::Module {
 public:
  ExtractionNetImpl(const std::vector<int64_t>& task_input_dims, int64_t shared_input_dim,
                    const protos::ExtractionNetwork& config, bool final_layer,
                    const std::string& where);
  // Task outputs and the shared output (undefined on the final layer).
  std::pair<std::vector<at::Tensor>, at::Tensor> forward(const std::vector<at::Tensor>& task_inputs,
                                                         const at::Tensor& shared_input);
  // The same as TorchScript (script/script_writer.h): task output locals and the shared
  // output local ("" on the final layer).
  std::pair<std::vector<std::string>, std::string> Script(ScriptWriter& w, const std::vector<std::string>& task_inputs,
                                                          const std::string& shared_input, const std::string& name) const;
  int64_t task_output_dim() const { return task_output_dim_; }
  int64_t shared_output_dim() const { return shared_output_dim_; }

 private:
  bool final_layer_;
  int64_t task_output_dim_ = 0;
  int64_t shared_output_dim_ = 0;
  torch::nn::ModuleList shared_layers_;
  torch::nn::Linear shared_gate_{nullptr};
  torch::nn::ModuleList task_layers_;  // one ModuleList of experts per task
  torch::nn::ModuleList task_gates_;
};
TORCH_MODULE(ExtractionNet);

}  // namespace tzrec
