// PLE (model_config.ple): stacked extraction networks (modules/extraction_net.h) over the first
// feature group — every task input and the shared input start as the group's embedding — then
// one task tower (optional MLP + Linear(num_class)) per task on the last layer's task output.
#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/extraction_net.h"
#include "tzrec/modules/task_tower.h"
#include "tzrec/protos/models/multi_task_rank.pb.h"

namespace tzrec {
namespace {

class PLEModel : public Model {
 public:
  explicit PLEModel(const ModelContext& context) : Model(context) {
    const auto& ple = config().ple();
    AddTowerHeads(TaskTowers(ple), "model_config.ple.task_towers");
    InitInput();
    group_ = embedding_group().group_names().front();
    const int64_t feature_in = InputDim(group_);
    num_tasks_ = ple.task_towers_size();
    if (ple.extraction_networks_size() == 0) {
      Fail("model_config.ple.extraction_networks: at least one extraction network is required");
    }
    std::vector<int64_t> task_in(num_tasks_, feature_in);
    int64_t shared_in = feature_in;
    for (int i = 0; i < ple.extraction_networks_size(); ++i) {
      const bool last = i + 1 == ple.extraction_networks_size();
      ExtractionNet net(task_in, shared_in, ple.extraction_networks(i), last,
                        StrCat("model_config.ple.extraction_networks[", i, "]"));
      task_in.assign(num_tasks_, net->task_output_dim());
      shared_in = net->shared_output_dim();
      extraction_nets_->push_back(net);
    }
    register_module("_extraction_nets", extraction_nets_);
    for (int t = 0; t < num_tasks_; ++t) {
      const auto& tower = ple.task_towers(t);
      task_towers_->push_back(TaskTower(task_in[t], tower.num_class(),
                                        tower.has_mlp() ? &tower.mlp() : nullptr,
                                        StrCat("model_config.ple.task_towers[", t, "]")));
    }
    register_module("_task_tower", task_towers_);
  }

  Predictions Predict(const Batch& batch) override {
    auto grouped = BuildInput(batch);
    const at::Tensor& net = grouped.at(group_);
    std::vector<at::Tensor> task_features(num_tasks_, net);
    at::Tensor shared = net;
    for (const auto& module : *extraction_nets_) {
      auto out = module->as<ExtractionNetImpl>()->forward(task_features, shared);
      task_features = std::move(out.first);
      shared = out.second;
    }
    std::vector<at::Tensor> outputs;
    for (int t = 0; t < num_tasks_; ++t) {
      outputs.push_back(task_towers_[t]->as<TaskTowerImpl>()->forward(task_features[t]));
    }
    return HeadPredictions(outputs);
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    const std::string net = ScriptInput(w, tables).at(group_);
    std::vector<std::string> task_features(num_tasks_, net);
    std::string shared = net;
    for (size_t i = 0; i < extraction_nets_->size(); ++i) {
      auto out = extraction_nets_->ptr(i)->as<ExtractionNetImpl>()->Script(w, task_features, shared, StrCat("extraction_", i));
      task_features = std::move(out.first);
      shared = out.second;
    }
    std::vector<std::string> outputs;
    for (int t = 0; t < num_tasks_; ++t) {
      outputs.push_back(task_towers_->ptr(t)->as<TaskTowerImpl>()->Script(w, task_features[t], StrCat("task_tower_", t)));
    }
    ScriptHeadPredictions(w, outputs);
  }

 private:
  std::string group_;
  int num_tasks_ = 0;
  torch::nn::ModuleList extraction_nets_;
  torch::nn::ModuleList task_towers_;
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<PLEModel>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "ple", Make, "extraction_networks.network_name",
               "extraction_networks.expert_num_per_task", "extraction_networks.share_num",
               "extraction_networks.task_expert_net.*", "extraction_networks.share_expert_net.*",
               TZREC_TASK_TOWER_FIELDS);

}  // namespace tzrec
