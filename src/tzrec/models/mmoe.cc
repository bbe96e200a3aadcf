// MMoE (model_config.mmoe): the first feature group feeds `num_expert` expert MLPs mixed per task
// by a softmax gate (modules/mmoe.h); each task tower (optional MLP + Linear(num_class)) reads its
// mixture. One head per task tower: predictions "probs_<tower>", losses "<loss>_<tower>".
#include "tzrec/common/error.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/mmoe.h"
#include "tzrec/modules/task_tower.h"
#include "tzrec/protos/models/multi_task_rank.pb.h"

namespace tzrec {
namespace {

class MMoEModel : public Model {
 public:
  explicit MMoEModel(const ModelContext& context) : Model(context) {
    const auto& mmoe = config().mmoe();
    AddTowerHeads(TaskTowers(mmoe), "model_config.mmoe.task_towers");
    InitInput();
    group_ = embedding_group().group_names().front();
    const int num_tasks = mmoe.task_towers_size();
    mmoe_ = register_module(
        "mmoe", MMoE(InputDim(group_), mmoe.expert_mlp(),
                     static_cast<int>(mmoe.num_expert()), num_tasks,
                     mmoe.has_gate_mlp() ? &mmoe.gate_mlp() : nullptr, "model_config.mmoe"));
    for (int t = 0; t < num_tasks; ++t) {
      const auto& tower = mmoe.task_towers(t);
      task_towers_->push_back(TaskTower(mmoe_->output_dim(), tower.num_class(),
                                        tower.has_mlp() ? &tower.mlp() : nullptr,
                                        StrCat("model_config.mmoe.task_towers[", t, "]")));
    }
    register_module("_task_tower", task_towers_);
  }

  Predictions Predict(const Batch& batch) override {
    auto grouped = BuildInput(batch);
    std::vector<at::Tensor> task_inputs = mmoe_->forward(grouped.at(group_));
    std::vector<at::Tensor> outputs;
    for (size_t t = 0; t < task_inputs.size(); ++t) {
      outputs.push_back(task_towers_[t]->as<TaskTowerImpl>()->forward(task_inputs[t]));
    }
    return HeadPredictions(outputs);
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    auto grouped = ScriptInput(w, tables);
    std::vector<std::string> task_inputs = mmoe_->Script(w, grouped.at(group_), "mmoe");
    std::vector<std::string> outputs;
    for (size_t t = 0; t < task_inputs.size(); ++t) {
      outputs.push_back(task_towers_->ptr(t)->as<TaskTowerImpl>()->Script(w, task_inputs[t], "task_tower_" + std::to_string(t)));
    }
    ScriptHeadPredictions(w, outputs);
  }

 private:
  std::string group_;
  MMoE mmoe_{nullptr};
  torch::nn::ModuleList task_towers_;
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<MMoEModel>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "mmoe", Make, "expert_mlp.*", "gate_mlp.*", "num_expert",
               TZREC_TASK_TOWER_FIELDS);

}  // namespace tzrec
