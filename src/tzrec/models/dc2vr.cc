// DC2VR (model_config.dc2vr, de-confounding conversion rate), as TorchEasyRec builds it: the
// first feature group through an optional `bottom_mlp`, then an optional MMoE (`expert_mlp`,
// `gate_mlp`, `num_expert`; without it every task reads the same input), then per task tower
// an optional `mlp`; a tower with `low_rank_dim` corrects its representation by an
// Intervention (modules/intervention.h) whose source is the concatenation of the outputs of
// its `intervention_tower_names` (earlier towers, in order); a Linear(num_class) per tower.
// One head per task tower: "probs_<tower>", "<loss>_<tower>", "<metric>_<tower>".
#include <ATen/ops/cat.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/intervention.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/modules/mmoe.h"
#include "tzrec/protos/models/multi_task_rank.pb.h"

namespace tzrec {
namespace {

class DC2VR : public Model {
 public:
  explicit DC2VR(const ModelContext& context) : Model(context) {
    const auto& config = this->config().dc2vr();
    const std::string where = "model_config.dc2vr";
    AddTowerHeads(TaskTowers(config), where + ".task_towers");
    InitInput();
    group_ = embedding_group().group_names().front();
    int64_t dim = InputDim(group_);
    if (config.has_bottom_mlp()) {
      bottom_ = register_module("bottom_mlp", MLP(dim, config.bottom_mlp(), where + ".bottom_mlp"));
      dim = bottom_->output_dim();
    }
    const int num_tasks = config.task_towers_size();
    if (config.has_expert_mlp()) {
      mmoe_ = register_module("mmoe", MMoE(dim, config.expert_mlp(), static_cast<int>(config.num_expert()), num_tasks,
                                           config.has_gate_mlp() ? &config.gate_mlp() : nullptr, where));
      dim = mmoe_->output_dim();
    } else if (config.has_gate_mlp()) {
      Fail(where, ".gate_mlp: set expert_mlp too (the gates mix experts)");
    }
    std::map<std::string, int> index_of;
    for (int t = 0; t < num_tasks; ++t) {
      const auto& tower = config.task_towers(t);
      const std::string tower_where = StrCat(where, ".task_towers[", t, "]");
      Tower built;
      built.width = dim;
      if (tower.has_mlp()) {
        built.mlp = register_module("task_mlp_" + tower.tower_name(), MLP(dim, tower.mlp(), tower_where + ".mlp"));
        built.width = built.mlp->output_dim();
      }
      if (tower.has_low_rank_dim()) {
        if (tower.intervention_tower_names().empty()) {
          Fail(tower_where, ".intervention_tower_names is empty: low_rank_dim intervenes from earlier towers");
        }
        int64_t source_width = 0;
        for (int k = 0; k < tower.intervention_tower_names_size(); ++k) {
          const std::string& source = tower.intervention_tower_names(k);
          auto it = index_of.find(source);
          if (it == index_of.end()) {
            Fail(tower_where, ".intervention_tower_names[", k, "]: '", source,
                 "' is not a task tower before this one");
          }
          built.sources.push_back(it->second);
          source_width += towers_[it->second].width;
        }
        built.intervention = register_module(
            "intervention_" + tower.tower_name(),
            Intervention(built.width, source_width, tower.low_rank_dim(), tower.dropout_ratio(), tower_where));
      }
      built.output = register_module("task_output_" + tower.tower_name(),
                                     torch::nn::Linear(built.width, heads()[t]->num_class()));
      index_of[tower.tower_name()] = t;
      towers_.push_back(std::move(built));
    }
  }

  Predictions Predict(const Batch& batch) override {
    at::Tensor x = BuildInput(batch).at(group_);
    if (bottom_) x = bottom_->forward(x);
    const std::vector<at::Tensor> inputs = mmoe_ ? mmoe_->forward(x) : std::vector<at::Tensor>(towers_.size(), x);
    std::vector<at::Tensor> nets, outputs;
    for (size_t t = 0; t < towers_.size(); ++t) {
      Tower& tower = towers_[t];
      at::Tensor net = tower.mlp ? tower.mlp->forward(inputs[t]) : inputs[t];
      if (tower.intervention) {
        std::vector<at::Tensor> sources;
        for (int s : tower.sources) sources.push_back(nets[s]);
        net = tower.intervention->forward(net, at::cat(sources, 1));
      }
      nets.push_back(net);
      outputs.push_back(tower.output->forward(net));
    }
    return HeadPredictions(outputs);
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    std::string x = ScriptInput(w, tables).at(group_);
    if (bottom_) x = bottom_->Script(w, x, "bottom_mlp");
    const std::vector<std::string> inputs =
        mmoe_ ? mmoe_->Script(w, x, "mmoe") : std::vector<std::string>(towers_.size(), x);
    std::vector<std::string> nets, outputs;
    for (size_t t = 0; t < towers_.size(); ++t) {
      const Tower& tower = towers_[t];
      const std::string name = "task_" + std::to_string(t);
      std::string net = tower.mlp ? tower.mlp->Script(w, inputs[t], name + "_mlp") : inputs[t];
      if (tower.intervention) {
        std::string sources;
        for (int s : tower.sources) sources += (sources.empty() ? "" : ", ") + nets[s];
        const std::string source = w.Let(name + "_source", "torch.cat([" + sources + "], 1)");
        net = tower.intervention->Script(w, net, source, name + "_intervention");
      }
      nets.push_back(net);
      outputs.push_back(ScriptLinear(w, *tower.output, net, name + "_output"));
    }
    ScriptHeadPredictions(w, outputs);
  }

 private:
  struct Tower {
    MLP mlp{nullptr};
    Intervention intervention{nullptr};
    std::vector<int> sources;  // earlier towers whose outputs the intervention reads
    torch::nn::Linear output{nullptr};
    int64_t width = 0;  // of the tower's representation (its intervention's output)
  };
  std::string group_;
  MLP bottom_{nullptr};
  MMoE mmoe_{nullptr};
  std::vector<Tower> towers_;
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<DC2VR>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "dc2vr", Make, "bottom_mlp.*", "expert_mlp.*", "gate_mlp.*", "num_expert",
               "task_towers.tower_name", "task_towers.label_name", "task_towers.metrics",
               "task_towers.train_metrics", "task_towers.losses", "task_towers.num_class", "task_towers.mlp.*",
               "task_towers.weight", "task_towers.intervention_tower_names", "task_towers.low_rank_dim",
               "task_towers.dropout_ratio", "task_towers.task_space_indicator_label",
               "task_towers.in_task_space_weight", "task_towers.out_task_space_weight",
               "task_towers.pareto_min_loss_weight");

}  // namespace tzrec
