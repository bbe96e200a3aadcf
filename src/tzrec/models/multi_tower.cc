// MultiTower (model_config.multi_tower): one MLP per `towers[].input` DEEP group (the group
// itself when a tower has no mlp), concatenated in config order, then the `final` MLP and
// Linear(num_class). A DEEP group with sequence_groups feeds its pooled features and sequence
// encoders' outputs to its tower.
#include <ATen/ops/cat.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
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
    int64_t total = 0;
    for (int t = 0; t < config.towers_size(); ++t) {
      const auto& tower = config.towers(t);
      const std::string where = StrCat("model_config.multi_tower.towers[", t, "]");
      if (!embedding_group().HasGroup(tower.input()) && !embedding_group().HasSequenceGroup(tower.input())) {
        Fail(where, ".input: no feature group '", tower.input(), "'");
      }
      if (embedding_group().HasSequenceGroup(tower.input()) && !embedding_group().HasGroup(tower.input())) {
        Fail(where, ".input: '", tower.input(), "' is a SEQUENCE group; a tower reads a DEEP group ",
             "(use multi_tower_din's din_towers, or nest the sequence in a DEEP group with an encoder)");
      }
      inputs_.push_back(tower.input());
      const int64_t in = InputDim(tower.input());
      if (tower.has_mlp()) {
        MLP mlp(in, tower.mlp(), where + ".mlp");
        total += mlp->output_dim();
        towers_->push_back(mlp);
        has_mlp_.push_back(true);
      } else {
        total += in;
        towers_->push_back(torch::nn::Identity());
        has_mlp_.push_back(false);
      }
    }
    register_module("towers", towers_);
    final_ = register_module("final_mlp", MLP(total, config.final(), "model_config.multi_tower.final"));
    output_ = register_module("output_mlp", torch::nn::Linear(final_->output_dim(),
                                                                  static_cast<int64_t>(heads()[0]->num_class())));
  }

  Predictions Predict(const Batch& batch) override {
    auto grouped = BuildInput(batch);
    std::vector<at::Tensor> parts;
    for (size_t t = 0; t < inputs_.size(); ++t) {
      const at::Tensor& in = grouped.at(inputs_[t]);
      parts.push_back(has_mlp_[t] ? towers_[t]->as<MLPImpl>()->forward(in) : in);
    }
    at::Tensor joined = parts.size() == 1 ? parts[0] : at::cat(parts, 1);
    return HeadPredictions({output_->forward(final_->forward(joined))});
  }

 private:
  std::vector<std::string> inputs_;
  std::vector<bool> has_mlp_;
  torch::nn::ModuleList towers_;
  MLP final_{nullptr};
  torch::nn::Linear output_{nullptr};
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<MultiTower>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "multi_tower", Make, "towers.input", "towers.mlp.*", "final.*");

}  // namespace tzrec
