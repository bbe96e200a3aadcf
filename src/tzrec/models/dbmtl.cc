// DBMTL (model_config.dbmtl): first feature group -> optional mask_net (modules/masknet.h) ->
// optional bottom_mlp -> optional MMoE (when expert_mlp is set) -> per-task optional MLP; a
// tower with relation_mlp reads cat[its own task net, the relation net of each tower in
// relation_tower_names] (towers in config order, so related towers come earlier; a tower
// without relation_mlp passes its task net on as its relation net); Linear(num_class) on the
// relation net. As TorchEasyRec's DBMTL.
#include <ATen/ops/cat.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/masknet.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/modules/mmoe.h"
#include "tzrec/protos/models/multi_task_rank.pb.h"

namespace tzrec {
namespace {

class DBMTLModel : public Model {
 public:
  explicit DBMTLModel(const ModelContext& context) : Model(context) {
    const auto& dbmtl = config().dbmtl();
    const std::string where = "model_config.dbmtl";
    AddTowerHeads(TaskTowers(dbmtl), where + ".task_towers");
    InitInput();
    group_ = embedding_group().group_names().front();
    int64_t feature_in = InputDim(group_);
    if (dbmtl.has_mask_net()) {
      mask_net_ = register_module("mask_net", MaskNetModule(feature_in, dbmtl.mask_net(), where + ".mask_net"));
      feature_in = mask_net_->output_dim();
    }
    if (dbmtl.has_bottom_mlp()) {
      bottom_mlp_ = register_module("bottom_mlp", MLP(feature_in, dbmtl.bottom_mlp(), where + ".bottom_mlp"));
      feature_in = bottom_mlp_->output_dim();
    }
    const int num_tasks = dbmtl.task_towers_size();
    if (dbmtl.has_expert_mlp()) {
      mmoe_ = register_module("mmoe", MMoE(feature_in, dbmtl.expert_mlp(), static_cast<int>(dbmtl.num_expert()),
                                           num_tasks, dbmtl.has_gate_mlp() ? &dbmtl.gate_mlp() : nullptr, where));
      feature_in = mmoe_->output_dim();
    } else if (dbmtl.has_gate_mlp() || dbmtl.has_num_expert()) {
      Fail(where, ": gate_mlp / num_expert configure the MMoE, which needs expert_mlp");
    }
    std::map<std::string, int64_t> task_dim, relation_dim;
    std::map<std::string, int> index_of;
    for (int t = 0; t < num_tasks; ++t) {
      const auto& tower = dbmtl.task_towers(t);
      const std::string tower_where = StrCat(where, ".task_towers[", t, "]");
      const std::string& name = tower.tower_name();
      index_of[name] = t;
      task_dim[name] = feature_in;
      if (tower.has_mlp()) {
        MLP mlp(feature_in, tower.mlp(), tower_where + ".mlp");
        task_dim[name] = mlp->output_dim();
        task_mlps_->update({{name, mlp.ptr()}});
      }
      relation_dim[name] = task_dim[name];
      if (tower.has_relation_mlp()) {
        int64_t in = task_dim[name];
        for (const auto& related : tower.relation_tower_names()) {
          auto it = relation_dim.find(related);
          if (it == relation_dim.end() || related == name) {
            Fail(tower_where, ".relation_tower_names: '", related,
                 "' is not a tower configured before this one");
          }
          in += it->second;
        }
        MLP mlp(in, tower.relation_mlp(), tower_where + ".relation_mlp");
        relation_dim[name] = mlp->output_dim();
        relation_mlps_->update({{name, mlp.ptr()}});
      } else if (tower.relation_tower_names_size() > 0) {
        Fail(tower_where, ".relation_tower_names: needs relation_mlp (TorchEasyRec ignores the "
             "names without it)");
      }
      task_outputs_->push_back(torch::nn::Linear(relation_dim[name], tower.num_class()));
      towers_.push_back(&tower);
    }
    register_module("task_mlps", task_mlps_);
    register_module("relation_mlps", relation_mlps_);
    register_module("task_outputs", task_outputs_);
  }

