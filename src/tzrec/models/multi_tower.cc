// MultiTower (model_config.multi_tower): one MLP per `towers[].input` DEEP group (the group
// itself when a tower has no mlp), concatenated in config order, then the `final` MLP and
// Linear(num_class). A DEEP group with sequence_groups feeds its pooled features and sequence
// encoders' outputs to its tower.
#include <ATen/ops/cat.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/models/group_towers.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/protos/models/rank_model.pb.h"

namespace tzrec {
namespace {

class MultiTower : public Model {
 public:
  explicit MultiTower(const ModelContext& context) : Model(context) {
    const auto& config = this->config().multi_tower();
    AddRankHead();
    InitInput();
    if (config.towers_size() == 0) Fail("model_config.multi_tower.towers is empty");
    towers_ = register_module("towers", GroupTowers(config.towers(), [this](const std::string& group) {
      if (embedding_group().HasSequenceGroup(group) && !embedding_group().HasGroup(group)) {
        Fail("model_config.multi_tower.towers: '", group, "' is a SEQUENCE group; a tower reads a DEEP group ",
             "(use multi_tower_din's din_towers, or nest the sequence in a DEEP group with an encoder)");
      }
      return embedding_group().HasGroup(group) ? InputDim(group) : int64_t{-1};
    }, "model_config.multi_tower.towers"));
    const int64_t total = towers_->output_dim();
    final_ = register_module("final_mlp", MLP(total, config.final(), "model_config.multi_tower.final"));
    output_ = register_module("output_mlp", torch::nn::Linear(final_->output_dim(),
                                                                  static_cast<int64_t>(heads()[0]->num_class())));
  }

  Predictions Predict(const Batch& batch) override {
    std::vector<at::Tensor> parts = towers_->forward(BuildInput(batch));
    at::Tensor joined = parts.size() == 1 ? parts[0] : at::cat(parts, 1);
    return HeadPredictions({output_->forward(final_->forward(joined))});
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    std::vector<std::string> parts = towers_->Script(w, ScriptInput(w, tables));
    std::string joined = parts[0];
    if (parts.size() > 1) joined = w.Let("towers", "torch.cat([" + Join(parts, ", ") + "], 1)");
    ScriptHeadPredictions(w, {ScriptLinear(w, *output_, final_->Script(w, joined, "final_mlp"), "output_mlp")});
  }

 private:
  GroupTowers towers_{nullptr};
  MLP final_{nullptr};
  torch::nn::Linear output_{nullptr};
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<MultiTower>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "multi_tower", Make, "towers.input", "towers.mlp.*", "final.*");

}  // namespace tzrec
