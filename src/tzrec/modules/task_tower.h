// TaskTower: a task's optional MLP and its Linear(num_class) output layer (TorchEasyRec's
// modules/task_tower.py), used by mmoe and ple. One thread at a time.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <string>

#include "tzrec/modules/mlp.h"

namespace tzrec {

class TaskTowerImpl : public torch::nn::Module {
 public:
  // `mlp` may be null.
  TaskTowerImpl(int64_t in_features, int64_t num_class, const protos::MLP* mlp, const std::string& where);
  at::Tensor forward(const at::Tensor& input);
  // The same as TorchScript (script/script_writer.h); returns the output local.
  std::string Script(ScriptWriter& w, const std::string& input, const std::string& name) const;

 private:
  MLP tower_mlp_{nullptr};
  torch::nn::Linear linear_{nullptr};
};
TORCH_MODULE(TaskTower);

}  // namespace tzrec