  Predictions Predict(const Batch& batch) override {
    auto grouped = BuildInput(batch);
    at::Tensor net = grouped.at(group_);
    if (mask_net_) net = mask_net_->forward(net);
    if (bottom_mlp_) net = bottom_mlp_->forward(net);
    const size_t num_tasks = towers_.size();
    std::vector<at::Tensor> task_inputs = mmoe_ ? mmoe_->forward(net) : std::vector<at::Tensor>(num_tasks, net);
    std::map<std::string, at::Tensor> task_net, relation_net;
    for (size_t t = 0; t < num_tasks; ++t) {
      const std::string& name = towers_[t]->tower_name();
      task_net[name] = task_mlps_->contains(name) ? task_mlps_[name]->as<MLPImpl>()->forward(task_inputs[t])
                                                  : task_inputs[t];
    }
    std::vector<at::Tensor> outputs;
    for (size_t t = 0; t < num_tasks; ++t) {
      const std::string& name = towers_[t]->tower_name();
      if (relation_mlps_->contains(name)) {
        std::vector<at::Tensor> parts = {task_net[name]};
        for (const auto& related : towers_[t]->relation_tower_names()) parts.push_back(relation_net.at(related));
        relation_net[name] = relation_mlps_[name]->as<MLPImpl>()->forward(at::cat(parts, 1));
      } else {
        relation_net[name] = task_net[name];
      }
      outputs.push_back(task_outputs_[t]->as<torch::nn::LinearImpl>()->forward(relation_net[name]));
    }
    return HeadPredictions(outputs);
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    std::string net = ScriptInput(w, tables).at(group_);
    if (mask_net_) net = mask_net_->Script(w, net, "mask_net");
    if (bottom_mlp_) net = bottom_mlp_->Script(w, net, "bottom_mlp");
    const size_t num_tasks = towers_.size();
    std::vector<std::string> task_inputs = mmoe_ ? mmoe_->Script(w, net, "mmoe") : std::vector<std::string>(num_tasks, net);
    std::map<std::string, std::string> task_net, relation_net;
    for (size_t t = 0; t < num_tasks; ++t) {
      const std::string& name = towers_[t]->tower_name();
      task_net[name] = task_mlps_->contains(name)
                           ? (*task_mlps_)[name]->as<MLPImpl>()->Script(w, task_inputs[t], "task_mlp_" + std::to_string(t))
                           : task_inputs[t];
    }
    std::vector<std::string> outputs;
    for (size_t t = 0; t < num_tasks; ++t) {
      const std::string& name = towers_[t]->tower_name();
      if (relation_mlps_->contains(name)) {
        std::string parts = task_net[name];
        for (const auto& related : towers_[t]->relation_tower_names()) parts += ", " + relation_net.at(related);
        const std::string joined = w.Let("relation_input", "torch.cat([" + parts + "], 1)");
        relation_net[name] = (*relation_mlps_)[name]->as<MLPImpl>()->Script(w, joined, "relation_mlp_" + std::to_string(t));
      } else {
        relation_net[name] = task_net[name];
      }
      outputs.push_back(ScriptLinear(w, *task_outputs_->ptr(t)->as<torch::nn::LinearImpl>(), relation_net[name],
                                     "task_output_" + std::to_string(t)));
    }
    ScriptHeadPredictions(w, outputs);
  }

 private:
  std::string group_;
  std::vector<const protos::BayesTaskTower*> towers_;
  MaskNetModule mask_net_{nullptr};
  MLP bottom_mlp_{nullptr};
  MMoE mmoe_{nullptr};
  torch::nn::ModuleDict task_mlps_;
  torch::nn::ModuleDict relation_mlps_;
  torch::nn::ModuleList task_outputs_;
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<DBMTLModel>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "dbmtl", Make, "mask_net.*", "bottom_mlp.*", "expert_mlp.*",
               "gate_mlp.*", "num_expert", "task_towers.relation_tower_names",
               "task_towers.relation_mlp.*",
               TZREC_TASK_TOWER_FIELDS);

}  // namespace tzrec
