// MMoE: multi-gate mixture of experts (TorchEasyRec's modules/mmoe.py). `num_expert` copies of
// `expert_mlp` read the input; for each task a gate softmax(Linear_t(gate_mlp_t(x) or x)) over
// the experts mixes their outputs into that task's input. Used by mmoe and dbmtl. A module is
// used by one thread at a time.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <string>
#include <vector>

#include "tzrec/modules/mlp.h"
#include "tzrec/protos/module.pb.h"

namespace tzrec {

class MMoEImpl : public torch::nn::Module {
 public:
  // `gate_mlp` may be null (the gate reads the input directly).
  MMoEImpl(int64_t in_features, const protos::MLP& expert_mlp, int num_expert, int num_task,
           const protos::MLP* gate_mlp, const std::string& where);
  // One [B, output_dim] input per task.
  std::vector<at::Tensor> forward(const at::Tensor& input);
  // The same as TorchScript (script/script_writer.h): one local per task.
  std::vector<std::string> Script(ScriptWriter& w, const std::string& input, const std::string& name) const;
  int64_t output_dim() const { return output_dim_; }

 private:
  int num_expert_;
  int num_task_;
  int64_t output_dim_ = 0;
  torch::nn::ModuleList expert_mlps_;
  torch::nn::ModuleList gate_mlps_{nullptr};
  torch::nn::ModuleList gate_finals_;
};
TORCH_MODULE(MMoE);

// softmax(gate_logits) over experts, mixing `experts` [B, E, D] -> [B, D].
at::Tensor MixExperts(const at::Tensor& gate_logits, const at::Tensor& experts);

}  // namespace tzrec
